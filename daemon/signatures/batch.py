"""Sign a batch, not a record: :func:`compute_signatures`, the same signatures as
:func:`~daemon.signatures.signature.compute_signature`, bit for bit, at a lower cost per record.

The per-record path spends most of its time on numpy calls over small arrays (a 30-word ad makes
~20 of them, each a few µs of call overhead for a few hundred ns of work). The batch path keeps the
text work per record (normalising, tokens, entities, geohash, super tokens: Python either way) and
does the numeric work once per batch on flat "ragged" arrays (:mod:`daemon.signatures._ragged`):

1. every token of the batch is hashed in one pass (XXH3-64, memoised per distinct token);
2. word n-gram hashes for all records in one Horner pass, then sorted and deduplicated per record
   (:func:`~daemon.signatures.shingles.ngram_hashes_many`);
3. MinHash (Broder 1997) as one ``(grams × permutations)`` block per few thousand grams, minimum per
   record with ``np.minimum.reduceat`` (:func:`~daemon.signatures.minhash.minhash_many`);
4. simhash (Charikar 2002) as bit counts per record over one unpacked block
   (:func:`~daemon.signatures.simhash.simhash_many`), its permuted-block keys (Manku et al. 2007)
   cut with numpy (:func:`~daemon.signatures.simhash.block_keys_many`);
5. LSH band keys (MMDS ch. 3) from one byte string of the batch's MinHash matrix
   (:func:`~daemon.signatures.lsh.band_keys_many`); bottom-k sketches (Broder 1997; Cohen & Kaplan
   2007) per record by :func:`~daemon.signatures.bottomk.bottomk_many`.

With an IDF table the simhash weights are floats; their sums are then computed record by record
by :func:`~daemon.signatures.simhash.simhash`, as the per-record path does, so that no change of
summation order can flip a bit.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from ..errors import RecordError
from ._hashing import hash_tokens
from ._ragged import offsets_of
from .bottomk import bottomk_many
from .lsh import band_keys_many
from .minhash import minhash_many
from .params import SignatureParams
from .shingles import ngram_hashes_many, sentence_shingles
from .signature import RecordText, Signature, assemble_signature, compute_signature, record_text
from .simhash import block_keys_many, simhash, simhash_many

_DEFAULT_PARAMS = SignatureParams()


def record_error(e: Exception) -> RecordError:
    """The :class:`RecordError` a record's signing failure is reported as: a RecordError as is, a
    ``ValueError``/``TypeError``/``OverflowError`` as ``"cannot compute signature: <type>: <message>"``."""
    if isinstance(e, RecordError):
        return e
    err = RecordError(f"cannot compute signature: {type(e).__name__}: {e}")
    err.__cause__ = e
    return err


MIN_BATCH = 4
"""Fewer records than this are signed one by one with :func:`compute_signature` (same result): a
batch's fixed cost (~0.2 ms of numpy calls) is more than it saves on one to three records (measured
on generated Abt-Buy ads: 1 record 0.26 ms alone vs 0.47 ms as a batch, 4 records 0.22 ms each)."""

_RECORD_FAILURES = (RecordError, ValueError, TypeError, OverflowError)
"""What signing one record may raise for that record's data (anything else is a bug, and raised)."""


