"""Token rarity: document frequencies of title words and the IDF-weighted title similarity (pure).

A shared rare word says more than a shared common one: two listings that share ``kdl40v4100`` are
far more likely one item than two that share ``lg``, ``total`` and ``capacity``. Rarity is the
inverse document frequency (IDF; Sparck Jones 1972) of each title word in the indexed corpus, and
the title similarity it gives is the IDF-weighted token similarity of "A comparison of string
distance metrics for name-matching tasks" (Cohen, Ravikumar & Fienberg, IIWeb 2003: TF-IDF over
word tokens; titles are short, so every word counts once and only its IDF weighs).

Flags must be a function of the data, not of the order in which records were processed, so the
frequencies are not updated as documents arrive: they come from a **snapshot** (:class:`Rarity`)
built over the whole index at one moment (``nearsync rarity refresh``), stored with a version,
and read by the dedup worker. Scores are a function of the two records and the active snapshot.

Tokens are the words of the title exactly as the title's text metrics see it
(:func:`daemon.scoring.metrics._text`: rapidfuzz ``default_process``, lower case, every run of
non-alphanumerics a separator), each word counted once per document, hashed with xxh64 (fixed
seed) to a signed 64-bit integer. No I/O here: building the snapshot from the index and storing it
is :mod:`daemon.ops.rarity`; reading it is the dedup worker's.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import xxhash
from rapidfuzz.distance import JaroWinkler
from rapidfuzz.process import extractOne

from daemon.scoring import metrics as m
from daemon.signatures.blocks import LargeBlocks

TOKEN_SEED = 0x6E65_6172_7379_6E63  # "nearsync"; fixed so hashes agree across processes and machines
"""xxh64 seed of the token hashes; changing it invalidates every stored snapshot."""

RARITY_SHARE = 0.25
"""Default ``[dedup] rarity``: the share of the title's similarity that comes from token rarity.

