"""The ``nearsync serve`` application (Starlette): check API, result-set dedup, duplicates queue.

Routes: ``POST /v1/check``, ``POST /v1/dedup-set``, ``GET /moderation``, ``POST /moderation/decide``,
``GET|POST /login``, ``POST /logout``, ``GET /openapi.json``, ``GET /healthz``.

* Authentication (:mod:`daemon.http.auth`): with API keys configured every route but ``/healthz``
  and ``/login`` needs the ``X-API-Key`` header or a session cookie from ``/login`` (401 otherwise;
  a browser asking for ``/moderation`` is sent to ``/login``). Every POST made with the session
  cookie (or with no credential, when no keys are configured) carries the session's CSRF token.
* Requests whose ``Host`` is not an allowed host get 400 (``TrustedHostMiddleware``: DNS rebinding).
* Validation (:mod:`daemon.http.models`, pydantic): errors are 422 ``{"error", "field"}``. Bodies
  larger than ``max_body_bytes`` get 413: at once when ``Content-Length`` says so, else as soon as
  the streamed body passes the limit. ``/v1/*`` take ``Content-Type: application/json`` only (415).
* PostgreSQL or the index unreachable: 503 (``/healthz`` too, so a probe sees it).

Build with :func:`create_app`; the lifespan opens the configured backend
(:func:`daemon.service.opened_backend`) and a small PostgreSQL pool for the moderation queries.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from daemon.http.auth import (SESSION_COOKIE, BadKey, Principal, authenticate, csrf_ok, csrf_token, flash,
                              login_page, sign_in, take_flash)
from daemon.http.check import Checker
from daemon.http.models import InvalidInput, RequestModels, build_models, parse_json, printable, validate
from daemon.http.options import ApiOptions
from daemon.http.dedup_set import SetDeduplicator, SignatureCache
from daemon.http.moderation import DecisionError, back_url, decide_pair, load_queue, render_page
from daemon.http.openapi import openapi_schema
from daemon.backends.base import TransientIndexError
from daemon.config import Settings
from daemon.db.queries import query
from daemon.dedup.settings import dedup_options, typed_fields
from daemon.capture.documents import require_signatures, warm_signatures
from daemon.logs import get_logger
from daemon.db.pool import configure_session
from daemon.service import opened_backend, require_candidate_store
from daemon.signatures import SignatureParams

log = get_logger("nearsync.api")

DB_TIMEOUT_S = 5.0
"""How long a request waits for a PostgreSQL connection before answering 503 (seconds)."""
HEALTH_TIMEOUT_S = 2.0
"""How long ``/healthz`` waits for PostgreSQL (seconds)."""
PAGE_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
                "Referrer-Policy": "same-origin",  # "no-referrer" makes Chromium send Origin: null
                "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                           "script-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"}
FORM_FIELDS_MAX = 50


class BodyTooLarge(Exception):
    """The request body exceeds ``max_body_bytes``."""


class DatabaseUnavailable(Exception):
    """PostgreSQL cannot be reached, or the nearsync schema is missing (answered 503)."""


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes.

    Checks ``Content-Length`` first (nothing read), then caps the streamed read (chunked bodies,
    lying headers).

    Raises:
        BodyTooLarge: over the limit. InvalidInput: a malformed Content-Length.
    """
    cl = request.headers.get("content-length")
    if cl is not None:
        if not re.fullmatch(r"\s*[0-9]{1,18}\s*", cl):
            raise InvalidInput("Content-Length", "not an integer")
        if int(cl) > limit:
            raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def _form_or_error(request: Request, limit: int, too_large: str = "body too large") -> dict[str, str] | Response:
    """:func:`read_form`, or the error response for its failure: 413 (``too_large``) over ``limit``
    bytes, 422 naming the field for a body that is not a valid form."""
    try:
        return await read_form(request, limit)
    except BodyTooLarge:
        return _error(413, too_large)
    except InvalidInput as e:
        return _error(422, e.message, e.field)


