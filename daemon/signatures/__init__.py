"""Record signatures for near-duplicate detection: the pure functional core of nearsync (no I/O).

One record (title, body, location, category, user, …) → one :class:`Signature` holding a 64-bit
simhash (Charikar 2002; Manku, Jain & Das Sarma, WWW 2007) with permuted-block keys, a MinHash
(Broder 1997) with LSH band keys (Leskovec, Rajaraman & Ullman, MMDS ch. 3), a bottom-k sketch with an
early-exit merge comparison, geohash cell + neighbour tokens, cross-field super tokens, extracted model
numbers / phones / e-mails and normalised title tokens. All hashing is XXH3-64 with an explicit seed, so
signatures are identical across processes and machines.

Typical use::

    params = SignatureParams.from_mapping(config.get("signatures", {}))
    sig = compute_signature({"title": "...", "body": "...", "lat": 48.85, "lon": 2.35}, params)
    doc = sig.to_document()          # stored in the search index
    candidates = sig.keys()          # looked up in the index
    sigs = compute_signatures(records, params)   # a batch: the same signatures, cheaper per record

May import: the standard library, numpy, xxhash, snowballstemmer, pygeohash and
:mod:`daemon.errors`; nothing with I/O and no other nearsync package (``.importlinter``).
"""

from __future__ import annotations

from .batch import compute_signatures, record_error
from .bottomk import bottomk_jaccard, bottomk_similar, bottomk_sketch
from .extract import (MAX_PRICE, emails, model_numbers, model_numbers_from_words, odometer_readings, phone_numbers,
                      price_value, split_odometer, title_codes, without_odometer, without_prices)
from .geo import geo_tokens, neighbours
from .lsh import band_keys, lsh_params, s_curve, s_curve_table
from .minhash import MINHASH_EMPTY, jaccard_from_minhash, minhash
from .params import SIGNATURE_SCHEMA_VERSION, SignatureParams, signatures_enabled
from ._hashing import hash64, hash_tokens
from .shingles import ngram_hashes, sentence_shingles, shingle_hashes, word_ngrams
from .signature import (DOCUMENT_KEYS, MAX_TEXT_CHARS, Signature, TextSketch, candidate_keys, compute_signature,
                        text_sketch)
from .simhash import block_keys, hamming, simhash, simhash_from_hashes
from .supertokens import super_tokens
from .text import CJK_RUN, LANGUAGES, TextOptions, cjk_bigrams, normalise_text, sentences, tokens, tokens_from_words, words

__all__ = [
    "CJK_RUN",
    "cjk_bigrams",
    "MAX_PRICE",
    "DOCUMENT_KEYS",
    "LANGUAGES",
    "MAX_TEXT_CHARS",
    "MINHASH_EMPTY",
    "SIGNATURE_SCHEMA_VERSION",
    "Signature",
    "SignatureParams",
    "TextOptions",
    "TextSketch",
    "band_keys",
    "candidate_keys",
    "block_keys",
    "bottomk_jaccard",
    "bottomk_similar",
    "bottomk_sketch",
    "compute_signature",
    "compute_signatures",
    "emails",
    "geo_tokens",
    "hash64",
    "hash_tokens",
    "hamming",
    "jaccard_from_minhash",
    "lsh_params",
    "minhash",
    "model_numbers",
    "model_numbers_from_words",
    "neighbours",
    "ngram_hashes",
    "normalise_text",
    "phone_numbers",
    "record_error",
    "price_value",
    "s_curve",
    "s_curve_table",
    "sentence_shingles",
    "sentences",
    "shingle_hashes",
    "simhash",
    "split_odometer",
    "signatures_enabled",
    "simhash_from_hashes",
    "super_tokens",
    "title_codes",
    "text_sketch",
    "tokens",
    "tokens_from_words",
    "word_ngrams",
    "words",
]
