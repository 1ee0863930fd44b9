"""Issue 19, real auth for people: loopback bind by default, sign-in exchanging a key for a signed
session cookie, CSRF tokens on POSTs, identity from the credential only, trusted hosts, no reflected
text, /openapi.json behind auth. Against a real PostgreSQL (the app in process through httpx; the
bind refusal through the real ``nearsync serve`` command). The browser flow is in test_moderation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import httpx
import pytest

from daemon.config import Settings
from daemon.errors import ConfigError
from daemon.http.options import LOOPBACK_HOSTS, ApiOptions, check_bind, is_loopback, parse_api_keys
from tests.conftest import REPO, flags, with_dedup
from tests.test_api import api_client, free_port
from tests.test_moderation import decisions, two_potential_duplicates

SECRET = "session-secret-for-tests-0123456789"
KEYS = ApiOptions(api_keys=parse_api_keys("carol:carol-key,dave:dave-key"), session_secret=SECRET)
HTML = {"accept": "text/html"}


@pytest.fixture
def backend_name() -> str:
    """The HTTP layer is under test here, not the backends: postgres only."""
    return "postgres"


@pytest.fixture
def msettings(settings: Settings) -> Settings:
    """Thresholds making the two test edits potential duplicates (as in test_moderation)."""
    return with_dedup(settings, duplicate_threshold=95.0, potential_threshold=60.0)


def token_of(page: str) -> str:
    """The CSRF token in a page's forms."""
    m = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert m, page[:500]
    return m.group(1)


async def sign_in(c: httpx.AsyncClient, key: str) -> httpx.Response:
    """Fetch the sign-in form and post ``key`` with its token; returns the POST's answer."""
    form = await c.get("/login")
    return await c.post("/login", data={"key": key, "csrf_token": token_of(form.text)})


def test_serve_refuses_a_non_loopback_bind_without_credentials(tmp_path: Any) -> None:
    """Before: ``serve --host 0.0.0.0`` without keys served an open service to the network."""
    env = {k: v for k, v in os.environ.items() if k != "NEARSYNC_API_KEY"}
    args = [sys.executable, "-m", "daemon", "serve", "--host", "0.0.0.0", "--port", str(free_port()),
            "--dsn", "postgresql://nobody@127.0.0.1:1/none"]
    cfg = tmp_path / "c.toml"
    cfg.write_text("[source]\ncreate_reference_table = true\n[dedup]\nenabled = true\n")
    done = subprocess.run([*args, "--config", str(cfg)], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "refusing to serve 0.0.0.0 without credentials" in done.stderr
    assert "Traceback" not in done.stderr

    open_opts = ApiOptions()
    with pytest.raises(ConfigError, match="--insecure"):
        check_bind("192.0.2.10", open_opts, insecure=False)
    assert check_bind("0.0.0.0", open_opts, insecure=True) == LOOPBACK_HOSTS
    assert check_bind("192.0.2.10", KEYS, insecure=False) == (*LOOPBACK_HOSTS, "192.0.2.10")
    assert check_bind("127.0.0.1", open_opts, insecure=False) == LOOPBACK_HOSTS
    assert [is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost", "0.0.0.0", "::",
                                     "example.com")] == [True, True, True, True, True, False, False, False]
    with pytest.raises(ConfigError, match="--allowed-host"):
        ApiOptions(allowed_hosts=("*",))


async def test_untrusted_host_header_is_400(settings: Settings) -> None:
    """DNS rebinding: a page on attacker.example resolving to 127.0.0.1 sends ``Host: attacker.example``.
    Before: answered (and a decide without Origin was accepted)."""
    async with api_client(settings) as c:
        r = await c.get("/moderation", headers={"host": "attacker.example"})
        assert r.status_code == 400
        r = await c.post("/moderation/decide", data={"record_id": "1", "original_id": "2", "action": "confirm"},
                         headers={"host": "attacker.example:8000"})
        assert r.status_code == 400
        assert (await c.get("/healthz", headers={"host": "127.0.0.1:8000"})).status_code == 200
    async with api_client(settings, ApiOptions(allowed_hosts=("*.example.org",))) as c:
        assert (await c.get("/moderation", headers={"host": "dedup.example.org"})).status_code == 200
        assert (await c.get("/moderation", headers={"host": "localhost"})).status_code == 400


