"""Who is asking: API keys for programs, a session cookie for people, CSRF tokens for forms.

* **Programs** send ``X-API-Key`` on every request (no cookie, no CSRF token: a browser never adds
  that header by itself, so a cross-site page cannot borrow it).
* **People** sign in at ``/login`` with their key (``NEARSYNC_API_KEY="alice:s3cret,bob:0ther"``:
  one per moderator). The key is exchanged for a session cookie (Starlette's ``SessionMiddleware``:
  signed with itsdangerous, ``HttpOnly``, ``SameSite=Strict``, ``Secure`` with ``--secure-cookies``)
  holding the key's name and a fingerprint of the key, so a session ends when its key is removed or
  changed. Every form POST carries the session's CSRF token (compared in constant time).
* **No keys configured** (``serve`` on loopback, or ``--insecure``): requests are allowed as
  ``anonymous``; forms still need the CSRF token of the session the page opened.

Identity comes from the credential only: a decision records the key's name (``anonymous`` without
keys); a ``moderator`` form field or ``X-Moderator`` header is ignored.
"""

from __future__ import annotations

import hmac
import html
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request

from daemon.http.options import ApiOptions

ANONYMOUS = "anonymous"
SESSION_COOKIE = "nearsync_session"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller.

    Attributes:
        name: who (the API key's name, or ``anonymous`` when no keys are configured).
        via: ``"key"`` (X-API-Key header), ``"session"`` (cookie after /login) or ``"open"`` (no keys).
    """

    name: str
    via: Literal["key", "session", "open"]

    @property
    def needs_csrf(self) -> bool:
        """Whether a POST by this caller must carry the session's CSRF token (all but X-API-Key callers)."""
        return self.via != "key"


class BadKey(Exception):
    """An ``X-API-Key`` header was sent and matches no key (401, even if a session cookie is valid)."""


def authenticate(request: Request, options: ApiOptions) -> Principal | None:
    """The caller of ``request``, or None when it must sign in / send a key.

    Args:
        request: the request (its ``session`` is set by SessionMiddleware). options: keys and secret.
    Returns:
        :class:`Principal`, or None (keys configured; no valid key header nor session). Without
        keys every caller is ``anonymous``: ``via="key"`` when it sent an ``X-API-Key`` header
        (any value), else ``"open"``.
    Raises:
        BadKey: keys are configured and an ``X-API-Key`` header matches none of them.
    """
    presented = request.headers.get("x-api-key")
    if options.open:
        # Any header is a program's request (a cross-site page cannot add one without a CORS
        # preflight, which this service never grants), so it needs no CSRF token.
        return Principal(ANONYMOUS, "open" if presented is None else "key")
    if presented is not None:
        name = options.key_name(presented)
        if name is None:
            raise BadKey
        return Principal(name, "key")
    session = request.session
    name, fingerprint = session.get("who"), session.get("kf")
    if isinstance(name, str) and isinstance(fingerprint, str) and options.session_valid(name, fingerprint):
        return Principal(name, "session")
    return None


def sign_in(request: Request, options: ApiOptions, key: str) -> str | None:
    """Open a session for the holder of ``key``: a fresh session (new CSRF token) naming the key.

    Returns:
        The key's name, or None (wrong key: the session is left as it was).
    """
    name = options.key_name(key)
    if name is None:
        return None
    session = request.session
    session.clear()
    session.update({"who": name, "kf": options.key_fingerprint(key), "csrf": secrets.token_urlsafe(24)})
    return name


def csrf_token(request: Request) -> str:
    """The CSRF token of the request's session, created (and the cookie set) when it has none."""
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(24)
        request.session["csrf"] = token
    return token


def csrf_ok(request: Request, presented: str | None) -> bool:
    """Whether ``presented`` (form field ``csrf_token`` or header ``X-CSRF-Token``) is the session's token."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or not presented:
        return False
    return hmac.compare_digest(token.encode(), presented.encode("utf-8", "replace"))


def flash(request: Request, kind: Literal["status", "error"], text: str) -> None:
    """Leave a one-time message for the next page of this session (instead of a message in the URL)."""
    request.session["flash"] = {"kind": kind, "text": text[:300]}


def take_flash(request: Request) -> dict[str, Any] | None:
    """The session's one-time message (removed), or None."""
    if "flash" not in request.session:
        return None
    msg = request.session.pop("flash")
    return msg if isinstance(msg, dict) and msg.get("kind") in ("status", "error") else None


def login_page(token: str, *, failed: bool = False) -> str:
    """The sign-in form (HTML): one password field for the key, the CSRF token, a fixed error line.

    Args:
        token: the session's CSRF token. failed: show "wrong key" (no text from the request is shown).
    """
    error = '<p class="error" role="alert">That key is not valid.</p>' if failed else ""
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1"><title>Sign in — nearsync</title>'
            '<style>body{font:16px/1.45 system-ui,sans-serif;max-width:28rem;margin:3rem auto;padding:0 1rem}'
            'label{display:flex;flex-direction:column;gap:.3rem}input,button{font:inherit;padding:.4rem .6rem}'
            'button{margin-top:1rem}.error{background:#fce8e6;border:1px solid #d88;padding:.4rem .6rem}</style>'
            '</head><body><main><h1>Duplicates queue: sign in</h1>'
            f'{error}<form method="post" action="/login">'
            f'<input type="hidden" name="csrf_token" value="{html.escape(token)}">'
            '<label for="key">Your moderator key<input id="key" name="key" type="password" required '
            'autocomplete="current-password" autofocus></label>'
            '<button type="submit">Sign in</button></form></main></body></html>')
