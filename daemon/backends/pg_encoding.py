"""The PostgreSQL backend's wire form of a document: JSON text and packed int64 arrays.

Encoding is pure CPU work, so the indexer runs it in its signature worker processes, beside the
signature build (``PostgresBackend.document_encoder``, see :class:`IndexDocument.encoded
<daemon.backends.base.IndexDocument>`): the daemon's event loop then receives one compact object per
document and only has to send it. Encoding a 10,000-row batch this way took the daemon process
from ~1.8 s to ~0.6 s of CPU (process CPU time read from ``/proc`` around one batch; the README's
benchmark section has the figures and ``bench/bench_cdc.py`` the throughput).

* ``scope``, ``fields``, ``signature`` and ``keys`` become JSON text (orjson); a non-finite float in
  the fields is refused, as ``jsonb`` has no NaN (the rest is built by the signature code: text
  and integers only).
* The bottom-k sketch and the MinHash leave the signature for ``bigint[]`` columns of their own
  (migrations 0007 and 0009), as native int64 bytes; a write joins them into one binary array
  per column (:func:`packed_slices`) that the SQL slices per row.
* The candidate keys are not stored as text when they are the signature's own (bands, blocks,
  super tokens, then :data:`~daemon.backends.base.SCOPE_KEY`, as every signed document built by
  the daemon has them): ``keys`` is then SQL NULL and a read rebuilds them from the signature
  (:func:`keys_of`), which saves ~0.9 kB of jsonb per document and its TOAST write. Keys that
  differ (a document built otherwise) are stored as before.
* The candidate keys become signed 64-bit xxh64 hashes of ``table \\x1f scope \\x1f key``
  (:func:`key_hashes`), native int64 bytes packed like the arrays above, for the document's
  ``key_hashes bigint[]`` column (its lookup row, migration 0020).
"""

from __future__ import annotations

from array import array
import json
from math import isfinite
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from daemon.backends.base import SCOPE_KEY, IndexDocument
from daemon.signatures import candidate_keys
from daemon.signatures.blocks import key_hashes

ARRAY_COLUMNS = ("bottomk", "minhash")
"""Signature lists stored in ``bigint[]`` columns of their own rather than in the signature jsonb."""


@dataclass(frozen=True, slots=True)
class EncodedDocument:
    """A document as ``upsert_documents`` takes it.

    Attributes:
        scope, fields, signature: JSON text; ``signature`` without the lists stored apart.
        keys: JSON text, or ``None`` (SQL NULL) when they are :func:`keys_of` the signature.
        bottomk, minhash: the values for their ``bigint[]`` columns as native int64 bytes (8 per
            value), or ``None`` when the signature holds no such list of 64-bit ints (the list
            then stays in ``signature``).
        key_hashes: the distinct hashed candidate keys as native int64 bytes (empty: no keys,
            stored as NULL).

    The arrays are bytes rather than numpy arrays because bytes cross a process boundary (pickle)
    with almost no overhead; :func:`packed_slices` views them with numpy.
    """

    scope: str
    fields: str
    signature: str
    keys: str | None
    bottomk: bytes | None
    minhash: bytes | None
    key_hashes: bytes

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle as the class and its field values in order (see ``IndexDocument.__reduce__``)."""
        return (type(self), (self.scope, self.fields, self.signature, self.keys, self.bottomk, self.minhash,
                             self.key_hashes))


def _check_finite(value: Any, path: str = "") -> None:
    """Raise ValueError naming the place of the first non-finite float in ``value`` (nested dicts
    and lists are searched)."""
    t = type(value)
    if t is float:
        if not isfinite(value):
            raise ValueError(f"{path or 'value'}: {value} is not valid JSON")
    elif isinstance(value, dict):
        for k, v in value.items():
            t = type(v)
            if t not in _SCALARS and (t is not float or not isfinite(v)):  # a finite float: no call
                _check_finite(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            t = type(v)
            if t not in _SCALARS and (t is not float or not isfinite(v)):
                _check_finite(v, f"{path}[{i}]")


_SCALARS = frozenset({str, int, bool, type(None)})
"""Types that need no look inside for :func:`_check_finite`."""


def strict_json(value: Any) -> str:
    """``value`` as compact JSON text (orjson; integers beyond 64 bits through the standard library).

    Raises:
        ValueError: a NaN or infinite float anywhere in ``value`` (``jsonb`` has none).
        TypeError: a value JSON cannot represent.
    """
    _check_finite(value)
    return _json(value)


def _json(value: Any) -> str:
    """``value`` as compact JSON text, without the look for non-finite floats."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))


_BOOLS = (bool, np.bool_)
_INT64 = "l" if struct.calcsize("l") == 8 else "q"
"""The ``struct`` code of a native signed 64-bit int: ``long`` where it has 64 bits (Linux, macOS),
converted by CPython 3.11 about twice as fast as ``long long`` (which goes through a byte-by-byte
copy); the same bytes and the same range checks."""