async def test_sign_in_session_cookie_and_csrf(msettings: Settings) -> None:
    """The sign-in form exchanges a key for a signed HttpOnly SameSite=Strict session; every POST made
    with it needs the session's CSRF token; the decision records the key's name."""
    s = msettings
    ids = await two_potential_duplicates(s)
    async with api_client(s, KEYS) as c:
        r = await c.get("/moderation", headers=HTML)
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert (await c.get("/moderation")).status_code == 401
        r = await sign_in(c, "not-a-key")
        assert r.status_code == 401 and "not valid" in r.text and "not-a-key" not in r.text
        r = await c.post("/login", data={"key": "carol-key"})  # no token
        assert r.status_code == 403
        r = await c.post("/login", data={"key": "carol-key", "csrf_token": "guess"})
        assert r.status_code == 403
        r = await sign_in(c, "carol-key")
        assert r.status_code == 303 and r.headers["location"] == "/moderation"
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "carol-key" not in cookie
        page = (await c.get("/moderation")).text
        assert 'id="user">carol<' in page and "Sign out" in page
        token = token_of(page)
        form = {"record_id": ids["tv_edit"], "original_id": ids["tv"], "action": "confirm"}
        r = await c.post("/moderation/decide", data=form)
        assert r.status_code == 403 and r.json()["field"] == "csrf_token"
        r = await c.post("/moderation/decide", data=form | {"csrf_token": token},
                         headers={"origin": "http://evil.example"})
        assert r.status_code == 403
        r = await c.post("/moderation/decide", data=form | {"csrf_token": token, "moderator": "mallory"},
                         headers={"x-moderator": "mallory"})
        assert r.status_code == 303 and r.headers["location"] == "/moderation"
        page = (await c.get("/moderation")).text
        assert f"#{ids['tv_edit']} confirmed as duplicate" in page
        # a JSON API call made with the cookie needs the token too (in a header)
        body = {"title": "Sony TV", "user": "u1"}
        assert (await c.post("/v1/check", json=body)).status_code == 403
        assert (await c.post("/v1/check", json=body, headers={"x-csrf-token": token})).status_code == 200
        r = await c.post("/logout", data={"csrf_token": token_of(page)})
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert (await c.get("/moderation")).status_code == 401
    assert (await flags(s.dsn))[ids["tv_edit"]] == ("duplicate", ids["tv"])
    assert (await decisions(s.dsn))[(ids["tv"], ids["tv_edit"])][0::3] == ("duplicate", "carol")


async def test_a_session_ends_when_its_key_is_changed(settings: Settings) -> None:
    """The session holds a fingerprint of the key: a restart with carol's key changed (same session
    secret) does not let the old cookie in."""
    async with api_client(settings, KEYS) as c:
        assert (await sign_in(c, "carol-key")).status_code == 303
        cookies = dict(c.cookies)
        assert (await c.get("/moderation")).status_code == 200
    rotated = ApiOptions(api_keys=parse_api_keys("carol:new-key,dave:dave-key"), session_secret=SECRET)
    async with api_client(settings, rotated) as c:
        c.cookies.update(cookies)
        assert (await c.get("/moderation")).status_code == 401
    async with api_client(settings, KEYS) as c:  # the same keys and secret: still valid
        c.cookies.update(cookies)
        assert (await c.get("/moderation")).status_code == 200
    async with api_client(settings, ApiOptions(api_keys=KEYS.api_keys, session_secret="x" * 32)) as c:  # not ours
        c.cookies.update(cookies)
        assert (await c.get("/moderation")).status_code == 401


async def test_open_mode_forms_need_the_pages_token_and_record_anonymous(msettings: Settings) -> None:
    """No keys (loopback default): before, any POST was accepted and its form named the moderator."""
    s = msettings
    ids = await two_potential_duplicates(s)
    async with api_client(s) as c:
        form = {"record_id": ids["cam_edit"], "original_id": ids["cam"], "action": "dismiss", "moderator": "x"}
        r = await c.post("/moderation/decide", data=form)
        assert r.status_code == 403
        page = (await c.get("/moderation")).text
        assert 'id="user">anonymous<' in page and "Sign out" not in page
        r = await c.post("/moderation/decide", data=form | {"csrf_token": token_of(page)})
        assert r.status_code == 303
        r = await c.post("/moderation/decide", data={"record_id": ids["tv_edit"], "original_id": ids["tv"],
                                                     "action": "confirm"},
                         headers={"x-api-key": "anything", "accept": "application/json"})
        assert r.status_code == 200 and r.json()["decided_by"] == "anonymous"  # a program: no token needed
    assert (await decisions(s.dsn))[(ids["cam"], ids["cam_edit"])][0::3] == ("not_duplicate", "anonymous")


async def test_query_text_is_never_reflected_into_the_page(msettings: Settings) -> None:
    """Before: ``?error=`` and ``?status=`` were shown in the alert box, ``?moderator=`` in the name field."""
    s = msettings
    await two_potential_duplicates(s)
    async with api_client(s) as c:
        r = await c.get("/moderation", params={"error": "Your session expired, call +1-555-EVIL",
                                                "status": "PWNED-STATUS", "moderator": "PWNED-NAME",
                                                "category": "PWNED-CATEGORY"})
        assert r.status_code == 200
        for text in ("555-EVIL", "PWNED-STATUS", "PWNED-NAME", "PWNED-CATEGORY"):
            assert text not in r.text
        assert 'role="alert"' not in r.text and 'role="status"' not in r.text
        assert r.headers["content-security-policy"].startswith("default-src 'none'")
        assert r.headers["x-frame-options"] == "DENY"


async def test_openapi_is_behind_auth_and_healthz_is_public(settings: Settings) -> None:
    """Before: /openapi.json answered without a key although the code said only /healthz did."""
    async with api_client(settings, KEYS) as c:
        assert (await c.get("/openapi.json")).status_code == 401
        assert (await c.get("/openapi.json", headers={"x-api-key": "wrong"})).status_code == 401
        spec = await c.get("/openapi.json", headers={"x-api-key": "dave-key"})
        assert spec.status_code == 200 and spec.json()["paths"]["/healthz"]["get"]["security"] == []
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/login")).status_code == 200
        assert (await sign_in(c, "dave-key")).status_code == 303
        assert (await c.get("/openapi.json")).status_code == 200  # a signed-in person may read it
