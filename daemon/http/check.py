"""``POST /v1/check``: would this ad be flagged? The dedup worker's code on a document not in the database.

The candidate ad (JSON object keyed by field role) becomes an :class:`IndexDocument` exactly as
:meth:`daemon.capture.documents.DocumentBuilder.build` makes one from a row (``coerce_numbers``,
``compute_signature``, ``scope_of``), its candidates come from the index through the backend
protocol and each pair is scored by :func:`daemon.dedup.worker.score_candidates` (``score_pair`` +
``decide``), the function the worker uses, so a check and the flag written after the ad is
inserted agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from daemon.backends.base import IndexBackend, IndexDocument
from daemon.dedup.ids import record_id_key
from daemon.dedup.worker import score_candidates
from daemon.dedup.settings import DedupOptions
from daemon.capture.documents import NUMERIC_ROLES, coerce_numbers, document_from_fields
from daemon.errors import RecordError
from daemon.signatures import SignatureParams

TEXT_ROLES = ("title", "body", "user", "category", "group", "source", "created_at")
MAX_TEXT = 100_000


class InvalidInput(ValueError):
    """A request body that cannot be accepted; ``field`` names the offending key (``"(body)"`` for the whole)."""

    def __init__(self, field: str, message: str) -> None:
        """Args: field: the JSON key at fault. message: what is wrong, for the client."""
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def validate_ad(body: Any, roles: tuple[str, ...], *, reject_unknown: bool, scope: str,
                extra_allowed: tuple[str, ...] = ("id",)) -> tuple[dict[str, Any], str | None]:
    """Check a candidate ad and return its fields (every configured role, missing ones None) and its id.

    Args:
        body: the parsed JSON value.
        roles: the configured field roles (``settings.source.fields`` keys).
        reject_unknown: a key that is no role (nor ``id``) is an error instead of being dropped.
        scope: the candidate scope (``dedup.scope``); its field is required unless ``global``.
        extra_allowed: keys accepted besides the roles (``id``: a record to leave out of the candidates).
    Returns:
        ``(fields, record_id)``: numbers coerced to float (``coerce_numbers``), ``record_id`` text or None.
    Raises:
        InvalidInput: naming the field (wrong type, unparseable number, out-of-range coordinate,
            unknown key under ``reject``, missing scope field, nothing to compare).
    """
    if not isinstance(body, Mapping):
        raise InvalidInput("(body)", f"must be a JSON object, got {type(body).__name__}")
    for key in body:
        if key not in roles and key not in extra_allowed:
            if reject_unknown:
                raise InvalidInput(str(key), f"unknown field (allowed: {', '.join(sorted(roles))})")
    fields: dict[str, Any] = {}
    for role in roles:
        v = body.get(role)
        if v is None:
            fields[role] = None
        elif role in NUMERIC_ROLES:
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise InvalidInput(role, f"must be a number, got {type(v).__name__}")
            fields[role] = v
        else:
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise InvalidInput(role, f"must be a string, got {type(v).__name__}")
            text = str(v)
            if len(text) > MAX_TEXT:
                raise InvalidInput(role, f"longer than {MAX_TEXT} characters")
            fields[role] = text
    try:
        fields = coerce_numbers(fields)
    except RecordError as e:
        raise InvalidInput(str(e).split(":", 1)[0], str(e).split(":", 1)[-1].strip()) from None
    for role, lim in (("lat", 90.0), ("lon", 180.0)):
        v = fields.get(role)
        if v is not None and not -lim <= v <= lim:
            raise InvalidInput(role, f"must be within [-{lim:g}, {lim:g}], got {v}")
    if scope != "global" and scope in roles and fields.get(scope) in (None, ""):
        raise InvalidInput(scope, f"required: candidates are looked up per {scope} (dedup.scope)")
    if not any(fields.get(r) for r in ("title", "body")):
        raise InvalidInput("title", "give a title or a body")
    rid = body.get("id")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (str, int))):
        raise InvalidInput("id", f"must be a string or an integer, got {type(rid).__name__}")
    return fields, (None if rid is None else str(rid))


def build_document(table: str, fields: dict[str, Any], params: SignatureParams, scope: str,
                   record_id: str | None = None) -> IndexDocument:
    """The index document of a candidate ad (:func:`~daemon.capture.documents.document_from_fields`).

    Args:
        table: tracked table name. fields: validated fields (:func:`validate_ad`).
        params: ``[signatures]``. scope: ``dedup.scope``. record_id: its id, if any (else ``""``).
    Returns:
        The document (version 0: it is not stored).
    Raises:
        InvalidInput: (field ``(body)``) the values cannot be signed.
    """
    try:
        return document_from_fields(table, record_id or "", 0, fields, params, scope)
    except RecordError as e:
        raise InvalidInput("(body)", str(e)) from None


@dataclass
class Checker:
    """Runs checks against one table's index.

    Args:
        table: tracked table name (``schema.table``). roles: configured field roles.
        params: signature parameters. options: ``[dedup]`` options. backend: an opened backend.
        max_matches: most matches returned. reject_unknown: see :func:`validate_ad`.
    """

    table: str
    roles: tuple[str, ...]
    params: SignatureParams
    options: DedupOptions
    backend: IndexBackend
    max_matches: int = 5
    reject_unknown: bool = False

    async def check(self, body: Any) -> dict[str, Any]:
        """Validate ``body`` and score it against its candidates.

        Returns:
            ``{"decision": "duplicate"|"potential_duplicate"|"unique", "score": float (0-100, the
            best match's, 0.0 without one), "matches": [{"id", "score", "flag", "reasons",
            "summary"}] (flagged ones, best first, at most ``max_matches``), "signature_version": int,
            "candidates": int (pairs scored), "capped": bool}``.
        Raises:
            InvalidInput: a bad body. TransientIndexError: the index is unreachable.
        """
        scope = self.options.scoring.scope
        fields, rid = validate_ad(body, self.roles, reject_unknown=self.reject_unknown, scope=scope)
        doc = build_document(self.table, fields, self.params, scope, rid)
        res = await score_candidates(self.table, rid, doc, self.backend, self.options)
        flagged = sorted((s for s in res.scored if s.flag is not None),
                         key=lambda s: (-s.score.score, record_id_key(s.candidate.record_id)))
        matches = [{"id": s.candidate.record_id, "score": s.score.score, "flag": s.flag,
                    "reasons": s.score.reasons, "summary": s.score.summary()}
                   for s in flagged[: self.max_matches]]
        best = flagged[0] if flagged else None
        return {"decision": best.flag if best else "unique", "score": best.score.score if best else 0.0,
                "matches": matches, "signature_version": int(doc.signature.get("v", 0)),
                "candidates": len(res.scored), "capped": res.capped}