def compute_signatures(
    records: Sequence[Mapping[str, Any]],
    params: SignatureParams | None = None,
    idf: Mapping[str, float] | None = None,
    *,
    errors: Literal["raise", "return"] = "raise",
) -> list[Any]:
    """:func:`~daemon.signatures.signature.compute_signature` of every record of a batch (pure; no I/O).

    The signatures are the per-record ones, bit for bit (``tests/test_signatures_batch.py`` checks
    it on the Abt-Buy and news data); see the module docstring for what is computed once per batch.

    Args:
        records: the records' fields (as :func:`compute_signature` takes them), any number.
        params: :class:`SignatureParams` (defaults when ``None``). idf: as :func:`compute_signature`.
        errors: ``"raise"``: the first record that cannot be signed raises. ``"return"``: such a
            record gets its :class:`RecordError` in its place (see :func:`record_error`) and the
            others are signed as usual.
    Returns:
        ``list[Signature]`` in the order of ``records`` (``list[Signature | RecordError]`` with
        ``errors="return"``).
    Raises:
        RecordError: with ``errors="raise"``, for the first record that cannot be signed.
    """
    p = params or _DEFAULT_PARAMS
    if len(records) < MIN_BATCH:
        return [_one(fields, p, idf, errors) for fields in records]
    out: list[Any] = [None] * len(records)
    texts: list[tuple[int, RecordText]] = []
    for i, fields in enumerate(records):
        try:
            texts.append((i, record_text(fields, p)))
        except _RECORD_FAILURES as e:
            if errors == "raise":
                raise record_error(e) from (None if isinstance(e, RecordError) else e)
            out[i] = record_error(e)
    if texts:
        for i, result in zip((i for i, _ in texts), _sign(records, texts, p, idf)):
            if isinstance(result, Exception):
                if errors == "raise":
                    raise record_error(result) from (None if isinstance(result, RecordError) else result)
                result = record_error(result)
            out[i] = result
    return out


def _one(fields: Mapping[str, Any], p: SignatureParams, idf: Mapping[str, float] | None,
         errors: Literal["raise", "return"]) -> Any:
    """One record by the per-record path, its failure raised or returned as :func:`compute_signatures` says."""
    try:
        return compute_signature(fields, p, idf)
    except _RECORD_FAILURES as e:
        if errors == "raise":
            raise record_error(e) from (None if isinstance(e, RecordError) else e)
        return record_error(e)


def _sign(records: Sequence[Mapping[str, Any]], texts: list[tuple[int, RecordText]], p: SignatureParams,
          idf: Mapping[str, float] | None) -> list[Signature | Exception]:
    """The signatures of records whose text was read (``texts``: index in ``records``, text), in order;
    a record whose assembly fails gets its exception in its place."""
    seed = p.seed
    toks = [t.all_toks for _, t in texts]
    tok_offsets = offsets_of([len(x) for x in toks])
    tok_hashes = hash_tokens(list(chain.from_iterable(toks)), seed)
    grams, gram_offsets = ngram_hashes_many(tok_hashes, tok_offsets, p.shingle_n)
    minhashes = minhash_many(grams, gram_offsets, p.num_perm, seed)

    has_tokens = (tok_offsets[1:] > tok_offsets[:-1]).tolist()
    if p.simhash_features == "shingles":
        fingerprints = simhash_many(grams, gram_offsets)
    elif idf is not None:
        fingerprints = np.array([simhash(x, seed, idf) for x in toks], dtype=np.uint64)
    else:
        fingerprints = simhash_many(tok_hashes, tok_offsets)
    blocks = block_keys_many(fingerprints, p.simhash_blocks, p.simhash_max_distance)
    bands = band_keys_many(minhashes, *p.bands_rows, seed) if p.lsh_keys else [[] for _ in texts]

    if p.bottomk_shingles == "sentences":
        shingles = [sentence_shingles(t.sentence_tokens()) for _, t in texts]
        sketches = bottomk_many(hash_tokens(list(chain.from_iterable(shingles)), seed),
                                offsets_of([len(s) for s in shingles]), p.bottomk_k)
    else:
        sketches = bottomk_many(grams, gram_offsets, p.bottomk_k)

    out: list[Signature | Exception] = []
    for r, ((i, text), minhash_values, fingerprint) in enumerate(zip(texts, minhashes.tolist(), fingerprints.tolist())):
        tokens = has_tokens[r]
        try:
            out.append(assemble_signature(records[i], text, p, simhash=fingerprint if tokens else 0,
                                          minhash=tuple(minhash_values), bottomk=sketches[r],
                                          bands=bands[r] if tokens else [], blocks=blocks[r] if tokens else []))
        except _RECORD_FAILURES as e:
            out.append(e)
    return out

