"""``Signature`` of one record and ``compute_signature`` (the pure functional core of nearsync).

Defined results for bad input (never a crash):

* ``None`` or missing text fields → empty text. ``bytes`` are decoded as UTF-8 with replacement;
  ``int``/``float``/``Decimal`` are converted with ``str()``; any other type (list, dict, bool, …)
  raises :class:`~daemon.errors.RecordError` naming the field.
* Lone surrogates (``"\\ud800"``), NUL and control characters become spaces; markup is stripped.
* The title is truncated to ``params.max_title_chars`` (default 1,000) and the body (with any extra
  configured text fields appended) to ``params.max_body_chars`` (default 100,000) characters before
  normalisation, so a 1 MB body costs the same as a 100 kB one.
* No tokens at all (empty, punctuation- or emoji-only text): ``simhash`` 0, ``minhash`` all
  :data:`~daemon.signatures.minhash.MINHASH_EMPTY` (2**61 - 1), ``bottomk`` ``[]`` and **no** band,
  block or text-based super keys (so empty records are never candidates of each other).
* Latitude/longitude missing, non-numeric, NaN/inf, out of range or exactly (0, 0) → ``geo == []``.
* ``price`` is not part of the signature (scoring reads it from the record).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ..errors import RecordError
from ._hashing import hash_tokens, to_signed64
from .bottomk import bottomk_sketch
from .extract import emails, model_numbers_from_words, phone_numbers, price_value, title_codes
from .geo import geo_tokens
from .lsh import band_keys
from .minhash import minhash
from .params import SIGNATURE_SCHEMA_VERSION, SignatureParams
from .shingles import ngram_hashes, sentence_shingles, shingle_hashes
from .simhash import block_keys, simhash, simhash_from_hashes
from .supertokens import identity_keys, super_tokens, title_pair_keys, title_sample
from .text import normalise_text, sentences, tokens_from_words

MAX_TEXT_CHARS = 2_000
"""Length cap of :attr:`Signature.text` (normalised title + body)."""

DOCUMENT_KEYS: tuple[str, ...] = (
    "v", "params", "simhash", "minhash", "bottomk", "bands", "blocks", "geo", "super", "models", "phones", "emails", "tokens",
    "title_codes",
)
"""The keys of :meth:`Signature.to_document`, in order. ``text`` is not one of them since 2026-11-26:
no reader (scoring, the candidate lookups, the HTTP API) used the stored normalised text, and it
was up to 2,000 characters of every document's signature (``jsonb`` that PostgreSQL parses and
TOASTs, a stored object in a search index). Documents stored before carry it; they are read as they
are (:meth:`Signature.from_document` accepts it)."""
LEGACY_DOCUMENT_KEYS = frozenset({"text"})
"""Keys a stored signature document may still hold from before (accepted by :meth:`Signature.from_document`)."""
OPTIONAL_DOCUMENT_KEYS = frozenset({"title_codes"})
"""Keys of :data:`DOCUMENT_KEYS` a stored signature document may lack: ``title_codes`` was added on
2026-11-27 (no reindex needed: the scorer derives the codes from the title when a document lacks
them, :meth:`daemon.scoring.side.Side.title_codes`)."""
_LIST_KEYS_INT = ("minhash", "bottomk")
_LIST_KEYS_STR = ("bands", "blocks", "geo", "super", "models", "phones", "emails", "tokens")
_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class Signature:
    """All signatures of one record (immutable). See :meth:`to_document` for field meanings.

    Attributes:
        v: schema version (:data:`SIGNATURE_SCHEMA_VERSION`); params: ``SignatureParams.fingerprint()``.
        simhash: 64-bit simhash as a signed int64. minhash: ``num_perm`` ints in ``[0, 2**61 - 1]``.
        bottomk: ≤ k sorted ints in ``[0, 2**63)``. bands, blocks, super: candidate keys.
        geo: own geohash cell then neighbours. models, phones, emails: extracted entities.
        tokens: distinct normalised title tokens. text: normalised title + body, ≤ 2,000 chars
            (computed, not stored: :meth:`to_document` leaves it out).
        title_codes: the title's own codes (:func:`~daemon.signatures.extract.title_codes` of the
            whole ``str(fields["title"])``, sorted; empty without a title), what the scorer's
            title-first model-number check compares; ``None`` for a signature read from a document
            stored before they were (then not written back either).
    """

    v: int
    params: str
    simhash: int
    minhash: tuple[int, ...]
    bottomk: tuple[int, ...]
    bands: tuple[str, ...]
    blocks: tuple[str, ...]
    geo: tuple[str, ...]
    super: tuple[str, ...]
    models: tuple[str, ...]
    phones: tuple[str, ...]
    emails: tuple[str, ...]
    tokens: tuple[str, ...]
    text: str
    title_codes: tuple[str, ...] | None = None

    def keys(self) -> list[str]:
        """All candidate keys: bands, then simhash blocks, then super tokens; deduplicated, order stable
        (:func:`candidate_keys`)."""
        return candidate_keys(self.bands, self.blocks, self.super)

    def to_document(self) -> dict[str, Any]:
        """JSON-serialisable dict with the keys of :data:`DOCUMENT_KEYS` (``title_codes`` only when
        not None); ints fit signed int64. :attr:`text` is not stored (see :data:`DOCUMENT_KEYS`).

        Returns:
            ``{"v": int, "params": str, "simhash": int, "minhash": list[int], "bottomk": list[int],
            "bands": list[str], "blocks": list[str], "geo": list[str], "super": list[str],
            "models": list[str], "phones": list[str], "emails": list[str], "tokens": list[str],
            "title_codes": list[str]}``
        """
        # One literal in DOCUMENT_KEYS order (a loop of getattr took ~2x the time per document).
        doc = {"v": self.v, "params": self.params, "simhash": self.simhash, "minhash": list(self.minhash),
               "bottomk": list(self.bottomk), "bands": list(self.bands), "blocks": list(self.blocks),
               "geo": list(self.geo), "super": list(self.super), "models": list(self.models),
               "phones": list(self.phones), "emails": list(self.emails), "tokens": list(self.tokens)}
        if self.title_codes is not None:
            doc["title_codes"] = list(self.title_codes)
        return doc

    @classmethod
    def from_document(cls, d: Mapping[str, Any]) -> "Signature":
        """Inverse of :meth:`to_document`: :attr:`text` is ``""`` unless ``d`` holds it (a document
        stored before 2026-11-26, see :data:`LEGACY_DOCUMENT_KEYS`).

        Raises:
            ValueError: a key is missing or unexpected, or a value has the wrong type/range.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"signature document must be a mapping, got {type(d).__name__}")
        missing = [k for k in DOCUMENT_KEYS if k not in d and k not in OPTIONAL_DOCUMENT_KEYS]
        extra = [k for k in d if k not in DOCUMENT_KEYS and k not in LEGACY_DOCUMENT_KEYS]
        if missing or extra:
            raise ValueError(f"signature document keys: missing {missing}, unexpected {extra}")
        for key in ("v", "simhash"):
            _check_int(d[key], key)
        text = d.get("text", "")
        if not isinstance(d["params"], str) or not isinstance(text, str):
            raise ValueError("signature document: 'params' and 'text' must be strings")
        values: dict[str, Any] = {"v": d["v"], "params": d["params"], "simhash": d["simhash"], "text": text}
        for key in _LIST_KEYS_INT:
            values[key] = tuple(_check_int(x, key) for x in _check_list(d[key], key))
        for key in _LIST_KEYS_STR:
            items = _check_list(d[key], key)
            if not all(isinstance(x, str) for x in items):
                raise ValueError(f"signature document: {key!r} must be a list of strings")
            values[key] = tuple(items)
        if "title_codes" in d:
            items = _check_list(d["title_codes"], "title_codes")
            if not all(isinstance(x, str) for x in items):
                raise ValueError("signature document: 'title_codes' must be a list of strings")
            values["title_codes"] = tuple(items)
        return cls(**values)


