"""The ``nearsync serve`` application (Starlette): check API, result-set dedup, duplicates queue.

Routes: ``POST /v1/check``, ``POST /v1/dedup-set``, ``GET /moderation``, ``POST /moderation/decide``,
``GET /openapi.json``, ``GET /healthz``. With API keys configured every route but ``/healthz``
needs the ``X-API-Key`` header (401 otherwise). Bodies larger than ``max_body_bytes`` get 413: at
once when ``Content-Length`` says so, else as soon as the streamed body passes the limit.
Validation errors are 422 ``{"error", "field"}``.

Build with :func:`create_app`; the lifespan opens the configured backend
(:func:`daemon.service.opened_backend`) and a small PostgreSQL pool for the moderation queries.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from daemon.http.check import Checker, InvalidInput
from daemon.http.options import ApiOptions
from daemon.http.dedup_set import SetDeduplicator, SignatureCache
from daemon.http.moderation import DecisionError, back_url, decide_pair, load_queue, render_page
from daemon.http.openapi import openapi_schema
from daemon.backends.base import TransientIndexError
from daemon.config import Settings
from daemon.dedup.settings import dedup_options
from daemon.capture.documents import require_signatures
from daemon.logs import get_logger
from daemon.db.pool import configure_session
from daemon.service import opened_backend
from daemon.signatures import SignatureParams

log = get_logger("nearsync.api")


class BodyTooLarge(Exception):
    """The request body exceeds ``max_body_bytes``."""


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes.

    Checks ``Content-Length`` first (nothing read), then caps the streamed read (chunked bodies,
    lying headers).

    Raises:
        BodyTooLarge: over the limit. InvalidInput: a malformed Content-Length.
    """
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise InvalidInput("Content-Length", "not an integer") from None
        if n > limit:
            raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, limit: int) -> Any:
    """The JSON body (see :func:`read_body`). Raises InvalidInput (field ``(body)``) when it is not JSON."""
    raw = await read_body(request, limit)
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidInput("(body)", f"not valid JSON: {e}") from None


class ApiState:
    """What the handlers share: options, checker, set deduplicator, pool and backend (set by the lifespan)."""

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
        self.cache = SignatureCache(options.cache_size, options.cache_ttl_s)
        self.checker: Checker | None = None
        self.setdedup: SetDeduplicator | None = None
        self.pool: AsyncConnectionPool | None = None


def _error(status: int, message: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status)


def _state(request: Request) -> ApiState:
    return request.app.state.api  # type: ignore[no-any-return]


def _auth(request: Request) -> tuple[str | None, Response | None]:
    """``(key name, None)`` when allowed, else ``(None, 401 response)``. No keys configured: allowed."""
    opts = _state(request).options
    if not opts.api_keys:
        return None, None
    name = opts.key_name(request.headers.get("x-api-key"))
    if name is None:
        return None, _error(401, "missing or wrong X-API-Key")
    return name, None


async def _json_call(request: Request, what: str, call: Callable[[Any], Awaitable[dict[str, Any]]]) -> Response:
    """Authenticate, read the JSON body (size-capped), run ``call`` on it and answer JSON with ``took_ms``.

    Maps BodyTooLarge to 413, InvalidInput to 422 (``field`` named) and an unreachable index to 503.
    """
    _, denied = _auth(request)
    if denied:
        return denied
    limit = _state(request).options.max_body_bytes
    t0 = time.perf_counter()
    try:
        result = await call(await read_json(request, limit))
    except BodyTooLarge:
        return _error(413, f"body larger than {limit} bytes")
    except InvalidInput as e:
        return _error(422, e.message, e.field)
    except TransientIndexError as e:
        log.warning("index unreachable", during=what, error=str(e)[:200])
        return _error(503, "index unreachable, retry later")
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


def _float_or_none(text: str | None) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return None


