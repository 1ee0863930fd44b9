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
2 rules × 32), plus its :func:`identity_keys` (1 + at most 16).

Optional fields never take a record out of candidate generation (a missing location or category is
no evidence that two ads differ):

* a rule with an empty component **degrades**: that component is dropped and the rule yields the
  keys of the remaining ones, tagged with the components kept (so ``[title, geo]`` without a
  location gives title-only keys, shared with other records that lack a location, and never
  mistaken for a full ``[title, geo]`` key); a rule whose every component is empty yields nothing;
* :func:`identity_keys`: the whole normalised title and every model number are keys of their own
  whatever the rules say, so a copy with the same title or model number is always compared.
"""

from __future__ import annotations

from itertools import product
from typing import Mapping, Sequence

import xxhash

from ._hashing import hash64_hex, token_hash, token_memo

_SEP = "\x1f"
_hex = xxhash.xxh3_64_hexdigest
"""XXH3-64 hex of bytes: :func:`hash64_hex` written out in the loops below (``hash64_hex(text, seed)``
is ``_hex(text.encode("utf-8", "surrogatepass"), seed)``), two Python calls less per key."""


def title_sample(title_tokens: Sequence[str], count: int, seed: int = 0) -> list[str]:
    """The ``count`` distinct tokens with the smallest ``hash64(token, seed)``, in hash order.

    The hashes are read from :func:`~daemon.signatures._hashing.hash_tokens`' memo (where a
    record's tokens were hashed moments before) with one C-level key function when all are there,
    else computed (:func:`token_hash`)."""
    distinct = set(title_tokens)
    memo = token_memo(seed)
    if memo.keys() >= distinct:
        return sorted(distinct, key=memo.__getitem__)[:count]
    return sorted(distinct, key=lambda t: token_hash(t, seed))[:count]


def title_pair_keys(title_tokens: Sequence[str], count: int, seed: int = 0) -> list[str]:
    """Word-pair keys of a title: ``"t:p:{16 hex}"`` for each pair of the ``count`` distinct title
    tokens with the smallest ``hash64(token, seed)`` (the sample of :func:`title_sample`), at most
    ``count * (count - 1) / 2`` keys; a title of one distinct token gives that token's key alone.

    Why pairs: a single sampled title word (``black``, ``camera``, ``sony``) is shared by a large
    share of a catalogue, so each such key's block grows with the index and every lookup visits it
    whole; two titles sharing a *pair* of sampled words are far fewer. ``python
    bench/bench_blocking.py --corpus 20000 100000`` (2026-11-24), index entries a lookup visits and
    the share of true duplicates among the best 50 candidates, 4 single words against pairs of 8:
    Abt-Buy 221 and 0.960 against 187 and 0.974; the product corpus at 20,000 listings 1,077 and
    0.843 against 635 and 0.844, at 100,000 listings 3,074 and 0.782 against 881 and 0.764 (a
    little recall traded for 3.5 times fewer entries where the corpus is densest). Two titles that
    share most words very likely sample most of the same words (consistent sampling), so they share
    a pair unless fewer than two of their sampled words agree. (Pairs of the sampled words are the
    two-component "super-shingles" of Broder 1997 applied to title words.)

    Args:
        title_tokens: the title's normalised tokens (duplicates ignored).
        count: sampled tokens (>= 2).
        seed: XXH3-64 seed.
    Returns:
        Keys sorted by hash; empty for a title without tokens.
    """
    sample = sorted(title_sample(title_tokens, count, seed))
    if len(sample) == 1:
        return [f"t:p:{hash64_hex(_SEP.join(('pair', sample[0])), seed)}"]
    keys = {hash64_hex(_SEP.join(('pair', a, b)), seed) for i, a in enumerate(sample) for b in sample[i + 1:]}
    return [f"t:p:{h}" for h in sorted(keys)]  # equal-length hex: sorted as the hashes are


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
        Keys ``"t:{rule_index}:{16 hex}"``, grouped by rule, sorted by hash within a rule. A rule
        with empty components degrades to its non-empty ones (see the module docstring): its keys
        then hash the names of the components kept as well.
    """
    out: list[str] = []
    for index, rule in enumerate(rules):
        kept = [name for name in rule if components.get(name)]
        if not kept:
            continue
        lists = [components[name] for name in kept]
        tag = str(index) if len(kept) == len(rule) else f"{index}-{'+'.join(kept)}"
        keys = {_hex(_SEP.join((tag, *combo)).encode("utf-8", "surrogatepass"), seed) for combo in product(*lists)}
        out.extend(f"t:{index}:{h}" for h in sorted(keys)[:max_per_rule])
    return out


def identity_keys(title_tokens: Sequence[str], models: Sequence[str], seed: int = 0) -> list[str]:
    """Keys that do not depend on any rule or optional field: ``"k:t:{16 hex}"`` for the whole title
    (the set of its normalised tokens, so a reordered or re-punctuated copy shares it) and
    ``"k:m:{16 hex}"`` for each model number.

    Args:
        title_tokens: the title's tokens (normalised, stemmed; duplicates and order ignored).
        models: extracted model numbers (joined lower-case forms).
        seed: XXH3-64 seed.
    Returns:
        The title key first (none for a title without tokens), then one key per distinct model number.
    """
    out: list[str] = []
    distinct = sorted(set(title_tokens))
    if distinct:
        out.append("k:t:" + hash64_hex(_SEP.join(("title", *distinct)), seed))
    for m in dict.fromkeys(models):
        out.append("k:m:" + _hex(f"model{_SEP}{m}".encode("utf-8", "surrogatepass"), seed))
    return out