def candidate_keys(bands: Sequence[str], blocks: Sequence[str], supers: Sequence[str]) -> list[str]:
    """A signature's candidate keys from its lists: ``bands``, then ``blocks``, then ``supers``, each
    key once, in that order (what :meth:`Signature.keys` returns, and what the PostgreSQL backend
    rebuilds from a stored signature instead of storing the keys twice)."""
    return list(dict.fromkeys((*bands, *blocks, *supers)))


def _check_list(value: Any, key: str) -> Sequence[Any]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"signature document: {key!r} must be a list, got {type(value).__name__}")
    return value


def _check_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"signature document: {key!r} must hold signed 64-bit integers, got {value!r}")
    return value


def _text_field(fields: Mapping[str, Any], name: str) -> str:
    value = fields.get(name)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return str(value)
    raise RecordError(f"field {name!r}: expected text, got {type(value).__name__}")


class TextSketch(NamedTuple):
    """Token-level sketches of one text (see :func:`text_sketch`)."""

    simhash: int
    """Unsigned 64-bit simhash (0 for no tokens)."""
    blocks: list[str]
    """Permuted-table keys of the simhash ([] for no tokens)."""
    gram_hashes: np.ndarray
    """Sorted distinct uint64 word n-gram hashes."""
    minhash: np.ndarray
    """int64 ``(num_perm,)`` MinHash of the n-grams."""
    bands: list[str]
    """LSH band keys ([] for no tokens, or with ``params.lsh_keys`` off)."""


