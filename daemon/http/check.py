"""``POST /v1/check``: would this ad be flagged? The dedup worker's code on a document not in the database.

The candidate ad (JSON object keyed by field role) is validated by the ad model
(:mod:`daemon.http.models`: stricter than a row's ``coerce_numbers``, a value it refuses is a 422
naming the field), then becomes an :class:`IndexDocument` through the function
:meth:`daemon.capture.documents.DocumentBuilder.build` uses for a row (``document_from_fields``:
``compute_signature``, ``scope_of``), its candidates come from the index through the backend
protocol and each pair is scored by :func:`daemon.dedup.worker.score_candidates` (``score_pair`` +
``decide``), the function the worker uses, so a check and the flag written after the ad is
inserted agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel

from daemon.backends.base import IndexBackend, IndexDocument
from daemon.dedup.ids import record_id_key
from daemon.dedup.worker import score_candidates
from daemon.dedup.settings import DedupOptions
from daemon.capture.documents import document_from_fields
from daemon.db import rarity as rarity_store
from daemon.errors import RecordError
from daemon.http.models import InvalidInput, field_path, validate
from daemon.signatures import SignatureParams

__all__ = ["Checker", "InvalidInput", "ad_fields", "build_document", "validate_ad"]


def validate_ad(body: Any, model: type[BaseModel], *, scope: str,
                prefix: tuple[Any, ...] = ()) -> tuple[dict[str, Any], str | None]:
    """Check a candidate ad and return its fields (every configured role, missing ones None) and its id.

    Args:
        body: the parsed JSON value (:func:`daemon.http.models.parse_json`).
        model: the ad model (:func:`daemon.http.models.build_models`), which checks every value's type
            and range (text without NUL or lone surrogates, finite numbers, price within
            ``0..MAX_PRICE``, lat/lon within range, 64-bit integers) and unknown keys.
        scope: the candidate scope (``dedup.scope``); its field is required unless ``global``.
        prefix: path of ``body`` in the request, for error messages (``("documents", 3)``).
    Returns:
        ``(fields, record_id)``: numbers as floats (or None), text as text, ``record_id`` text or None.
    Raises:
        InvalidInput: naming the field (a value the model refuses, missing scope field, nothing to compare).
    """
    return ad_fields(validate(model, body, prefix), scope=scope, prefix=prefix)


def ad_fields(ad: BaseModel, *, scope: str, prefix: tuple[Any, ...] = ()) -> tuple[dict[str, Any], str | None]:
    """The fields and id of a validated ad (an instance of the ad model), after the cross-field rules.

    Args:
        ad: the validated ad. scope / prefix: as for :func:`validate_ad`.
    Returns:
        ``(fields, record_id)`` as :func:`validate_ad`.
    Raises:
        InvalidInput: the scope field is missing, or there is neither title nor body.
    """
    fields = ad.model_dump(exclude={"id"})
    path = field_path(prefix) + "." if prefix else ""
    if scope != "global" and scope in fields and fields.get(scope) in (None, ""):
        raise InvalidInput(path + scope, f"required: candidates are looked up per {scope} (dedup.scope)")
    if not any(fields.get(r) for r in ("title", "body")):
        raise InvalidInput(path + "title", "give a title or a body")
    return fields, getattr(ad, "id", None)


def build_document(table: str, fields: dict[str, Any], params: SignatureParams, scope: str,
                   record_id: str | None = None) -> IndexDocument:
    """The index document of a candidate ad (:func:`~daemon.capture.documents.document_from_fields`).

    Args:
        table: tracked table name. fields: validated fields (:func:`validate_ad`).
        params: ``[signatures]``. scope: ``dedup.scope``. record_id: its id, if any (else ``""``).
    Returns:
        The document (version 0: it is not stored).
    Raises:
        InvalidInput: (field ``(body)``) the values cannot be signed.
    """
    try:
        return document_from_fields(table, record_id or "", 0, fields, params, scope)
    except RecordError as e:
        raise InvalidInput("(body)", str(e)) from None


RARITY_CHECK_S = 1.0
"""Seconds between two look-ups of the active rarity snapshot's version by the check API: a check
answers with a refreshed snapshot within a second (a refresh is rare; the dedup worker itself looks
it up once per batch), and a busy API adds at most one indexed query per second."""


@dataclass
class Checker:
    """Runs checks against one table's index.

    Args:
        table: tracked table name (``schema.table``). model: the ad model (:func:`build_models`).
        params: signature parameters. options: ``[dedup]`` options. backend: an opened backend.
        max_matches: most matches returned.
        pool: optional PostgreSQL pool; with it, checks score with the table's active token-rarity
            snapshot as the dedup worker does (:meth:`follow_rarity`), so a check and the later flag
            agree. Without it, checks score without rarity.
    """

    table: str
    model: type[BaseModel]
    params: SignatureParams
    options: DedupOptions
    backend: IndexBackend
    max_matches: int = 5
    pool: Any = None
    _rarity_checked: float = field(default=float("-inf"), repr=False)

    async def follow_rarity(self) -> None:
        """Attach the table's active corpus snapshot (token rarity and large blocks,
        :func:`daemon.db.rarity.following`) as the dedup worker does, looking its
        version up at most once per :data:`RARITY_CHECK_S`: a check answers with a new snapshot
        within that time of its refresh, and costs no database round trip otherwise."""
        now = time.monotonic()
        if self.pool is None or not self.options.uses_snapshot or now - self._rarity_checked < RARITY_CHECK_S:
            return
        self._rarity_checked = now
        async with self.pool.connection() as conn:
            scoring = await rarity_store.following(conn, self.table, self.options.scoring,
                                                   purging=self.options.max_block > 0)
        if scoring is not self.options.scoring:
            self.options = replace(self.options, scoring=scoring)

    async def check(self, body: Any) -> dict[str, Any]:
        """Validate ``body`` and score it against its candidates.

        Returns:
            ``{"decision": "duplicate"|"potential_duplicate"|"unique", "score": float (0-100, the
            best match's, 0.0 without one), "matches": [{"id", "score", "flag", "reasons",
            "summary"}] (flagged ones, best first, at most ``max_matches``), "signature_version": int,
            "candidates": int (pairs scored), "capped": bool}``.
        Raises:
            InvalidInput: a bad body. TransientIndexError: the index is unreachable.
        """
        await self.follow_rarity()
        scope = self.options.scoring.scope
        fields, rid = validate_ad(body, self.model, scope=scope)
        doc = build_document(self.table, fields, self.params, scope, rid)
        res = await score_candidates(self.table, rid, doc, self.backend, self.options)
        flagged = sorted((s for s in res.scored if s.flag is not None),
                         key=lambda s: (-s.score.score, record_id_key(s.candidate.record_id)))
        matches = [{"id": s.candidate.record_id, "score": s.score.score, "flag": s.flag,
                    "reasons": s.score.reasons, "summary": s.score.summary()}
                   for s in flagged[: self.max_matches]]
        best = flagged[0] if flagged else None
        return {"decision": best.flag if best else "unique", "score": best.score.score if best else 0.0,
                "matches": matches, "signature_version": int(doc.signature.get("v", 0)),
                "candidates": len(res.scored), "capped": res.capped}

