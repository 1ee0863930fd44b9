"""Super tokens: candidate keys that combine several fields (seeds: "Finding similar items"; cf. Broder's
super-shingles).

A rule such as ``("title", "geo")`` says "a duplicate must match on title *and* location"; the record
gets one key per combination of its title token-groups with its own geohash cell, so two records only
share such a key when both fields agree. Keys are far rarer than single-field tokens, which cuts the
candidate pairs.

Components per record (each a short list of strings):

* ``title``: the ``title_tokens`` distinct title tokens with the smallest XXH3 hashes (a consistent
  sample: two titles sharing most tokens very likely sample the same ones);
* ``body``: the first ``title_tokens`` values of the body's bottom-k sketch, in hex;
* ``geo``: the record's own geohash cell (neighbours are *not* combined: two records 50 m apart across
  a cell edge do not share a ``geo`` super token; the plain ``geo`` tokens cover that case);
* ``model``: every extracted model number (≤ 16); ``category``, ``user``: the normalised value.

Bound: a rule yields ``min(max_per_rule, ∏ len(component))`` keys (the combinations with the smallest
key hashes when capped), so a record has at most ``len(rules) × max_per_rule`` super tokens (defaults:
2 rules × 32). A rule with an empty component yields nothing.
"""

from __future__ import annotations

from itertools import product
from typing import Mapping, Sequence

from ._hashing import hash64

_SEP = "\x1f"


def title_sample(title_tokens: Sequence[str], count: int, seed: int = 0) -> list[str]:
    """The ``count`` distinct tokens with the smallest ``hash64(token, seed)``, in hash order."""
    distinct = set(title_tokens)
    return sorted(distinct, key=lambda t: hash64(t, seed))[:count]


def super_tokens(
    rules: Sequence[Sequence[str]],
    components: Mapping[str, Sequence[str]],
    max_per_rule: int = 32,
    seed: int = 0,
) -> list[str]:
    """Super tokens for one record.

    Args:
        rules: lists of component names (``title``, ``body``, ``geo``, ``model``, ``category``, ``user``).
        components: component name → its values for this record (missing name = no values).
        max_per_rule: cap per rule (see the module docstring for the bound).
        seed: XXH3-64 seed.
    Returns:
        Keys ``"t:{rule_index}:{16 hex}"``, grouped by rule, sorted by hash within a rule.
    """
    out: list[str] = []
    for index, rule in enumerate(rules):
        lists = [components.get(name, ()) for name in rule]
        if not all(lists):
            continue
        keys = {
            format(hash64(_SEP.join((str(index), *combo)), seed), "016x")
            for combo in product(*lists)
        }
        out.extend(f"t:{index}:{h}" for h in sorted(keys)[:max_per_rule])
    return out