def text_sketch(toks: list[str], params: SignatureParams | None = None, idf: Mapping[str, float] | None = None) -> TextSketch:
    """Simhash + blocks (Charikar 2002; Manku et al. 2007) and MinHash + LSH bands (Broder 1997; MMDS
    ch. 3) of a token list; the core of :func:`compute_signature`, usable on its own.

    Every token is hashed once with XXH3-64: the hashes feed the simhash (term-frequency weights, or
    ``tf × idf`` when ``idf`` is given) and the word n-gram hashes (:func:`ngram_hashes`) of the MinHash.

    Args:
        toks: tokens in text order (from :func:`tokens`).
        params: :class:`SignatureParams` (defaults when ``None``).
        idf: optional token → IDF weight table (absent tokens weigh 1.0).
    Returns:
        :class:`TextSketch`; for no tokens: simhash 0, MinHash all ``MINHASH_EMPTY``, no blocks, no bands;
        no bands either with ``params.lsh_keys`` off (the MinHash is computed all the same).
    """
    p = params or _DEFAULT_PARAMS
    tok_hashes = hash_tokens(toks, p.seed)
    gram_hashes = ngram_hashes(tok_hashes, p.shingle_n)
    mh = minhash(gram_hashes, p.num_perm, p.seed)
    if not toks:
        return TextSketch(0, [], gram_hashes, mh, [])
    if p.simhash_features == "shingles":
        value = simhash_from_hashes(gram_hashes)
    elif idf is not None:
        value = simhash(toks, p.seed, idf)
    else:  # every occurrence counts once: term-frequency weights without a np.unique
        value = simhash_from_hashes(tok_hashes)
    b, r = p.bands_rows
    return TextSketch(
        value,
        block_keys(value, p.simhash_blocks, p.simhash_max_distance),
        gram_hashes,
        mh,
        band_keys(mh, b, r, p.seed) if p.lsh_keys else [],
    )