async def moderation_page(request: Request) -> Response:
    """GET /moderation: the duplicates queue (``?category=&min_score=&moderator=&limit=``)."""
    key_name, denied = _auth(request)
    if denied:
        return denied
    st = _state(request)
    assert st.pool is not None
    q = request.query_params
    category = q.get("category") or None
    min_score = _float_or_none(q.get("min_score"))
    try:
        limit = max(1, min(500, int(q.get("limit", "50"))))
    except ValueError:
        limit = 50
    moderator = q.get("moderator") or request.headers.get("x-moderator") or key_name or ""
    async with st.pool.connection() as conn:
        items, cats = await load_queue(conn, st.columns.get("category"), category=category, min_score=min_score,
                                       limit=limit)
    page = render_page(items, cats, st.columns, category=category, min_score=min_score, moderator=moderator,
                       status=q.get("status", ""), error=q.get("error", ""))
    return HTMLResponse(page, headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
                                       "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                                                  "script-src 'unsafe-inline'; form-action 'self'"})


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host")


async def moderation_decide(request: Request) -> Response:
    """POST /moderation/decide: confirm or dismiss a flag (form fields record_id, original_id, action, moderator).

    The moderator is the form's ``moderator``, else the ``X-Moderator`` header, else the API key's
    name. Browsers get a 303 back to the queue; ``Accept: application/json`` gets JSON.
    """
    key_name, denied = _auth(request)
    if denied:
        return denied
    st = _state(request)
    assert st.pool is not None
    wants_json = "application/json" in request.headers.get("accept", "")
    if not _same_origin(request):
        return _error(403, "cross-origin form post refused")
    try:
        raw = await read_body(request, st.options.max_body_bytes)
    except BodyTooLarge:
        return _error(413, f"body larger than {st.options.max_body_bytes} bytes")
    except InvalidInput as e:
        return _error(422, e.message, e.field)
    form = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
    moderator = (form.get("moderator") or request.headers.get("x-moderator") or key_name or "").strip()[:200]
    for name in ("record_id", "original_id", "action"):
        if not form.get(name):
            return _error(422, "required", name)
    if not moderator:
        if wants_json:
            return _error(422, "required: say who decides (form field, X-Moderator header or a named API key)",
                          "moderator")
        return RedirectResponse(back_url(form, error="Enter your name first (top of the page)."), status_code=303)
    try:
        async with st.pool.connection() as conn:
            d = await decide_pair(conn, st.checker.backend if st.checker else None,  # type: ignore[arg-type]
                                  st.table, form["record_id"], form["original_id"], form["action"], moderator)
    except DecisionError as e:
        if wants_json:
            return _error(e.status, e.message, "record_id")
        return RedirectResponse(back_url(form, error=e.message), status_code=303)
    log.info("moderation decision", table=st.table, a=d.a, b=d.b, decision=d.decision, moderator=d.decided_by)
    if wants_json:
        return JSONResponse({"a": d.a, "b": d.b, "decision": d.decision, "decided_by": d.decided_by})
    verb = "confirmed as duplicate" if d.decision == "duplicate" else "dismissed (not a duplicate)"
    return RedirectResponse(back_url(form, status=f"#{form['record_id']} {verb}."), status_code=303)


async def openapi(request: Request) -> Response:
    """GET /openapi.json: the OpenAPI 3.1 description of this service."""
    return JSONResponse(openapi_schema(_state(request).roles, _state(request).options))


async def healthz(request: Request) -> Response:
    """GET /healthz: 200 ``{"ok": true}`` once the backend is open (no authentication)."""
    return JSONResponse({"ok": _state(request).checker is not None})


def create_app(settings: Settings, options: ApiOptions | None = None) -> Starlette:
    """The application for ``settings`` (validated now; backend and pool opened by the lifespan).

    Raises:
        ConfigError: invalid ``[dedup]`` / ``[signatures]`` settings or options (the key is named).
    """
    st = ApiState(settings, options or ApiOptions())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with opened_backend(settings) as backend:
            pool = AsyncConnectionPool(settings.require_dsn(), min_size=1, max_size=4, open=False,
                                       kwargs={"autocommit": True}, configure=configure_session)
            await pool.open()
            st.pool = pool
            st.checker = Checker(st.table, st.roles, st.params, st.dedup, backend, st.options.max_matches,
                                 st.options.unknown_fields == "reject")
            st.setdedup = SetDeduplicator(st.table, backend, st.params, st.roles, st.cache, st.options.max_set,
                                          st.options.default_threshold, st.options.unknown_fields == "reject")
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

    app = Starlette(routes=[
        Route("/v1/check", check, methods=["POST"]),
        Route("/v1/dedup-set", dedup_set, methods=["POST"]),
        Route("/moderation", moderation_page, methods=["GET"]),
        Route("/moderation/decide", moderation_decide, methods=["POST"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ], lifespan=lifespan)
    app.state.api = st
    return app