async def read_form(request: Request, limit: int) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (last value of a repeated field wins).

    Raises:
        BodyTooLarge: over ``limit`` bytes. InvalidInput: (``(body)``) not UTF-8, or too many fields.
    """
    raw = await read_body(request, limit)
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=FORM_FIELDS_MAX,
                          errors="strict")
    except UnicodeDecodeError:
        raise InvalidInput("(body)", "not valid UTF-8") from None
    except ValueError:
        raise InvalidInput("(body)", f"more than {FORM_FIELDS_MAX} fields") from None
    return dict(pairs)


class ApiState:
    """What the handlers share: options, models, checker, set deduplicator, pool and backend (set by the lifespan)."""

    def __init__(self, settings: Settings, options: ApiOptions) -> None:
        """Validate the settings (fail fast). Raises ConfigError naming the key."""
        self.settings = settings
        self.options = options
        self.dedup = dedup_options(settings)
        self.params = SignatureParams.from_mapping(settings.signatures)
        require_signatures(settings, "the check API")
        self.table = settings.source.qualified
        self.roles = tuple(settings.source.fields)
        self.columns = dict(settings.source.fields)
        self.models: RequestModels = build_models(self.roles, reject_unknown=options.unknown_fields == "reject",
                                                  max_set=options.max_set,
                                                  default_threshold=options.default_threshold,
                                                  scope=self.dedup.scoring.scope,
                                                  typed=typed_fields(settings))
        self.cache = SignatureCache(options.cache_size, options.cache_ttl_s)
        self.checker: Checker | None = None
        self.setdedup: SetDeduplicator | None = None
        self.pool: AsyncConnectionPool | None = None


def _error(status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON error; message and field are cut and escaped (a lone surrogate could not be encoded)."""
    body: dict[str, Any] = {"error": printable(message, 300)}
    if field is not None:
        body["field"] = printable(field, 200)
    return JSONResponse(body, status_code=status, headers=headers)


def _state(request: Request) -> ApiState:
    return request.app.state.api  # type: ignore[no-any-return]


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _caller(request: Request) -> tuple[Principal | None, Response | None]:
    """``(principal, None)`` when allowed, else ``(None, 401 response or a redirect to /login)``."""
    try:
        who = authenticate(request, _state(request).options)
    except BadKey:
        return None, _error(401, "wrong X-API-Key", headers={"WWW-Authenticate": "X-API-Key"})
    if who is None:
        if request.method == "GET" and _wants_html(request):
            return None, RedirectResponse("/login", status_code=303)
        return None, _error(401, "sign in at /login or send X-API-Key", headers={"WWW-Authenticate": "X-API-Key"})
    return who, None


def _same_origin(request: Request) -> bool:
    """No ``Origin`` header (not a browser's cross-site request), or one naming this very host."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin != "null" and urlsplit(origin).netloc == request.headers.get("host")


def _post_guard(request: Request, who: Principal, token: str | None) -> Response | None:
    """The CSRF checks of a POST: same origin, and the session's token unless the caller used X-API-Key."""
    if not _same_origin(request):
        return _error(403, "cross-origin request refused")
    if who.needs_csrf and not csrf_ok(request, token or request.headers.get("x-csrf-token")):
        return _error(403, "missing or wrong CSRF token: reload the page", "csrf_token")
    return None


