"""Request bodies of the search backends, built once for Elasticsearch and OpenSearch alike.

Pure functions, no I/O. The document layout (``dynamic: strict``):

* ``table``, ``record_id`` (keyword): document id is ``{table}:{record_id}``.
* ``scope_key`` (keyword): canonical JSON of the scope (sorted keys), the candidate filter, so
  "same scope" means exactly what it means for the PostgreSQL backend; ``scope_user``,
  ``scope_group``, ``scope_category`` (keyword) for ad-hoc queries; ``scope`` stored only.
* ``keys`` (keyword): the candidate keys, the only indexed copy of them (each unique keyword term
  costs the server a posting list; the typed copies ``sig_bands`` / ``sig_blocks`` / ``sig_super``
  of index versions built before 2026-11-24 were never queried and are no longer written). The
  indexed ``simhash`` (long) and ``sig_version`` (integer) of index versions built before
  2026-11-26 were not queried either (scoring reads both from the stored ``signature``) and are no
  longer written: on osmem-server each indexed number cost about as much as ten keyword terms
  (0.3-0.5 ms of server CPU per document for these two, bench notes in docs/benchmarks.md).
* typed copies of the field roles: ``title``/``body`` (text, ``nearsync_text`` analyzer: standard
  tokenizer + lowercase, suited to more_like_this), ``price`` (scaled_float, factor 100),
  ``location`` (geo_point from lat/lon), ``user``/``category``/``group``/``source`` (keyword),
  ``created_at`` (date).
* ``fields``, ``signature``, ``scope`` stored, not indexed (``object``, ``enabled: false``) so a hit
  gives back the exact :class:`~daemon.backends.base.IndexDocument` for scoring. In ``signature``
  the integer sketches ``minhash`` and ``bottomk`` are stored packed (:func:`pack_int64s`: base64
  of little-endian int64, 12 characters per value instead of up to 20 digits and a comma); a hit
  is unpacked on read, and a document written before as a JSON list reads as it is, so index
  versions built before need no reindex.

A value that does not fit its mapping (e.g. ``fields.price = "n/a"``) is rejected by the server with
a 400 for that document only (Outcome.FAILED).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from daemon.backends.base import DeleteOp, IndexDocument

TEXT_ANALYZER = "nearsync_text"
SCOPE_FIELDS = ("user", "group", "category")
KEYWORD_ROLES = ("user", "category", "group", "source")
TEXT_ROLES = ("title", "body")
MLT_FIELDS = ["title", "body"]

_KW = {"type": "keyword"}
_STORED = {"type": "object", "enabled": False}
MAPPINGS: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "table": _KW, "record_id": _KW,
        "scope_key": _KW, "scope_user": _KW, "scope_group": _KW, "scope_category": _KW,
        "keys": _KW,
        "title": {"type": "text", "analyzer": TEXT_ANALYZER},
        "body": {"type": "text", "analyzer": TEXT_ANALYZER},
        "price": {"type": "scaled_float", "scaling_factor": 100},
        "location": {"type": "geo_point"},
        "user": _KW, "category": _KW, "group": _KW, "source": _KW,
        "created_at": {"type": "date", "format": "strict_date_optional_time||epoch_millis"},
        "fields": _STORED, "signature": _STORED, "scope": _STORED,
    },
}
SETTINGS: dict[str, Any] = {
    "number_of_shards": 1,
    # Delete tombstones are what rejects a stale upsert that lands after a newer delete (two daemons,
    # the older one slowed by retries); keep them for a day instead of Elasticsearch's 60 s default.
    "gc_deletes": "1d",
    "analysis": {"analyzer": {TEXT_ANALYZER: {"type": "custom", "tokenizer": "standard", "filter": ["lowercase"]}}},
}


def template_name(alias: str) -> str:
    """Name of the composable index template covering ``{alias}_v*``."""
    return f"{alias}_template"


def version_index(alias: str, n: int) -> str:
    """Concrete index name of version ``n`` (>= 1) behind ``alias``: ``{alias}_v{n}``."""
    return f"{alias}_v{n}"


def index_template(alias: str) -> dict[str, Any]:
    """Body of ``PUT _index_template/{template_name(alias)}``: settings + strict mappings for ``{alias}_v*``."""
    return {"index_patterns": [f"{alias}_v*"], "priority": 200,
            "_meta": {"managed_by": "nearsync", "alias": alias},
            "template": {"settings": SETTINGS, "mappings": MAPPINGS}}


def doc_id(table: str, record_id: str) -> str:
    """The index ``_id`` of a record: ``{table}:{record_id}``."""
    return f"{table}:{record_id}"


def scope_key(scope: Mapping[str, str]) -> str:
    """Canonical JSON of a scope (sorted keys, compact); ``"{}"`` for the global scope."""
    return json.dumps(dict(scope), sort_keys=True, separators=(",", ":"))


PACKED_KEYS = ("minhash", "bottomk")
"""The integer sketches of a signature stored packed (:func:`pack_int64s`)."""


def pack_int64s(values: Sequence[int]) -> str:
    """``values`` (each within signed 64-bit) as base64 of little-endian int64: 8 bytes a value.

    Raises:
        OverflowError: a value outside signed 64-bit.
    """
    return base64.b64encode(np.asarray(values, dtype="<i8").tobytes()).decode("ascii")


def unpack_int64s(packed: str | Sequence[int]) -> list[int]:
    """Inverse of :func:`pack_int64s`; a list (a document stored before packing) is returned as a list.

    Raises:
        ValueError: ``packed`` is not base64 of a whole number of int64 values.
    """
    if not isinstance(packed, str):
        return list(packed)
    raw = base64.b64decode(packed, validate=True)
    if len(raw) % 8:
        raise ValueError(f"packed int64 array of {len(raw)} bytes, not a multiple of 8")
    return np.frombuffer(raw, dtype="<i8").tolist()


def stored_signature(sig: Mapping[str, Any]) -> dict[str, Any]:
    """The signature as stored in ``_source``: :data:`PACKED_KEYS` packed, the rest as is."""
    return {k: (pack_int64s(v) if k in PACKED_KEYS and isinstance(v, list) else v) for k, v in sig.items()}


def signature_from_stored(stored: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`stored_signature` (also reads signatures stored unpacked).

    Raises:
        ValueError: a packed value is malformed.
    """
    return {k: (unpack_int64s(v) if k in PACKED_KEYS else v) for k, v in stored.items()}


