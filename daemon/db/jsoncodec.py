"""JSON encoding and decoding for nearsync's own writes and reads (orjson).

orjson (https://github.com/ijl/orjson) encodes and decodes several times faster than the standard
library; the dedup worker writes a reasons object per link and per flag, and reads ``jsonb``
documents and links back, so this is a measurable share of its CPU.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def dumps(obj: Any) -> str:
    """``obj`` as compact JSON text. numpy scalars and arrays are encoded as numbers and lists; NaN
    and infinities become ``null`` (PostgreSQL's ``jsonb`` accepts no NaN). Integers beyond 64 bits
    and other types orjson does not know fall back to the standard library.

    Raises:
        TypeError: ``obj`` holds a value neither encoder can represent.
    """
    try:
        return orjson.dumps(obj, option=_OPTIONS).decode()
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), default=str)


def loads(data: str | bytes | bytearray | memoryview) -> Any:
    """Decode JSON text (``str`` or UTF-8 bytes); integers beyond 64 bits fall back to the standard
    library (orjson rejects them).

    Raises:
        ValueError: not valid JSON (``json.JSONDecodeError`` is a subclass).
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)