async def _json_call(request: Request, what: str, call: Callable[[Any], Awaitable[dict[str, Any]]]) -> Response:
    """Authenticate, read the JSON body (size-capped), run ``call`` on it and answer JSON with ``took_ms``.

    Maps BodyTooLarge to 413, a content type other than JSON to 415, InvalidInput to 422 (``field``
    named) and an unreachable index to 503.
    """
    who, denied = _caller(request)
    if denied:
        return denied
    assert who is not None
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        return _error(415, "send Content-Type: application/json", "Content-Type")
    if who.via == "session" and (bad := _post_guard(request, who, None)):
        return bad
    limit = _state(request).options.max_body_bytes
    t0 = time.perf_counter()
    try:
        body = parse_json(await read_body(request, limit))
        async with _db_errors(what):
            result = await call(body)
    except BodyTooLarge:
        return _error(413, f"body larger than {limit} bytes")
    except InvalidInput as e:
        return _error(422, e.message, e.field)
    except TransientIndexError as e:
        log.warning("index unreachable", during=what, error=str(e)[:200])
        return _error(503, "index unreachable, retry later", headers={"Retry-After": "5"})
    except DatabaseUnavailable as e:  # the postgres backend: server down, or never migrated
        return _error(503, str(e), headers={"Retry-After": "5"})
    result["took_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return JSONResponse(result)


async def check(request: Request) -> Response:
    """POST /v1/check: score a candidate ad against the index (see :meth:`Checker.check`)."""
    checker = _state(request).checker
    assert checker is not None
    return await _json_call(request, "check", checker.check)


async def dedup_set(request: Request) -> Response:
    """POST /v1/dedup-set: near-duplicate groups within a ranked set (see :meth:`SetDeduplicator.dedup`)."""
    setdedup = _state(request).setdedup
    assert setdedup is not None
    return await _json_call(request, "dedup-set", setdedup.dedup)


def _db_errors(what: str) -> Any:
    """Context manager mapping PostgreSQL failures to :class:`DatabaseUnavailable` (logged without the DSN)."""

    @asynccontextmanager
    async def guard() -> AsyncIterator[None]:
        try:
            yield
        except psycopg.errors.UndefinedTable as e:
            log.warning("nearsync schema missing", during=what, error=str(e).splitlines()[0][:200])
            raise DatabaseUnavailable("the nearsync schema is missing: run nearsync migrate") from None
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as e:
            log.warning("database unreachable", during=what, error=type(e).__name__)
            raise DatabaseUnavailable("database unreachable, retry later") from None

    return guard()


async def moderation_page(request: Request) -> Response:
    """GET /moderation: the duplicates queue (``?category=&min_score=&limit=``, validated: 422 naming the field)."""
    who, denied = _caller(request)
    if denied:
        return denied
    assert who is not None
    st = _state(request)
    assert st.pool is not None
    try:
        q = validate(st.models.queue, dict(request.query_params))
    except InvalidInput as e:
        return _error(422, e.message, e.field)
    category, min_score, limit = getattr(q, "category"), getattr(q, "min_score"), getattr(q, "limit") or 50
    try:
        async with _db_errors("moderation page"), st.pool.connection(timeout=DB_TIMEOUT_S) as conn:
            items, cats, category = await load_queue(conn, st.columns.get("category"), category=category,
                                                     min_score=min_score, limit=limit)
    except DatabaseUnavailable as e:
        return _error(503, str(e), headers={"Retry-After": "5"})
    page = render_page(items, cats, st.columns, category=category, min_score=min_score, user=who.name,
                       csrf=csrf_token(request), signed_in=who.via == "session", message=take_flash(request))
    return HTMLResponse(page, headers=PAGE_HEADERS)


async def moderation_decide(request: Request) -> Response:
    """POST /moderation/decide: confirm or dismiss a flag (form fields record_id, original_id, action, csrf_token).

    The moderator is the caller's credential (the key's name; ``anonymous`` without keys). Browsers
    get a 303 back to the queue with the outcome in the session; ``Accept: application/json`` gets JSON.
    """
    who, denied = _caller(request)
    if denied:
        return denied
    assert who is not None
    st = _state(request)
    assert st.pool is not None
    wants_json = "application/json" in request.headers.get("accept", "")
    form = await _form_or_error(request, st.options.max_body_bytes,
                                f"body larger than {st.options.max_body_bytes} bytes")
    if isinstance(form, Response):
        return form
    if bad := _post_guard(request, who, form.get("csrf_token")):
        return bad
    try:
        f = validate(st.models.decide, form)
    except InvalidInput as e:
        return _error(422, e.message, e.field)
    record_id, original_id, action = getattr(f, "record_id"), getattr(f, "original_id"), getattr(f, "action")
    back = back_url(getattr(f, "category"), getattr(f, "min_score"))
    try:
        async with _db_errors("moderation decision"), st.pool.connection(timeout=DB_TIMEOUT_S) as conn:
            d = await decide_pair(conn, st.checker.backend if st.checker else None,  # type: ignore[arg-type]
                                  st.table, record_id, original_id, action, who.name)
    except DatabaseUnavailable as e:
        return _error(503, str(e), headers={"Retry-After": "5"})
    except TransientIndexError:
        return _error(503, "index unreachable, retry later", headers={"Retry-After": "5"})
    except DecisionError as e:
        if wants_json:
            return _error(e.status, e.message, "record_id")
        flash(request, "error", e.message)
        return RedirectResponse(back, status_code=303)
    log.info("moderation decision", table=st.table, a=d.a, b=d.b, decision=d.decision, moderator=d.decided_by)
    if wants_json:
        return JSONResponse({"a": d.a, "b": d.b, "decision": d.decision, "decided_by": d.decided_by})
    verb = "confirmed as duplicate" if d.decision == "duplicate" else "dismissed (not a duplicate)"
    flash(request, "status", f"#{record_id} {verb}.")
    return RedirectResponse(back, status_code=303)


async def login(request: Request) -> Response:
    """GET /login: the sign-in form. POST /login (form ``key``, ``csrf_token``): open a session, 303 to the queue.

    A wrong key answers 401 with the form again (a fixed message); nothing typed is echoed.
    """
    st = _state(request)
    if request.method == "GET":
        return HTMLResponse(login_page(csrf_token(request)), headers=PAGE_HEADERS)
    form = await _form_or_error(request, min(st.options.max_body_bytes, 16_384))
    if isinstance(form, Response):
        return form
    if not _same_origin(request) or not csrf_ok(request, form.get("csrf_token")):
        return _error(403, "missing or wrong CSRF token: reload the sign-in page", "csrf_token")
    try:
        f = validate(st.models.login, form)
    except InvalidInput as e:
        return _error(422, e.message, e.field)
    if st.options.open:
        return RedirectResponse("/moderation", status_code=303)
    name = sign_in(request, st.options, getattr(f, "key"))
    if name is None:
        log.info("sign-in refused")
        return HTMLResponse(login_page(csrf_token(request), failed=True), status_code=401, headers=PAGE_HEADERS)
    log.info("signed in", moderator=name)
    return RedirectResponse("/moderation", status_code=303)


async def logout(request: Request) -> Response:
    """POST /logout (form ``csrf_token``): end the session, 303 to /login."""
    form = await _form_or_error(request, 16_384)
    if isinstance(form, Response):
        return form
    if not _same_origin(request) or not csrf_ok(request, form.get("csrf_token")):
        return _error(403, "missing or wrong CSRF token", "csrf_token")
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


async def openapi(request: Request) -> Response:
    """GET /openapi.json: the OpenAPI 3.1 description of this service (generated from the models)."""
    _, denied = _caller(request)
    if denied:
        return denied
    st = _state(request)
    return JSONResponse(openapi_schema(st.models, st.options))


async def healthz(request: Request) -> Response:
    """GET /healthz (no authentication): 200 ``{"ok": true, ...}`` when the backend is open and
    PostgreSQL answers with the nearsync schema; 503 with what is wrong otherwise."""
    st = _state(request)
    database = "unreachable"
    if st.pool is not None:
        try:
            async with st.pool.connection(timeout=HEALTH_TIMEOUT_S) as conn:
                cur = await conn.execute(query("serve_health"))
                row = await cur.fetchone()
                database = "ok" if row and row[0] else "not migrated"
        except (psycopg.Error, PoolTimeout):
            database = "unreachable"
    index = "open" if st.checker is not None else "closed"
    ok = database == "ok" and index == "open"
    return JSONResponse({"ok": ok, "database": database, "index": index}, status_code=200 if ok else 503,
                        headers={"Cache-Control": "no-store"})


def create_app(settings: Settings, options: ApiOptions | None = None) -> Starlette:
    """The application for ``settings`` (validated now; backend and pool opened by the lifespan).

    Args:
        settings: nearsync settings. options: the service options (keys, limits, allowed hosts).
    Returns:
        The Starlette app, wrapped in TrustedHostMiddleware and SessionMiddleware.
    Raises:
        ConfigError: invalid ``[dedup]`` / ``[signatures]`` settings or options (the key is named).
    """
    st = ApiState(settings, options or ApiOptions())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with opened_backend(settings) as backend:
            await require_candidate_store(backend, st.table)
            pool = AsyncConnectionPool(settings.require_dsn(), min_size=1, max_size=4, open=False,
                                       timeout=DB_TIMEOUT_S, kwargs={"autocommit": True},
                                       configure=configure_session)
            await pool.open()
            st.pool = pool
            st.checker = Checker(st.table, st.models.ad, st.params, st.dedup, backend, st.options.max_matches, pool)
            st.setdedup = SetDeduplicator(st.table, backend, st.params, st.models.dedup_set, st.cache)
            warm_signatures(st.params)  # not on the first /v1/check (~130 ms)
            # Latency: move everything alive after start-up (libraries, configuration, the backend)
            # out of the collector's reach, so a full collection scans only what requests create
            # (Python's gc.freeze, as recommended for pre-fork servers). Undone at shutdown.
            gc.collect()
            gc.freeze()
            try:
                yield
            finally:
                gc.unfreeze()
                st.checker = st.setdedup = None
                await pool.close()

    opts = st.options
    app = Starlette(routes=[
        Route("/v1/check", check, methods=["POST"]),
        Route("/v1/dedup-set", dedup_set, methods=["POST"]),
        Route("/moderation", moderation_page, methods=["GET"]),
        Route("/moderation/decide", moderation_decide, methods=["POST"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ], middleware=[
        Middleware(TrustedHostMiddleware, allowed_hosts=list(opts.allowed_hosts), www_redirect=False),
        Middleware(SessionMiddleware, secret_key=opts.session_secret, session_cookie=SESSION_COOKIE,
                   max_age=opts.session_max_age_s, same_site="strict", https_only=opts.secure_cookies),
    ], lifespan=lifespan)
    app.state.api = st
    return app
