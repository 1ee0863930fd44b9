"""Integer arrays sent to PostgreSQL in its binary array format, packed by numpy.

psycopg dumps a Python ``list`` of ints element by element in Python (finding each element's type,
then packing it): for the ~6,600 hashed keys of a 200-record candidate lookup that was ~9% of the
dedup worker's CPU. :class:`Int8Array` and :class:`Int4Array` wrap the values in a numpy array and
their dumpers emit the whole ``bigint[]`` / ``integer[]`` in one ``tobytes()``.

The wire format is PostgreSQL's ``array_send`` (``src/backend/utils/adt/arrayfuncs.c``): int32
ndim, int32 has-nulls flag, int32 element type OID, then per dimension int32 length and int32 lower
bound, then per element an int32 byte length and the value, all big-endian. Use them as query
parameters with a binary placeholder (``%(keys)b::bigint[]``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import psycopg
from psycopg.adapt import Dumper
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