def document_source(doc: IndexDocument) -> dict[str, Any]:
    """The ``_source`` of ``doc`` (see the module docstring for the layout)."""
    f, sig = doc.fields or {}, doc.signature or {}
    src: dict[str, Any] = {"table": doc.table, "record_id": doc.record_id, "scope_key": scope_key(doc.scope),
                           "keys": list(doc.keys), "fields": f, "signature": stored_signature(sig),
                           "scope": dict(doc.scope)}
    for name in SCOPE_FIELDS:
        if doc.scope.get(name) is not None:
            src[f"scope_{name}"] = str(doc.scope[name])
    for role in TEXT_ROLES + KEYWORD_ROLES + ("price", "created_at"):
        if f.get(role) is not None:
            src[role] = f[role]
    if f.get("lat") is not None and f.get("lon") is not None:
        src["location"] = {"lat": f["lat"], "lon": f["lon"]}
    return src


def upsert_action(doc: IndexDocument, index: str, source: Mapping[str, Any]) -> dict[str, Any]:
    """A bulk-helper action indexing ``source`` as ``doc`` into ``index`` with external version ``doc.version``."""
    return {"_op_type": "index", "_index": index, "_id": doc_id(doc.table, doc.record_id),
            "version": doc.version, "version_type": "external", "_source": source}


def delete_action(op: DeleteOp, index: str) -> dict[str, Any]:
    """A bulk-helper action deleting ``op``'s record from ``index`` as of external version ``op.version``."""
    return {"_op_type": "delete", "_index": index, "_id": doc_id(op.table, op.record_id),
            "version": op.version, "version_type": "external"}


