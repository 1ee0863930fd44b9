"""Options of ``nearsync serve`` (the check API, result-set dedup and the duplicates queue).

They come from command-line flags and the environment, not from the settings file (whose top-level
tables are fixed): ``--max-body-bytes``, ``--reject-unknown``, ``--max-set``, ``--cache-size``,
``--cache-ttl``, ``--max-matches``, and the API keys from ``NEARSYNC_API_KEY`` (or ``--api-key``,
which other users of the machine can see in the process list).

API keys: ``NEARSYNC_API_KEY="s3cret"`` (one key named ``api``) or
``NEARSYNC_API_KEY="alice:s3cret,bob:0ther"`` (named keys; the name is what a decision made with
the key records as its moderator). Keys are never logged nor echoed.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field

from daemon.errors import ConfigError

UNKNOWN_FIELDS = ("ignore", "reject")


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
    """

    max_body_bytes: int = 1 << 20
    unknown_fields: str = "ignore"
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    max_set: int = 200
    max_matches: int = 5
    cache_size: int = 200_000
    cache_ttl_s: float = 10.0
    default_threshold: float = 0.5

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