def int64_bytes(values: Any) -> bytes | None:
    """``values`` as native int64 bytes, or ``None`` when it is not a list or tuple of signed 64-bit
    ints, as numpy reads it (such a value stays in the signature jsonb). An ``array('q')`` (as the
    backend reads these columns back, see :class:`~daemon.db.arrays.PackedInt8ArrayLoader`)
    is its own bytes."""
    if isinstance(values, array) and values.typecode == "q":
        return values.tobytes()
    if not isinstance(values, (list, tuple)):
        return None
    if not values:
        return b""
    try:  # the common case, Python ints, without numpy's type inference (128 ints: ~1.5 against ~5 µs)
        packed = struct.pack(f"{len(values)}{_INT64}", *values)  # native int64, as numpy's tobytes
    except struct.error:
        pass  # floats, text, nested lists, ints past 64 bits: numpy decides below, as it always did
    else:  # struct takes bools as ints; numpy makes a list of bools alone a bool array (refused)
        if type(values[0]) not in _BOOLS or not all(type(v) in _BOOLS for v in values):
            return packed
        return None
    try:
        arr = np.array(values)
    except (OverflowError, ValueError):
        return None
    if arr.dtype != np.int64 or arr.ndim != 1:
        return None  # floats, bools, ints past 64 bits, nested lists, text: not a bigint[]
    return arr.tobytes()


def keys_of(signature: Mapping[str, Any]) -> list[str] | None:
    """The candidate keys of a signed document rebuilt from its signature document.

    Args:
        signature: a signature document (``Signature.to_document()``, with or without the lists
            stored in columns of their own).
    Returns:
        :func:`~daemon.signatures.candidate_keys` of its ``bands``, ``blocks`` and ``super``, then
        :data:`~daemon.backends.base.SCOPE_KEY` (the keys ``signed_document`` gives the document);
        ``None`` when one of those three is missing or not a list (not a signature the daemon built).
    """
    bands, blocks, supers = signature.get("bands"), signature.get("blocks"), signature.get("super")
    if type(bands) is not list or type(blocks) is not list or type(supers) is not list:
        return None
    return [*candidate_keys(bands, blocks, supers), SCOPE_KEY]


def encode(doc: IndexDocument) -> EncodedDocument:
    """The wire form of ``doc`` (see the module docstring).

    Raises:
        ValueError: a non-finite float in the document. TypeError: a value JSON cannot represent.
    """
    if not doc.signature and not doc.keys:  # plain sync (signatures.enabled = false)
        return EncodedDocument(_json(doc.scope), strict_json(doc.fields), "{}", "[]", None, None, b"")
    sig = dict(doc.signature)
    arrays: list[bytes | None] = []
    for name in ARRAY_COLUMNS:
        packed = int64_bytes(sig[name]) if name in sig else None
        if packed is not None:
            del sig[name]
        arrays.append(packed)
    distinct = key_hashes(doc.table, doc.scope, doc.keys)
    hashes = struct.pack(f"{len(distinct)}{_INT64}", *distinct)  # np.fromiter(...).tobytes(), faster
    # Only the fields come from the user's table; scope, keys and signature are our own strings and
    # ints (no floats), so the look for NaN is spent on the fields alone.
    keys = None if keys_of(sig) == doc.keys else _json(doc.keys)
    return EncodedDocument(_json(doc.scope), strict_json(doc.fields), _json(sig), keys, arrays[0], arrays[1], hashes)


def encode_document(doc: IndexDocument) -> IndexDocument:
    """``doc`` with :attr:`~daemon.backends.base.IndexDocument.encoded` set to :func:`encode`'s result
    and its content dropped (the backend writes the encoded form; the document crosses the process
    boundary from a signature worker as one compact object). A picklable module-level function.

    Raises:
        ValueError, TypeError: as :func:`encode`.
    """
    return IndexDocument(table=doc.table, record_id=doc.record_id, version=doc.version, fields={}, scope=doc.scope,
                         keys=[], signature={}, encoded=encode(doc))


def packed_slices(arrays: Sequence[bytes | None]) -> tuple[np.ndarray, list[int], list[int]]:
    """Several optional int64 arrays (native bytes, see :class:`EncodedDocument`) as one flat array
    with per-array offsets and lengths in values, for the slices of ``upsert_documents``
    (``flat[off + 1 : off + len]``; length -1 stands for NULL).

    Returns:
        ``(flat int64 array, offsets, lengths)``.
    """
    offsets: list[int] = []
    lengths: list[int] = []
    pos = 0
    for a in arrays:
        offsets.append(pos)
        if a is None:
            lengths.append(-1)
        else:
            lengths.append(len(a) // 8)
            pos += len(a) // 8
    flat = np.frombuffer(b"".join(a for a in arrays if a), dtype=np.int64)
    return flat, offsets, lengths
