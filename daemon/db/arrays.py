"""Integer arrays sent to PostgreSQL in its binary array format, packed by numpy.

psycopg dumps a Python ``list`` of ints element by element in Python (finding each element's type,
then packing it): for the ~6,600 hashed keys of a 200-record candidate lookup that was ~9% of the
dedup worker's CPU. :class:`Int8Array` and :class:`Int4Array` wrap the values in a numpy array and
their dumpers emit the whole ``bigint[]`` / ``integer[]`` in one ``tobytes()``.

The wire format is PostgreSQL's ``array_send`` (``src/backend/utils/adt/arrayfuncs.c``): int32
ndim, int32 has-nulls flag, int32 element type OID, then per dimension int32 length and int32 lower
bound, then per element an int32 byte length and the value, all big-endian. Use them as query
parameters with a binary placeholder (``%(keys)b::bigint[]``).

The other way, :class:`PackedInt8ArrayLoader` reads a binary ``bigint[]`` as a
:class:`PackedInts` (an ``array('q')``) rather than a list of Python ints.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
import struct
from typing import Any

import numpy as np
import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.errors import DataError
from psycopg.pq import Format

INT8_OID, INT4_OID = 20, 23
INT8_ARRAY_OID, INT4_ARRAY_OID = 1016, 1007


class _PackedArray:
    """Base of the packed arrays: the values as a numpy array of the element type."""

    __slots__ = ("values",)
    dtype: str = ""
    elem_oid: int = 0
    array_oid: int = 0

    def __init__(self, values: Iterable[int] | np.ndarray) -> None:
        self.values = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=self.dtype)
        if self.values.ndim != 1:
            raise ValueError(f"a one-dimensional array is needed, got shape {self.values.shape}")

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def to_binary(self) -> bytes:
        """The array in PostgreSQL's binary array format (see the module docstring)."""
        n = len(self)
        if n == 0:  # ndim 0: the empty array
            return np.array([0, 0, self.elem_oid], dtype=">i4").tobytes()
        header = np.array([1, 0, self.elem_oid, n, 1], dtype=">i4").tobytes()
        body = np.empty(n, dtype=[("len", ">i4"), ("v", ">" + self.dtype)])
        body["len"] = np.dtype(self.dtype).itemsize
        body["v"] = self.values
        return header + body.tobytes()


class Int8Array(_PackedArray):
    """A ``bigint[]`` parameter: signed 64-bit values (``ValueError``/``OverflowError`` outside)."""

    __slots__ = ()
    dtype = "i8"
    elem_oid = INT8_OID
    array_oid = INT8_ARRAY_OID


class Int4Array(_PackedArray):
    """An ``integer[]`` parameter: signed 32-bit values (``OverflowError`` outside)."""

    __slots__ = ()
    dtype = "i4"
    elem_oid = INT4_OID
    array_oid = INT4_ARRAY_OID


class _PackedArrayDumper(Dumper):
    """Binary dumper of a packed array; its type OID is the dumped class's ``array_oid``."""

    format = Format.BINARY

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        self.oid = cls.array_oid

    def dump(self, obj: _PackedArray) -> bytes:
        return obj.to_binary()


for _cls in (Int8Array, Int4Array):
    psycopg.adapters.register_dumper(_cls, _PackedArrayDumper)


_ARRAY_HEADER = struct.Struct(">iiiii")
"""The binary array header for one dimension (see the module docstring): ndim, has-nulls flag,
element type OID, length, lower bound."""
_INT8_ELEMENT = np.dtype([("len", ">i4"), ("value", ">i8")])
"""One ``bigint`` element of a binary array: its byte length (8) and its big-endian value."""


class PackedInts(array):
    """An ``array('q')`` (signed 64-bit ints, 8 bytes each) that also compares equal to a list or
    tuple of the same ints in the same order, as the list of ints it stands for did: a document read
    back from the index equals the document written (``doc.signature == written.signature``).
    Otherwise an ``array``: indexing, iteration, ``len``, the buffer protocol (``np.asarray``
    shares its memory), pickling; unhashable, like the list. Made by
    :class:`PackedInt8ArrayLoader` as ``PackedInts("q", ...)``."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        """Equal to a list or tuple of the same ints in the same order, or (as an ``array``) to an
        array of the same values."""
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and self.tolist() == list(other)
        return array.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        """The negation of :meth:`__eq__`."""
        return not self == other


class PackedInt8ArrayLoader(Loader):
    """Binary ``bigint[]`` loader that returns a :class:`PackedInts` (an ``array('q')``: native
    int64, 8 bytes a value) instead of a list of Python ints.

    Registered on the cursors that read documents (:meth:`PostgresBackend._cursor
    <daemon.backends.postgres.PostgresBackend._cursor>`) for their ``bottomk`` and ``minhash``
    columns. A cached document keeps them: a 128-value MinHash is ~1.1 kB as an ``array('q')``
    against ~5.2 kB as a list (1 kB of pointers and 128 int objects of 32 bytes), and the scorer's
    numpy view of it (:meth:`Side.minhash <daemon.scoring.side.Side.minhash>`, ``np.asarray``)
    shares its memory instead of copying it. The values are the same signed 64-bit ints in the
    same order: a :class:`PackedInts` indexes, iterates and compares like the list did (``list(a)``
    gives the list), and :func:`~daemon.backends.pg_encoding.int64_bytes`
    writes it back as it was read.
    """

    format = Format.BINARY

    def load(self, data: Any) -> PackedInts:
        """The values of one binary one-dimensional ``bigint[]`` without NULL elements, in order.

        Raises:
            psycopg.errors.DataError: another element type, more than one dimension, or NULL
                elements (the backend never writes such arrays).
        """
        if len(data) < 12 or int.from_bytes(data[:4], "big") == 0:
            return PackedInts("q")  # ndim 0: the empty array (its header has only ndim, flags, OID)
        ndim, has_null, oid, length, _lower = _ARRAY_HEADER.unpack_from(data)
        if ndim != 1 or has_null or oid != INT8_OID:
            raise DataError(f"expected a one-dimensional bigint[] without NULLs, got ndim {ndim}, "
                            f"has_null {has_null}, element OID {oid}")
        values = np.frombuffer(data, dtype=_INT8_ELEMENT, count=length, offset=_ARRAY_HEADER.size)["value"]
        out = PackedInts("q")
        out.frombytes(values.astype(np.int64).tobytes())
        return out
