"""Request models of ``nearsync serve`` (pydantic v2), the bounded JSON reader and the 422 errors.

Every body, form and query string the service accepts is validated by a model built here before a
handler uses it, and ``/openapi.json`` is generated from the same models (:mod:`daemon.http.openapi`).
The rules, the same for every endpoint:

* integers are 64-bit (``-2**63 .. 2**63-1``); a JSON number with more digits is refused, never
  converted (Python would otherwise build a 5,000-digit integer, or fail past 4,300 digits);
* numbers are finite: ``NaN``, ``Infinity`` and ``1e400`` are refused;
* text is free of NUL characters and lone surrogates (``"\\ud800"``): PostgreSQL cannot store
  either, and neither can be encoded as UTF-8;
* ``price`` is within ``0 .. 1e12`` (:data:`MAX_PRICE`), ``lat`` within ``±90``, ``lon`` within
  ``±180``; as text they must be a plain decimal (``"1,299.00"``, ``"$49"``, ``"1e3"``) whose
  thousands separators group three digits (``"$1,2,3"`` is refused, not read as 123);
* a JSON body nests at most :data:`MAX_DEPTH` arrays/objects deep;
* ``/v1/dedup-set`` takes at most ``--max-set`` (200) items.

Anything else is a 422 ``{"error": message, "field": path}`` where ``path`` names the offending
value (``price``, ``documents[3].lat``, ``ids[0]``; ``(body)`` for the body as a whole).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, WithJsonSchema, create_model

from daemon.scoring.metrics import MAX_PRICE  # the scorer's bound (1e12): the API refuses what it would ignore
from daemon.scoring.numbers import MAX_NUMBER_TEXT, NUMBER_RANGES, NUMBER_TEXT, parse_number, typed_value

__all__ = ["MAX_PRICE", "InvalidInput", "RequestModels", "build_models", "parse_json", "validate"]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_TEXT = 100_000
"""Most characters of a text field (title, body, ...)."""
MAX_ID = 1_000
"""Most characters of a record id given as text."""
MAX_NAME = 200
"""Most characters of a short text parameter (a category filter)."""
MAX_DEPTH = 16
"""Deepest nesting of arrays/objects accepted in a JSON body (the deepest valid body nests 3)."""

TEXT_ROLES = ("title", "body", "user", "category", "group", "source", "created_at")


class InvalidInput(ValueError):
    """A request that cannot be accepted; ``field`` names the offending value (``"(body)"`` for the whole)."""

    def __init__(self, field: str, message: str) -> None:
        """Args: field: path of the value at fault (``price``, ``ids[3]``). message: what is wrong, for the client."""
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# -- the JSON reader -------------------------------------------------------------------------------

class HugeNumber:
    """A JSON integer with more than 19 digits, kept as its digit count instead of being converted.

    Validators refuse it as out of range; nothing ever builds the integer (a 5,000-digit one would
    raise ``ValueError`` in ``int()`` and cost quadratic time well before that).
    """

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        """Args: digits: how many digits the number had."""
        self.digits = digits

    def __repr__(self) -> str:
        """``HugeNumber(<n> digits)``."""
        return f"HugeNumber({self.digits} digits)"


def _parse_int(text: str) -> int | HugeNumber:
    digits = len(text) - (text[0] == "-")
    return HugeNumber(digits) if digits > 19 else int(text)


def _check_tree(value: Any) -> None:
    """Refuse a parsed JSON value nested deeper than :data:`MAX_DEPTH`, or with an object key that
    holds a NUL or a lone surrogate (walked without recursion).

    Raises:
        InvalidInput: ``(body)`` for the depth; the key's path for a bad key.
    """
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 0, ())]
    while stack:
        v, d, path = stack.pop()
        d += 1
        if d > MAX_DEPTH:
            raise InvalidInput("(body)", f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, dict):
            for k, x in v.items():
                try:
                    clean_text(k)
                except ValueError as e:
                    raise InvalidInput(field_path((*path, k)), f"the key {e}") from None
                if isinstance(x, (dict, list)):
                    stack.append((x, d, (*path, k)))
        else:
            stack.extend((x, d, (*path, i)) for i, x in enumerate(v) if isinstance(x, (dict, list)))


def parse_json(raw: bytes) -> Any:
    """Parse a JSON request body under this module's rules.

    Integers of more than 19 digits become :class:`HugeNumber`; ``NaN``/``Infinity`` parse as
    floats (the models refuse them, naming the field).

    Args:
        raw: the body bytes (UTF-8).
    Returns:
        The parsed value.
    Raises:
        InvalidInput: (field ``(body)``) not UTF-8, not JSON, or nested deeper than :data:`MAX_DEPTH`;
            (the key's path) an object key with a NUL or a lone surrogate.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput("(body)", f"not valid UTF-8 (byte {e.start})") from None
    try:
        value = json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise InvalidInput("(body)", f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        raise InvalidInput("(body)", f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if isinstance(value, (dict, list)):
        _check_tree(value)
    return value


# -- value validators ------------------------------------------------------------------------------

def clean_text(value: str) -> str:
    """``value`` itself when PostgreSQL can store it and it encodes as UTF-8.

    Raises:
        ValueError: it holds a NUL character or a lone surrogate.
    """
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains a lone surrogate (not valid Unicode)") from None
    return value


def _int64(value: int) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("integer outside the 64-bit range")
    return value


def record_id(value: Any) -> str:
    """A record id: non-empty text (at most :data:`MAX_ID` characters) or a 64-bit integer, as text.

    Raises:
        ValueError: anything else (the message says why).
    """
    if isinstance(value, str):
        if not value:
            raise ValueError("must not be empty")
        if len(value) > MAX_ID:
            raise ValueError(f"longer than {MAX_ID} characters")
        return clean_text(value)
    if isinstance(value, HugeNumber):
        raise ValueError("integer outside the 64-bit range")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(_int64(value))
    raise ValueError("must be a record id (a string or an integer)")


def text_value(value: Any) -> str | None:
    """A text field (title, body, user, ...): text, or a 64-bit integer or finite number made text.

    Returns:
        The text (at most :data:`MAX_TEXT` characters), or None for null.
    Raises:
        ValueError: another type, NUL, a lone surrogate, too long, or a non-finite/out-of-range number.
    """
    if value is None:
        return None
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ValueError(f"longer than {MAX_TEXT} characters")
        return clean_text(value)
    if isinstance(value, HugeNumber):
        raise ValueError("integer outside the 64-bit range")
    if isinstance(value, bool):
        raise ValueError("must be a string, got a boolean")
    if isinstance(value, int):
        return str(_int64(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return str(value)
    raise ValueError(f"must be a string, got {_json_type(value)}")


def number_value(value: Any, low: float, high: float, *, low_open: bool = False) -> float | None:
    """A number within ``[low, high]`` (``(low, high]`` with ``low_open``), from JSON or from text:
    :func:`daemon.scoring.numbers.parse_number` (the rule rows of the tracked table follow too), after
    refusing an integer too long to have been converted.

    Returns:
        The value as a float, or None for null/blank text.
    Raises:
        ValueError: not a number (booleans included), malformed text, not finite, or out of range.
    """
    if isinstance(value, HugeNumber):
        raise ValueError(f"must be within [{low:g}, {high:g}]")
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise ValueError(f"must be a number, got {_json_type(value)}")
    return parse_number(value, low, high, low_open=low_open)


def int_value(value: Any, low: int, high: int) -> int | None:
    """An integer within ``[low, high]``, from JSON or decimal text (query strings); None for null/blank.

    Raises:
        ValueError: not an integer, or out of range.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]{1,19}\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be an integer")
    if not low <= value <= high:
        raise ValueError(f"must be within [{low}, {high}]")
    return value


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(type(value), "a number")


# -- annotated types (validation + JSON schema) ----------------------------------------------------

_NO_NUL = "^[^\\u0000]*$"
_ID_SCHEMA = {"anyOf": [{"type": "string", "minLength": 1, "maxLength": MAX_ID, "pattern": _NO_NUL},
                        {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX}]}

RecordId = Annotated[str, PlainValidator(record_id), WithJsonSchema(
    _ID_SCHEMA | {"description": "a record id: text (no NUL) or a 64-bit integer"})]
RecordIdText = Annotated[str, PlainValidator(lambda v: record_id(v) if isinstance(v, str) else _not_text(v)),
                         WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_ID, "pattern": _NO_NUL})]
Text = Annotated[str | None, PlainValidator(text_value), WithJsonSchema(
    {"anyOf": [{"type": "string", "maxLength": MAX_TEXT, "pattern": _NO_NUL},
               {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX}, {"type": "number"},
               {"type": "null"}]})]


def _not_text(value: Any) -> str:
    raise ValueError(f"must be a string, got {_json_type(value)}")


def _number_type(role: str) -> Any:
    low, high = NUMBER_RANGES[role]
    return Annotated[float | None, PlainValidator(lambda v: number_value(v, low, high)), WithJsonSchema(
        {"anyOf": [{"type": "number", "minimum": low, "maximum": high},
                   {"type": "string", "maxLength": MAX_NUMBER_TEXT, "pattern": NUMBER_TEXT.pattern},
                   {"type": "null"}],
         "description": f"a number within [{low:g}, {high:g}], or text such as \"1,299.00\""})]


def _typed_value(metric: str, value: Any) -> Any:
    """A ``numeric`` / ``date`` field's value as a row's would be stored
    (:func:`daemon.scoring.numbers.typed_value`). Raises ValueError: it does not parse."""
    if isinstance(value, HugeNumber):
        raise ValueError("must be a number of at most 64 bits" if metric == "numeric" else "must be an ISO 8601 date")
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise ValueError(f"must be {'a number' if metric == 'numeric' else 'an ISO 8601 date text'}, "
                         f"got {_json_type(value)}")
    if metric == "date" and not (value is None or isinstance(value, str)):
        raise ValueError(f"must be an ISO 8601 date or timestamp text, got {_json_type(value)}")
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise ValueError(f"longer than {MAX_TEXT} characters")
    return typed_value(metric, value)


def _typed_type(metric: str) -> Any:
    """The model type of a mapped field scored ``numeric`` or ``date`` (``[dedup.fields.NAME]``)."""
    if metric == "numeric":
        schema: dict[str, Any] = {"anyOf": [{"type": "number"}, {"type": "string", "maxLength": MAX_NUMBER_TEXT,
                                                                  "pattern": NUMBER_TEXT.pattern}, {"type": "null"}],
                                  "description": "a number, or text such as \"1,299.00\""}
        return Annotated[float | None, PlainValidator(lambda v: _typed_value("numeric", v)), WithJsonSchema(schema)]
    schema = {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"},
                        {"type": "null"}], "description": "an ISO 8601 date or timestamp"}
    return Annotated[str | None, PlainValidator(lambda v: _typed_value("date", v)), WithJsonSchema(schema)]


def _ref(value: Any) -> tuple[str, int | None]:
    if isinstance(value, dict):
        extra = set(value) - {"id", "version"}
        if extra:
            raise ValueError(f"unknown key {sorted(map(str, extra))[0][:40]!r} (allowed: id, version)")
        if "id" not in value:
            raise ValueError("an {id, version} reference needs an id")
        version = value.get("version")
        if version is not None:
            if isinstance(version, HugeNumber) or isinstance(version, bool) or not isinstance(version, int):
                raise ValueError("version must be a 64-bit integer")
            _int64(version)
        return record_id(value["id"]), version
    return record_id(value), None


IdRef = Annotated[tuple[str, int | None], PlainValidator(_ref), WithJsonSchema(
    {"anyOf": [*_ID_SCHEMA["anyOf"],
               {"type": "object", "required": ["id"], "additionalProperties": False,
                "properties": {"id": _ID_SCHEMA, "version": {"type": "integer", "minimum": INT64_MIN,
                                                             "maximum": INT64_MAX}}}],
     "description": "a record id, or {id, version} to use the cached sketch of that document version only"})]


# -- models ----------------------------------------------------------------------------------------

class DecideForm(BaseModel):
    """``POST /moderation/decide`` (form fields). Who decides comes from the credential, never the form."""

    model_config = ConfigDict(extra="ignore")

    record_id: RecordIdText
    original_id: RecordIdText
    action: Literal["confirm", "dismiss"]
    csrf_token: str | None = Field(None, max_length=200, description="the page's CSRF token (not needed with "
                                                                     "X-API-Key)")
    category: Annotated[str | None, PlainValidator(lambda v: _short_text(v)), WithJsonSchema(
        {"type": "string", "maxLength": MAX_NAME, "pattern": _NO_NUL})] = Field(
        None, description="the queue's filter to return to")
    min_score: Annotated[float | None, PlainValidator(lambda v: number_value(v, 0.0, 100.0)), WithJsonSchema(
        {"type": "number", "minimum": 0, "maximum": 100})] = Field(None, description="the queue's filter to return to")


class LoginForm(BaseModel):
    """``POST /login`` (form fields): the API key of a moderator, exchanged for a session cookie."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(min_length=1, max_length=1000, description="an API key (NEARSYNC_API_KEY)")
    csrf_token: str = Field(max_length=200, description="the login form's CSRF token")


class QueueQuery(BaseModel):
    """``GET /moderation`` query: filters of the duplicates queue (blank values mean no filter)."""

    model_config = ConfigDict(extra="ignore")

    category: Annotated[str | None, PlainValidator(lambda v: _short_text(v)), WithJsonSchema(
        {"type": "string", "maxLength": MAX_NAME, "pattern": _NO_NUL})] = None
    min_score: Annotated[float | None, PlainValidator(lambda v: number_value(v, 0.0, 100.0)), WithJsonSchema(
        {"type": "number", "minimum": 0, "maximum": 100})] = None
    limit: Annotated[int | None, PlainValidator(lambda v: int_value(v, 1, 500)), WithJsonSchema(
        {"type": "integer", "minimum": 1, "maximum": 500, "default": 50})] = None


def _short_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return _not_text(value)
    if len(value) > MAX_NAME:
        raise ValueError(f"longer than {MAX_NAME} characters")
    return clean_text(value)


class MatchOut(BaseModel):
    """One match of a check (response)."""

    id: str
    score: float = Field(ge=0, le=100)
    flag: Literal["duplicate", "potential_duplicate"]
    reasons: dict[str, dict[str, Any]]
    summary: str


class CheckResult(BaseModel):
    """``POST /v1/check`` answer."""

    decision: Literal["duplicate", "potential_duplicate", "unique"]
    score: float = Field(ge=0, le=100, description="the best match's score, 0 without one")
    matches: list[MatchOut]
    signature_version: int
    candidates: int = Field(ge=0, description="pairs scored")
    capped: bool
    took_ms: float = Field(ge=0)


class DedupSetResult(BaseModel):
    """``POST /v1/dedup-set`` answer. A ref is a record id, or a document's position without an id."""

    groups: list[list[str | int]] = Field(description="near-duplicate groups (2+ members); the first is the one "
                                                      "to keep")
    keep: list[str | int] = Field(description="the first member of every group and every singleton, ranking order")
    missing: list[str] = Field(description="ids not in the index (kept, never grouped)")
    threshold: float
    cached: int = Field(ge=0)
    took_ms: float = Field(ge=0)


class ErrorOut(BaseModel):
    """An error answer: what is wrong and, for a 422, which value."""

    error: str
    field: str | None = Field(None, description="path of the offending value, e.g. price, documents[3].lat, (body)")


class HealthOut(BaseModel):
    """``GET /healthz`` answer."""

    ok: bool
    database: Literal["ok", "unreachable", "not migrated"]
    index: Literal["open", "closed"]


@dataclass(frozen=True)
class RequestModels:
    """The models of one service (the ad's fields depend on the configured roles and options).

    Attributes:
        ad: the candidate ad of ``/v1/check`` (its scope field required).
        dedup_set: the ``/v1/dedup-set`` body. decide: the decision form. login: the login form.
        queue: the ``/moderation`` query.
    """

    ad: type[BaseModel]
    dedup_set: type[BaseModel]
    decide: type[BaseModel] = DecideForm
    login: type[BaseModel] = LoginForm
    queue: type[BaseModel] = QueueQuery


def build_models(roles: Iterable[str], *, reject_unknown: bool, max_set: int, default_threshold: float,
                 scope: str = "global", typed: Mapping[str, str] | None = None) -> RequestModels:
    """The request models for the configured field ``roles`` and the service options.

    Args:
        roles: configured field names (``settings.source.fields`` keys: fixed roles and other
            mapped names alike, e.g. ``authors``; every one is accepted as text unless ``typed``).
        typed: field -> ``"numeric"`` / ``"date"`` (:func:`daemon.dedup.settings.typed_fields`):
            such a field must be a number / an ISO 8601 date, as a row's must (else a 422 naming it).
        reject_unknown: a key that is no role (nor ``id``) is refused (else ignored).
        max_set: most items of a ``/v1/dedup-set`` request. default_threshold: its default threshold.
        scope: ``dedup.scope``: the field a check must give (its key is required; ``global``: none).
    Returns:
        :class:`RequestModels`.
    """
    fields: dict[str, Any] = {}
    for role in roles:
        if role in NUMBER_RANGES:
            fields[role] = (_number_type(role), None)
        elif role in (typed or {}):
            fields[role] = (_typed_type((typed or {})[role]), None)
        else:
            fields[role] = (Text, None)
    fields["id"] = (RecordId | None, Field(None, description="a record to leave out of the candidates (checking "
                                                              "an edit of a stored ad)"))
    extra = "forbid" if reject_unknown else "ignore"
    title_or_body = [{"required": [r]} for r in ("title", "body") if r in fields]
    check_fields = dict(fields)
    if scope in check_fields and scope != "id":
        check_fields[scope] = (Text, Field(description=f"required: candidates are looked up per {scope} "
                                                       "(dedup.scope)"))
    ad = create_model("Ad", __config__=ConfigDict(extra=extra, json_schema_extra={"anyOf": title_or_body}),
                      __doc__=("A candidate ad keyed by field role. Needs a title or a body, and the scope field "
                               "(dedup.scope, e.g. user) unless the scope is global."), **check_fields)
    document = create_model("Document", __config__=ConfigDict(extra=extra, json_schema_extra={"anyOf": title_or_body}),
                            __doc__="An ad of a /v1/dedup-set request, keyed by field role; needs a title or a body.",
                            **fields)
    threshold = Annotated[float, PlainValidator(lambda v: number_value(v, 0.0, 1.0, low_open=True)), WithJsonSchema(
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": default_threshold})]
    dedup_set = create_model(
        "DedupSetRequest", __config__=ConfigDict(extra=extra),
        __doc__="Exactly one of ids or documents, in ranking order. A repeated id is grouped once (its first place).",
        ids=(list[IdRef] | None, Field(None, max_length=max_set)),
        documents=(list[document] | None, Field(None, max_length=max_set)),  # type: ignore[valid-type]
        threshold=(threshold, default_threshold))
    return RequestModels(ad=ad, dedup_set=dedup_set)


# -- errors ----------------------------------------------------------------------------------------

def printable(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters with unprintable ones (NUL, lone surrogates) escaped, safe to echo."""
    text = text[:limit]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def field_path(loc: Iterable[Any]) -> str:
    """``("documents", 3, "lat")`` -> ``"documents[3].lat"``; ``()`` -> ``"(body)"``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + printable(str(part), 80))
    return out or "(body)"


def _message(err: Mapping[str, Any], allowed: Callable[[], str]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return f"unknown field (allowed: {allowed()})" if len(err.get("loc", ())) == 1 else "unknown field"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "must be a JSON object"
    if kind == "missing":
        return "required"
    if kind == "list_type":
        return "must be a list"
    if kind == "too_long":
        return f"at most {err.get('ctx', {}).get('max_length')} items"
    msg = str(err.get("msg", "invalid"))
    return printable(msg.removeprefix("Value error, "))


def validate(model: type[BaseModel], data: Any, prefix: tuple[Any, ...] = ()) -> BaseModel:
    """``model.model_validate(data)``, a failure turned into :class:`InvalidInput` naming the first bad value.

    Args:
        model: a model of this module. data: the parsed body / form / query.
        prefix: path of ``data`` inside the request (for nested items).
    Raises:
        InvalidInput: the data does not fit the model.
    """
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False, include_input=False)[0]
        loc = (*prefix, *err["loc"])
        allowed = lambda: ", ".join(sorted(model.model_fields))  # noqa: E731
        raise InvalidInput(field_path(loc), _message(err, allowed)) from None