def compute_signature(
    fields: Mapping[str, Any],
    params: SignatureParams | None = None,
    idf: Mapping[str, float] | None = None,
) -> Signature:
    """Compute every signature of one record (pure; no I/O).

    The reference path: :func:`~daemon.signatures.batch.compute_signatures` gives the same
    signatures, bit for bit, for a batch of records at a lower cost per record.

    Args:
        fields: role → value: ``title``, ``body`` (str | None), ``price`` (unused), ``lat``, ``lon``
            (float | None), ``category``, ``user`` (str | None); keys configured in ``params.fields``
            are appended to the body; other keys are ignored.
        params: :class:`SignatureParams` (defaults when ``None``).
        idf: optional token → IDF table weighting simhash features (``tf × idf``, 1.0 when absent).
    Returns:
        :class:`Signature`. See the module docstring for the result on empty or bad input.
    Raises:
        RecordError: ``fields`` is not a mapping, or a text field holds a non-text, non-number value.
    """
    p = params or _DEFAULT_PARAMS
    text = record_text(fields, p)
    sketch = text_sketch(text.all_toks, p, idf)

    # bottom-k (Broder 1997; Cohen & Kaplan 2007)
    if p.bottomk_shingles == "sentences":
        sent = sentence_shingles(text.sentence_tokens())
        bk = bottomk_sketch(shingle_hashes(sent, p.seed), p.bottomk_k)
    else:
        bk = bottomk_sketch(sketch.gram_hashes, p.bottomk_k)
    return assemble_signature(fields, text, p, simhash=sketch.simhash, minhash=tuple(sketch.minhash.tolist()),
                              bottomk=bk, bands=sketch.bands, blocks=sketch.blocks)


@dataclass(frozen=True, slots=True)
class RecordText:
    """The text of one record, normalised and tokenised (see :func:`record_text`).

    Attributes:
        title_norm, body_norm: :func:`normalise_text` of the (truncated) title and body.
        title_words, body_words: their whitespace-separated pieces.
        title_toks: the title's tokens. body_sent_toks: the body's tokens per sentence when
            ``bottomk_shingles == "sentences"``, else ``None``.
        all_toks: title tokens then body tokens, in text order (what the simhash and MinHash see).
    """

    title_norm: str
    body_norm: str
    title_words: list[str]
    body_words: list[str]
    title_toks: list[str]
    body_sent_toks: list[list[str]] | None
    all_toks: list[str]

    def sentence_tokens(self) -> list[list[str]]:
        """The title's tokens then each body sentence's tokens (the input of :func:`sentence_shingles`)."""
        return [self.title_toks, *(self.body_sent_toks or ())]


def record_text(fields: Mapping[str, Any], p: SignatureParams) -> RecordText:
    """Read, truncate, normalise and tokenise the text fields of one record (the per-record Python
    part shared by :func:`compute_signature` and the batch path).

    Raises:
        RecordError: ``fields`` is not a mapping, or a text field holds a non-text, non-number value.
    """
    if not isinstance(fields, Mapping):
        raise RecordError(f"record fields must be a mapping, got {type(fields).__name__}")
    title_opts, body_opts = p.text_options("title"), p.text_options("body")

    title_raw = _text_field(fields, "title")[: p.max_title_chars]
    body_raw = _text_field(fields, "body")
    if p.extra_fields:
        body_raw = "\n".join([body_raw, *(_text_field(fields, name) for name in p.extra_fields)])
    body_raw = body_raw[: p.max_body_chars]
    title_norm = normalise_text(title_raw, title_opts.fold_accents)
    body_norm = normalise_text(body_raw, body_opts.fold_accents)

    title_words = title_norm.split()  # pieces: tokens_from_words and model numbers memoise per piece
    title_toks = tokens_from_words(title_words, title_opts)
    body_sent_toks: list[list[str]] | None = None
    if p.bottomk_shingles == "sentences":
        body_sent_words = [s.split() for s in sentences(body_norm)]
        body_sent_toks = [tokens_from_words(w, body_opts) for w in body_sent_words]
        body_words = [w for sent in body_sent_words for w in sent]
        body_toks = [t for sent in body_sent_toks for t in sent]
    else:
        body_words = body_norm.split()
        body_toks = tokens_from_words(body_words, body_opts)
    return RecordText(title_norm, body_norm, title_words, body_words, title_toks, body_sent_toks, title_toks + body_toks)


