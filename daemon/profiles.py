"""Named dedup profiles: starting points for ``[signatures]`` and ``[dedup]`` that fit a kind of data.

A profile is chosen with ``[dedup] profile = "products"`` (or ``--profile products`` on the command
line); the settings file's own ``[signatures]`` / ``[dedup]`` keys are applied on top of it, key by
key (nested tables merged, e.g. one ``[dedup.fields.price]`` key changes only that key). The
indexer, the dedup worker, the check API and ``nearsync evaluate`` all read the same merged
settings, so what ``evaluate`` measures is what ``nearsync dedup`` does.

* ``classified`` (the default): classified ads, where a seller reposts their own ad. The daemon's
  defaults unchanged: candidates are looked for within one ``user``'s ads, every field is evidence
  both ways (a different price or text lowers the score).
* ``products``: product listings from independent shops or feeds (a catalogue, a price
  comparison site, a crawl). Model numbers are candidate keys of their own and weigh most; so are
  the pairs of 8 sampled title words (``title_pairs``; see
  :func:`~daemon.signatures.supertokens.title_pair_keys`), not single title words, whose blocks
  hold a large share of a catalogue: on Abt-Buy 17.6 instead of 31.9 candidates per record with
  sources and 30 instead of 42 in one table, candidate recall 0.972 instead of 0.957 in one table;
  candidates are looked for across the whole table (``global`` scope); each shop writes its own
  description and sets its own price, so the body and a *small* price difference are positive
  evidence only (a shared description raises the score, a different one does not lower it).
  As in the default, the titles' own model numbers decide when both titles carry some
  (``title_first``): a description names compatible products and specs (a processor, a codec, a
  channel layout) that many listings share; a title whose model number another shop's title does
  not carry still matches when that record names it anywhere (shops title with their own codes and
  name the maker's in the description). With it off, every code counted: Abt-Buy in one table fell
  from pairs-in-cluster F1 0.830 to 0.778 (shared "P8400", "DDR3", "7.1-Channel" linking two
  models); with sources 0.886 against 0.888, within the run-to-run spread (2026-11-24).
  A model number that is a prefix of the other's counts 0.9 (0.5 in the default): shops append
  their own regional or packaging suffix to the maker's number (``FS105`` / ``FS105NA``).
  No LSH band keys (``[signatures.lsh] keys = false``; the MinHash is still computed and scores
  the body): the title-pair and model-number keys find every candidate the bands find, since two
  shops' listings of one product share title words or a model number whatever their
  descriptions. Measured 2026-11-26 (``bench/bench_blocking.py``, 500 sampled): keys per listing
  47 -> 30 with recall@50 unchanged on Abt-Buy (0.974) and a 20,000-listing product corpus
  (0.844); with the setting itself, the same precision, recall, F1 and candidate recall on every
  global-scope set of docs/quality.md (DBLP-ACM in one table: one candidate pair of 122,252
  fewer, not a true one), and ``reindex`` 1,271-1,530 -> 1,558-1,847 docs/s on 20,000 ads.
  A setting of its own rather than ``lsh.bands``, so a user's own ``lsh.threshold`` is not
  silently overridden; ``keys = true`` in the settings file brings the bands back.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from daemon.errors import ConfigError

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "classified": {"signatures": {}, "dedup": {}},
    "products": {
        "signatures": {"super": {"rules": [["model"]], "title_pairs": 8}, "lsh": {"keys": False}},
        "dedup": {"scope": "global", "candidate_cap": 50,
                  "fields": {"models": {"partial": 0.9},
                             "body": {"metric": "jaccard", "weight": 1.0, "evidence": "positive"},
                             "price": {"metric": "price", "weight": 1.0, "tolerance": 0.3, "evidence": "positive"}}},
    },
}
"""Profile name -> ``{"signatures": {...}, "dedup": {...}}`` (settings-file shape)."""

DEFAULT_PROFILE = "classified"


def merged(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` applied over ``base`` key by key: nested mappings are merged, any other value of
    ``top`` replaces ``base``'s (lists too). Neither argument is modified."""
    out = copy.deepcopy(dict(base))
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merged(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def profile_name(value: Any, key: str = "dedup.profile") -> str:
    """Validate a profile name (``None`` -> :data:`DEFAULT_PROFILE`).

    Raises:
        ConfigError: at ``key`` for an unknown name.
    """
    if value is None:
        return DEFAULT_PROFILE
    if value not in PROFILES:
        raise ConfigError(key, f"must be one of {', '.join(PROFILES)}, got {value!r}")
    return str(value)


def apply_profile(name: str, signatures: Mapping[str, Any], dedup: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``[signatures]`` and ``[dedup]`` tables of profile ``name`` with the given ones on top.

    Args:
        name: a validated profile name (:func:`profile_name`).
        signatures, dedup: the settings file's tables (``dedup`` without its ``profile`` key).
    Returns:
        ``(signatures, dedup)``, new dicts.
    """
    p = PROFILES[name]
    return merged(p["signatures"], signatures), merged(p["dedup"], dedup)
