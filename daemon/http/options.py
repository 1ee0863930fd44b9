"""Options of ``nearsync serve`` (the check API, result-set dedup and the duplicates queue).

They come from command-line flags and the environment, not from the settings file (whose top-level
tables are fixed): ``--max-body-bytes``, ``--reject-unknown``, ``--max-set``, ``--cache-size``,
``--cache-ttl``, ``--max-matches``, ``--allowed-host``, ``--secure-cookies``, the API keys from
``NEARSYNC_API_KEY`` (or ``--api-key``, which other users of the machine can see in the process
list) and the session-signing secret from ``NEARSYNC_SESSION_SECRET``.

API keys: ``NEARSYNC_API_KEY="s3cret"`` (one key named ``api``) or
``NEARSYNC_API_KEY="alice:s3cret,bob:0ther"`` (named keys, one per moderator: the name is what a
decision made with the key, or in a session opened with it, records as its moderator; nothing a
request says can override it). Keys are never logged nor echoed.

Bind: ``serve`` listens on 127.0.0.1 by default; :func:`check_bind` refuses any other address
unless API keys are set, or ``--insecure`` says an open service is really meant.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from daemon.errors import ConfigError

UNKNOWN_FIELDS = ("ignore", "reject")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Host names a loopback-bound service answers to (TrustedHostMiddleware), besides ``--allowed-host``."""


@dataclass(frozen=True)
class ApiOptions:
    """Validated options of the HTTP service.

    Attributes:
        max_body_bytes: largest request body accepted (bytes); larger ones get 413 before being read.
        unknown_fields: ``"ignore"`` (drop keys that are no configured field role) or ``"reject"`` (422).
        api_keys: secret -> key name; empty: no authentication.
        max_set: most items accepted by ``POST /v1/dedup-set`` (default 200).
        max_matches: most matches returned by ``POST /v1/check`` (default 5).
        cache_size: signatures kept by the result-set dedup LRU cache (entries).
        cache_ttl_s: how long (s) a cached signature is trusted for an id given without a version.
        default_threshold: bottom-k Jaccard threshold of ``/v1/dedup-set`` when the request gives none.
        allowed_hosts: values of the ``Host`` header answered (others get 400: DNS rebinding);
            ``"*.example.com"`` patterns allowed, ``"*"`` (any) refused.
        session_secret: key signing the session cookies (itsdangerous); random per process by
            default, so a restart logs everyone out; set ``NEARSYNC_SESSION_SECRET`` to keep sessions.
        session_max_age_s: lifetime of a session cookie (seconds).
        secure_cookies: mark the session cookie ``Secure`` (behind HTTPS).
    """

    max_body_bytes: int = 1 << 20
    unknown_fields: str = "ignore"
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    max_set: int = 200
    max_matches: int = 5
    cache_size: int = 200_000
    cache_ttl_s: float = 10.0
    default_threshold: float = 0.5
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    session_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    session_max_age_s: int = 8 * 3600
    secure_cookies: bool = False

    def __post_init__(self) -> None:
        """Validate. Raises ConfigError naming the flag."""
        for name, value in (("--max-body-bytes", self.max_body_bytes), ("--max-set", self.max_set),
                            ("--max-matches", self.max_matches), ("--cache-size", self.cache_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.unknown_fields not in UNKNOWN_FIELDS:
            raise ConfigError("unknown_fields", f"must be one of {', '.join(UNKNOWN_FIELDS)}, got {self.unknown_fields!r}")
        if not self.cache_ttl_s >= 0:
            raise ConfigError("--cache-ttl", f"must be >= 0 seconds, got {self.cache_ttl_s!r}")
        if not 0.0 < self.default_threshold <= 1.0:
            raise ConfigError("--set-threshold", f"must be in (0, 1], got {self.default_threshold!r}")
        for host in self.allowed_hosts:
            if not host or "*" in host[1:] or (host.startswith("*") and not host.startswith("*.")):
                raise ConfigError("--allowed-host", f"must be a host name or *.domain, got {host!r}")
        if len(self.session_secret) < 16:
            raise ConfigError("NEARSYNC_SESSION_SECRET", "must be at least 16 characters")
        if isinstance(self.session_max_age_s, bool) or not isinstance(self.session_max_age_s, int) \
                or self.session_max_age_s < 60:
            raise ConfigError("session_max_age_s", "must be an integer >= 60 (seconds)")

    @property
    def open(self) -> bool:
        """No API keys: every request is allowed, decisions are recorded as ``anonymous``."""
        return not self.api_keys

    def key_fingerprint(self, secret: str) -> str:
        """A short HMAC of an API key under the session secret (kept in a session to notice a changed key)."""
        return hmac.new(self.session_secret.encode(), secret.encode(), "sha256").hexdigest()[:32]

    def session_valid(self, name: str, fingerprint: str) -> bool:
        """Whether a session opened as ``name`` with a key of ``fingerprint`` still matches a configured key."""
        ok = False
        for secret, key_name in self.api_keys.items():
            if key_name == name and hmac.compare_digest(self.key_fingerprint(secret), fingerprint):
                ok = True
        return ok

    def key_name(self, presented: str | None) -> str | None:
        """The name of the API key ``presented`` (constant-time comparison), or None if it matches none."""
        if not presented:
            return None
        found = None
        for secret, name in self.api_keys.items():
            if hmac.compare_digest(secret.encode(), presented.encode()):
                found = name
        return found


def parse_api_keys(text: str | None) -> dict[str, str]:
    """Parse ``"secret"`` or ``"name:secret,name2:secret2"`` into ``{secret: name}``.

    Raises:
        ConfigError: (key ``NEARSYNC_API_KEY``) an empty name or secret in a list.
    """
    if not text or not text.strip():
        return {}
    text = text.strip()
    if ":" not in text and "," not in text:
        return {text: "api"}
    out: dict[str, str] = {}
    for i, part in enumerate(p.strip() for p in text.split(",")):
        name, sep, secret = part.partition(":")
        if not sep or not name.strip() or not secret.strip():
            raise ConfigError("NEARSYNC_API_KEY", f"entry {i + 1} must be name:secret")
        out[secret.strip()] = name.strip()
    return out


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` exposes the service to this machine only (``localhost`` or a loopback IP)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, options: ApiOptions, *, insecure: bool) -> tuple[str, ...]:
    """Refuse an exposed open service; return the ``Host`` header values to answer.

    Args:
        host: the bind address (``--host``). options: the service options (API keys, allowed hosts).
        insecure: ``--insecure``: an open service on a non-loopback address is really meant.
    Returns:
        The allowed hosts: ``options.allowed_hosts`` plus ``host`` itself when it is a specific
        address (not ``0.0.0.0`` / ``::``).
    Raises:
        ConfigError: (``--host``) a non-loopback bind without API keys and without ``--insecure``.
    """
    if not is_loopback(host) and options.open and not insecure:
        raise ConfigError("--host", f"refusing to serve {host} without credentials: set NEARSYNC_API_KEY "
                                    "(or pass --insecure to serve an open service anyway)")
    hosts = list(options.allowed_hosts)
    bare = host.strip().strip("[]")
    if bare not in ("0.0.0.0", "::", "") and bare not in hosts:
        hosts.append(bare)
    return tuple(hosts)