LABEL_MEMO_CHARS = 64
"""Category and user values up to this length have their :func:`normalise_text` memoised: a site has
few categories and its users post many ads, so the same short values come back in every batch;
longer values (free text put in those fields) are normalised each time."""
LABEL_MEMO_SIZE = 65_536
"""Memoised category / user values (``functools.lru_cache`` bound; ≤ 64 chars each)."""


@lru_cache(maxsize=LABEL_MEMO_SIZE)
def _short_label(raw: str) -> str:
    """:func:`normalise_text` of a value of at most :data:`LABEL_MEMO_CHARS` characters, memoised."""
    return normalise_text(raw)


def _normalised_label(raw: str) -> str:
    """:func:`normalise_text` of a category or user value, memoised when short (:data:`LABEL_MEMO_CHARS`)."""
    return _short_label(raw) if len(raw) <= LABEL_MEMO_CHARS else normalise_text(raw)


def assemble_signature(fields: Mapping[str, Any], text: RecordText, p: SignatureParams, *, simhash: int,
                       minhash: tuple[int, ...], bottomk: list[int], bands: list[str], blocks: list[str]) -> Signature:
    """The :class:`Signature` of one record from its text and its sketches: adds the entities
    (model numbers, phones, e-mails), the geohash tokens and the super tokens (the per-record Python
    part shared by :func:`compute_signature` and the batch path).

    Args:
        fields: the record (``lat``, ``lon``, ``category``, ``user`` are read here).
        text: :func:`record_text` of ``fields``. simhash: unsigned 64-bit simhash.
        minhash: the MinHash values. bottomk: the bottom-k sketch. bands, blocks: LSH band and
            simhash block keys.
    Raises:
        RecordError: ``category`` or ``user`` holds a non-text, non-number value.
    """
    seed = p.seed
    both_norm = f"{text.title_norm} {text.body_norm}".strip()
    models = model_numbers_from_words(text.title_words + text.body_words)
    title = fields.get("title")
    geo = geo_tokens(fields.get("lat"), fields.get("lon"), p.geohash_precision)

    components: dict[str, list[str]] = {
        "title": title_sample(text.title_toks, p.super_title_tokens, seed),
        "body": [format(v, "x") for v in bottomk[: p.super_title_tokens]],
        "geo": geo[:1],
        "model": models,
    }
    for role in ("category", "user"):
        value = _normalised_label(_text_field(fields, role)[: p.max_title_chars])
        components[role] = [value] if value else []
    supers = super_tokens(p.super_rules, components, p.super_max_per_rule, seed) + identity_keys(text.title_toks, models, seed)
    if p.super_title_pairs:
        supers += title_pair_keys(text.title_toks, p.super_title_pairs, seed)

    return Signature(
        v=SIGNATURE_SCHEMA_VERSION,
        params=p.fingerprint(),
        simhash=to_signed64(simhash),
        minhash=minhash,
        bottomk=tuple(bottomk),
        bands=tuple(bands),
        blocks=tuple(blocks),
        geo=tuple(geo),
        super=tuple(supers),
        models=tuple(models),
        phones=tuple(phone_numbers(both_norm)),
        emails=tuple(emails(both_norm)),
        tokens=tuple(dict.fromkeys(text.title_toks)),
        text=both_norm[:MAX_TEXT_CHARS],
        title_codes=_title_codes(title, text, p, price_value(fields.get("price"))) if title else (),
    )


def _title_codes(title: Any, text: RecordText, p: SignatureParams, price: float | None) -> tuple[str, ...]:
    """:func:`~daemon.signatures.extract.title_codes` of ``str(title)`` (and the record's ``price``)
    as the scorer reads the title (whole, normalised with the default options): the record's own
    normalised title pieces when they are that (a text within ``max_title_chars``, accents
    folded), else normalised again."""
    if type(title) is str and len(title) <= p.max_title_chars and p.text_options("title").fold_accents:
        return title_codes(text.title_norm, text.title_words, price)
    return title_codes(normalise_text(str(title)), price=price)


_DEFAULT_PARAMS = SignatureParams()