def candidate_query(table: str, keys: Sequence[str], scope: Mapping[str, str], *, min_match: int, limit: int,
                    exclude_id: str | None = None, mlt_index: str | None = None,
                    exclude_source: str | None = None) -> dict[str, Any]:
    """Search body: documents of ``table`` in ``scope`` sharing at least ``min_match`` of ``keys``.

    Each key is its own ``constant_score`` ``should`` clause (boost 1) so ``minimum_should_match``
    counts keys and the keys part of the score is the number matched. ``mlt_index`` (the alias) adds
    a ``more_like_this`` on title/body liking the excluded record (needs ``exclude_id``); it only
    re-ranks (never required) and the excluded record is removed by ``must_not`` whatever the
    server's ``include`` handling. ``exclude_source`` leaves out documents of that ``source``
    (a ``must_not`` term, so before ``size`` applies).

    Returns:
        The body for ``POST /{alias}/_search`` (``keys`` deduplicated; ``size`` = ``limit``).
    """
    should = [{"constant_score": {"filter": {"term": {"keys": k}}, "boost": 1.0}} for k in sorted(set(keys))]
    q: dict[str, Any] = {
        "filter": [{"term": {"table": table}}, {"term": {"scope_key": scope_key(scope)}}],
        "must": [{"bool": {"should": should, "minimum_should_match": min_match}}],
    }
    must_not: list[dict[str, Any]] = []
    if exclude_source is not None:
        must_not.append({"term": {"source": exclude_source}})
    if exclude_id is not None:
        must_not.append({"ids": {"values": [doc_id(table, exclude_id)]}})
        if mlt_index:
            q["should"] = [{"more_like_this": {
                "fields": MLT_FIELDS, "like": [{"_index": mlt_index, "_id": doc_id(table, exclude_id)}],
                "min_term_freq": 1, "min_doc_freq": 1, "max_query_terms": 25, "include": False}}]
    if must_not:
        q["must_not"] = must_not
    return {"size": limit, "version": True, "track_total_hits": False, "query": {"bool": q},
            "sort": ["_score", {"record_id": "asc"}]}


def table_query(table: str) -> dict[str, Any]:
    """Query matching every document of ``table`` (count, delete_by_query)."""
    return {"bool": {"filter": [{"term": {"table": table}}]}}


def keyed_query(table: str) -> dict[str, Any]:
    """Query matching the documents of ``table`` that hold candidate keys (a non-empty ``keys``
    field: an empty array does not count as a value for ``exists``)."""
    return {"bool": {"filter": [{"term": {"table": table}}, {"exists": {"field": "keys"}}]}}


def versions_page(table: str, size: int, after: str | None) -> dict[str, Any]:
    """Search body of one page of ``(record_id, _version)`` of ``table``, ``search_after`` ``after``."""
    body: dict[str, Any] = {"size": size, "version": True, "_source": False, "track_total_hits": False,
                            "query": table_query(table), "sort": [{"record_id": "asc"}]}
    if after is not None:
        body["search_after"] = [after]
    return body


def msearch_lines(index: str, bodies: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Header/body pairs of a ``_msearch`` request, every search on ``index``."""
    out: list[dict[str, Any]] = []
    for b in bodies:
        out += [{"index": index}, dict(b)]
    return out


def document_from_hit(hit: Mapping[str, Any]) -> IndexDocument:
    """Rebuild the :class:`IndexDocument` from a search or mget hit (needs ``_source`` and ``_version``).

    Raises:
        ValueError: a packed sketch in the stored signature is malformed.
    """
    s = hit["_source"]
    return IndexDocument(table=s["table"], record_id=s["record_id"], version=int(hit["_version"]),
                         fields=s.get("fields") or {}, scope=s.get("scope") or {}, keys=s.get("keys") or [],
                         signature=signature_from_stored(s.get("signature") or {}))