A quarter keeps the title's own metric (letters: typos, word order, abbreviations, codes written
apart) the main evidence and lets rarity move the title's similarity by at most a quarter: two
titles that differ only in rare words (another model, another paper's subject) lose up to 25% of
their title similarity -- with the title's weight 3 of the 7-10 weights a pair usually has, up to
7-10 score points, enough to take a pair that common words alone put just above the potential
threshold below it, not enough to undo a pair whose model numbers, text or price agree. Measured
(docs/quality.md, 2026-11-26): 0.25 raised Abt-Buy (with sources 0.909 -> 0.912, one table 0.864
-> 0.875) and DBLP-ACM in one table (0.917 -> 0.919) and left the repost sets unchanged; 0.5 lowered
Abt-Buy with sources (0.9093 -> 0.9090) and DBLP-ACM in one table (0.9172 -> 0.9166), and 1 (measured
before code pieces were matched written together) cost recall with sources (0.909 -> 0.865)."""

_SIGN = 1 << 63


def title_tokens(text: Any) -> tuple[str, ...]:
    """The distinct words of ``text`` as the title's text metrics normalise it (``_text``), in the
    order of their first occurrence, or ``()`` for a missing or blank value."""
    s = m._text(text)
    return tuple(dict.fromkeys(s.split())) if s else ()


def token_digest(token: str) -> int:
    """xxh64 of the token's UTF-8 bytes (seed :data:`TOKEN_SEED`), unsigned (0 to 2**64 - 1): the one
    rule by which a word is hashed; :func:`token_hash` gives it signed."""
    return xxhash.xxh64_intdigest(token.encode("utf-8", "surrogatepass"), TOKEN_SEED)


def token_hash(token: str) -> int:
    """:func:`token_digest` as a signed 64-bit int (a PostgreSQL ``bigint``, a numpy ``int64``)."""
    h = token_digest(token)
    return h - (1 << 64) if h & _SIGN else h


class FrequencyCounter:
    """Document frequencies of title words, counted one document at a time (pure, in memory).

    Memory: one Python int pair per distinct word (about 100 bytes; 1M distinct words ~100 MB).
    """

    def __init__(self) -> None:
        self.documents = 0
        self._df: Counter[int] = Counter()

    def add(self, title: Any) -> None:
        """Count one document whose title is ``title`` (any value; None or blank counts as a document
        without words: it still makes every word a little less rare relative to the corpus)."""
        self.documents += 1
        # unsigned digests, made signed once in arrays() (the same bits as token_hash)
        self._df.update([token_digest(t) for t in title_tokens(title)])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(hashes, dfs)``: the distinct word hashes ascending (``int64``) and each one's document
        frequency (``int32``, >= 1), the form a snapshot is stored and read in."""
        if not self._df:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        hashes = np.fromiter(self._df.keys(), dtype=np.uint64, count=len(self._df)).view(np.int64)
        dfs = np.fromiter(self._df.values(), dtype=np.int32, count=len(self._df))
        order = np.argsort(hashes, kind="stable")
        return hashes[order], dfs[order]


class Rarity:
    """One document-frequency snapshot of a table's title words, ready for scoring (immutable; it
    keeps the token weights it has computed, :data:`KNOWN_WEIGHTS`).

    Args:
        version: the snapshot's version (``nearsync.rarity_snapshots.version``); two snapshots are
            equal when their versions are (a version is never reused).
        documents: N, the number of documents counted (>= 0).
        hashes: distinct word hashes, ascending (``int64``). dfs: their document frequencies (``int32``).
        large_blocks: the candidate-key blocks the same snapshot found larger than its bound
            (:class:`~daemon.signatures.blocks.LargeBlocks`, block purging; they do not enter the
            weights); default none.

    Raises:
        ValueError: when the arrays differ in length.

    The weight of a word is its IDF relative to the largest IDF the snapshot can give,
    ``w = log((N + 1) / (df + 1)) / log(N + 1)``, in [0, 1]: 0 for a word in every document, 1 for
    a word in none. Dividing by ``log(N + 1)`` makes weights comparable between a catalogue of 2,000
    and one of 2,000,000 (a raw IDF grows with log N). A word missing from the snapshot (``df`` 0:
    new since the snapshot was built) gets weight 1, the rarest: a word no indexed document had is
    by the snapshot's own count the rarest there is, and treating it as common would let the newest
    model numbers, the words that identify a new item best, count for least until the next refresh.
    """

    __slots__ = ("_known", "_log_n", "_prepared", "documents", "dfs", "hashes", "large_blocks", "version")

    def __init__(self, version: int, documents: int, hashes: np.ndarray, dfs: np.ndarray,
                 large_blocks: LargeBlocks | None = None) -> None:
        if len(hashes) != len(dfs):
            raise ValueError(f"{len(hashes)} hashes against {len(dfs)} frequencies")
        self.version = int(version)
        self.documents = int(documents)
        self.hashes = np.asarray(hashes, dtype=np.int64)
        self.dfs = np.asarray(dfs, dtype=np.int32)
        self.large_blocks = large_blocks if large_blocks is not None else LargeBlocks((), 0)
        self._log_n = math.log(self.documents + 1)
        self._known: dict[str, float] = {}  # token -> its weight, computed once (:meth:`weights`)
        self._prepared: dict[str | None, Weighted] = {}  # normalised title -> its words weighed (:meth:`prepared`)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rarity) and other.version == self.version

    def __hash__(self) -> int:
        return hash(("rarity", self.version))

    def __repr__(self) -> str:
        return (f"Rarity(version={self.version}, documents={self.documents}, tokens={len(self.hashes)}, "
                f"large_blocks={len(self.large_blocks)})")

    def frequency(self, tokens: Sequence[str]) -> np.ndarray:
        """Document frequency of each token (``int64``; 0 for a token not in the snapshot)."""
        if not tokens or not len(self.hashes):
            return np.zeros(len(tokens), dtype=np.int64)
        h = np.fromiter((token_hash(t) for t in tokens), dtype=np.int64, count=len(tokens))
        pos = np.minimum(np.searchsorted(self.hashes, h), len(self.hashes) - 1)
        return np.where(self.hashes[pos] == h, self.dfs[pos], 0).astype(np.int64)

    def weights(self, tokens: Iterable[str]) -> dict[str, float]:
        """Token -> weight in [0, 1] (see the class docstring), in the order of ``tokens`` (repeats
        dropped); an empty snapshot (N = 0) weighs every token 1."""
        toks = list(dict.fromkeys(tokens))
        if self._log_n <= 0.0:
            return dict.fromkeys(toks, 1.0)
        known = self._known
        missing = [t for t in toks if t not in known]
        if missing:  # each weight is computed on its own element (numpy element-wise), whatever its neighbours
            if len(known) + len(missing) > KNOWN_WEIGHTS:
                known.clear()
            df = self.frequency(missing)
            w = np.log((self.documents + 1) / (df + 1)) / self._log_n
            for t, x in zip(missing, w, strict=True):
                known[t] = float(min(1.0, max(0.0, x)))
        return {t: known[t] for t in toks}

    def prepared(self, text: str | None) -> Weighted:
        """The :class:`Weighted` words of a title already normalised as the title's text metrics
        normalise it (:func:`daemon.scoring.metrics._text`; None: no words), the same as
        ``Weighted(self.weights(title_tokens(title)))``; kept per text (:data:`PREPARED_TITLES`), so
        that records whose titles normalise alike, or a record whose prepared values are made again,
        share one."""
        prepared = self._prepared
        w = prepared.get(text)
        if w is None:
            if len(prepared) >= PREPARED_TITLES:
                prepared.clear()
            w = prepared[text] = Weighted(self.weights(dict.fromkeys(text.split()) if text else ()))
        return w


PREPARED_TITLES = 100_000
"""Prepared titles a :class:`Rarity` keeps (:meth:`Rarity.prepared`; a few hundred bytes each with
their soft matches, :data:`SOFT_MEMO`: ~50 MB at most, emptied when full). A prepared title is a
function of the normalised title and the snapshot alone; the bound holds the titles of a dense
bench or evaluate (20,000-25,000) several times over, and past it they are only prepared again."""

KNOWN_WEIGHTS = 1_000_000
"""Token weights a :class:`Rarity` keeps once computed (:meth:`Rarity.weights`; ~150 bytes each,
~150 MB at most, emptied when full). A weight is a function of the token and the snapshot alone,
and titles share most of their words (brands, product kinds, units), so a record's weights are
mostly look-ups: the dedup worker weighs every candidate's title once, 20,000-25,000 titles per
dense bench or evaluate, made of far fewer distinct words. A catalogue's vocabulary rarely reaches
the bound; past it the table is only filled again."""


SOFT_MATCH = 0.9
"""Jaro-Winkler similarity from which an unshared word of one title counts as the other title's
word mistyped (Cohen, Ravikumar & Fienberg 2003 use the same 0.9 for soft TF-IDF): at 0.9 two words
of 6+ letters differ by about one letter, a typo ("recieve", "bluetoth"), while two different words
of a catalogue rarely come that close. Only words without digits are matched this way: a character
more or less in a model number or a size is another item, not a typo."""


class Weighted:
    """One title's words with their rarity weights, prepared once per record and snapshot (the
    dedup worker keeps it on the record's :class:`~daemon.scoring.side.Side`), so a pair costs only
    the comparison.

    Args:
        weights: word -> weight (:meth:`Rarity.weights`), in title order.

    Attributes: ``weights``; ``total`` (their sum); ``codes`` (the words with digits); ``words``
    (the others, for soft matching); ``joined`` (the words written together in title order, for code
    pieces); ``soft`` (another title's word without digits -> its best soft match among ``words``,
    :func:`_soft_mass`, kept as it is found: a title is compared with ~50 others, mostly of its own
    product line, whose words repeat; at most :data:`SOFT_MEMO` words, then emptied).
    """

    __slots__ = ("codes", "joined", "soft", "total", "weights", "words")

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = weights
        self.total = sum(weights.values())
        has_digit = m._has_digit
        self.codes = frozenset(u for u in weights if has_digit(u))
        self.words = [u for u in weights if u not in self.codes]
        self.joined = "".join(weights)
        self.soft: dict[str, float | None] = {}


SOFT_MEMO = 1024
"""Words a :class:`Weighted` keeps the soft match of (``soft``; ~100 bytes each): a title meets the
words of its candidates' titles, a few hundred distinct ones on a dense product line; past the bound
the table is emptied and only filled again."""
_UNSEEN = object()


def _soft_mass(a: Weighted, b: Weighted) -> float:
    """``Σ_{t ∈ A} w(t) · sim(t, B)``: 1 for a word B has; for a word with digits (a code or a piece
    of one), 1 when B's words written together (in B's order) contain it, since shops write one code
    with and without separators (``Z-2300`` / ``Z2300``, ``010-00715-30`` / ``0100071530``), which the
    tokenisation cuts differently -- whether two codes conflict is the model-number and number
    fields' question, not rarity's; for a word without digits the best Jaro-Winkler similarity to a
    word of B without digits when that is at least :data:`SOFT_MATCH`; else 0."""
    mass = 0.0
    wb, others, codes, joined, soft = b.weights, b.words, a.codes, b.joined, b.soft
    for t, w in a.weights.items():
        if t in wb:
            mass += w
        elif t in codes:
            if t in joined:
                mass += w
        elif others:
            best = soft.get(t, _UNSEEN)  # the same extractOne answer for the same word and title
            if best is _UNSEEN:
                if len(soft) >= SOFT_MEMO:
                    soft.clear()
                hit = extractOne(t, others, scorer=JaroWinkler.normalized_similarity, score_cutoff=SOFT_MATCH)
                best = soft[t] = None if hit is None else hit[1]
            if best is not None:
                mass += w * best
    return mass


def weighted_overlap(wa: dict[str, float] | Weighted, wb: dict[str, float] | Weighted) -> float | None:
    """Rarity-weighted (soft) token-set similarity of two titles' word weights (:meth:`Rarity.weights`,
    or the same prepared as :class:`Weighted`).

    ``max(M(A, B) / Σ_A w, M(B, A) / Σ_B w)`` with ``M(A, B) = Σ_{t ∈ A} w(t) · sim(t, B)``
    (:func:`_soft_mass`): the weighted form of the overlap coefficient, which is what rapidfuzz's
    ``token_set_ratio`` (the default title metric) rewards too -- a title whose words are all in
    the other's scores 1, so a shortened title or one with promotion text appended keeps its full
    similarity -- with Cohen, Ravikumar & Fienberg's soft matching of mistyped words
    (:data:`SOFT_MATCH`). What changes is what is *not* shared: a missing rare word (another model
    number, another paper's subject) costs much, a missing common word ("new", "for", "black")
    little. Equal titles score 1 whatever their words. Symmetric in (a, b).

    Returns:
        A similarity in [0, 1]; None when either side has no word, or only words of weight 0 (a
        title made of words in every document says nothing).
    """
    return overlap(wa if isinstance(wa, Weighted) else Weighted(wa), wb if isinstance(wb, Weighted) else Weighted(wb))


def overlap(a: Weighted, b: Weighted) -> float | None:
    """:func:`weighted_overlap` of two prepared titles (the scorer's form: no conversion)."""
    if not a.weights or not b.weights or a.total <= 0.0 or b.total <= 0.0:
        return None
    return min(1.0, max(_soft_mass(a, b) / a.total, _soft_mass(b, a) / b.total))


def blended(similarity: float | None, wa: dict[str, float] | Weighted, wb: dict[str, float] | Weighted,
            share: float) -> float | None:
    """``(1 - share) * similarity + share * weighted_overlap(wa, wb)``: the title similarity with a
    ``share`` (0-1, ``[dedup] rarity``) of it from token rarity. ``similarity`` (the title's own
    metric) is returned unchanged when it is None or when the rarity-weighted one is None (no words
    with weight)."""
    if similarity is None:
        return None
    return blend(similarity, weighted_overlap(wa, wb), share)


def blend(similarity: float, weighted: float | None, share: float) -> float:
    """``(1 - share) * similarity + share * weighted``: a title similarity (0-1) with a ``share``
    (0-1) of it from the rarity-weighted overlap ``weighted`` (0-1), or ``similarity`` unchanged when
    ``weighted`` is None. The one formula of :func:`blended` and of the scorer's prepared form."""
    return similarity if weighted is None else (1.0 - share) * similarity + share * weighted
