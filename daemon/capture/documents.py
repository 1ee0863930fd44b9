"""Turn a loaded row into an :class:`IndexDocument`: fields, scope, signature and candidate keys.

Pure apart from reading the settings it is built with; raises :class:`RecordError` for a row whose
data cannot be signed, so that row alone goes the dead-letter way.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from daemon import heap
from daemon.backends.base import SCOPE_KEY, IndexDocument
from daemon.config import Settings
from daemon.errors import ConfigError, RecordError
from daemon.logs import get_logger
from daemon.scoring.numbers import NUMBER_RANGES, parse_number, typed_value
from daemon.signatures import (Signature, SignatureParams, compute_signature, compute_signatures, record_error,
                               signatures_enabled)
from daemon.capture.source import NUMBER_ROLES, SourceTable

_log = get_logger("nearsync.documents")


def scope_kind(settings: Settings) -> str:
    """The configured candidate scope (``dedup.scope``): global, user, group or category.

    Raises:
        ConfigError: an invalid ``[dedup]`` table (the key is named).
    """
    from daemon.dedup.settings import dedup_options

    return dedup_options(settings).scoring.scope


def scope_of(fields: Mapping[str, Any], kind: str) -> dict[str, str]:
    """The scope values of one record: ``{}`` for global, else ``{kind: str(value)}``.

    A record whose scope field is empty gets the scope value ``""`` (it matches other such records).
    """
    if kind == "global":
        return {}
    v = fields.get(kind)
    return {kind: "" if v is None else str(v)}


def require_signatures(settings: Settings, what: str) -> None:
    """Fail fast when ``what`` (a process that finds candidates by signature keys: the dedup
    worker, the check API, an indexer feeding the dedup queue) is asked to run on a plain-sync
    index (``signatures.enabled = false``).

    Raises:
        ConfigError: at ``signatures.enabled``, saying what needs the signatures and how to get them.
    """
    if not signatures_enabled(settings.signatures):
        raise ConfigError("signatures.enabled", f"is false (plain sync: records are indexed without signatures), "
                          f"but {what} finds candidates by their signature keys; set it to true and run "
                          "`nearsync reindex` to sign the records already indexed")


NUMERIC_ROLES = NUMBER_ROLES


def coerce_numbers(fields: dict[str, Any], typed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Make ``price``, ``lat`` and ``lon`` floats (or ``None``) by the rule the check API applies
    (:func:`daemon.scoring.numbers.parse_number`): text like ``"$1,299.00"`` is parsed, blank is no
    value; and the other fields of ``typed`` (mapped fields scored ``numeric`` or ``date``) their
    stored values (:func:`daemon.scoring.numbers.typed_value`: a float, or ISO 8601 text).

    A value the check API would refuse with a 422 is refused here too, and the row goes to the
    dead-letter table with that error (choosing to reject rather than index the row without the
    value: the row's owner sees the error, and the ad is not compared on a price or place it does
    not have): text that is not a number (``"call me"``, ``"$1,2,3"``), a boolean, NaN or an
    infinity, a negative price or one above 1e12, a latitude outside ±90 or a longitude outside ±180;
    for a ``numeric`` field, anything but a finite number or number text (no range); for a ``date``
    field, anything but an ISO 8601 date or timestamp (a ``date`` / ``timestamp`` column is one).

    Args:
        fields: field name -> value as read from the row.
        typed: field name -> ``"numeric"`` or ``"date"`` (:func:`daemon.dedup.settings.typed_fields`);
            None: none.

    Returns:
        A copy with the numeric roles as floats or ``None`` and the typed fields converted.

    Raises:
        RecordError: a value breaks the rule (the message names the field and the value).
    """
    out = dict(fields)
    for role in NUMERIC_ROLES:
        v = out.get(role)
        low, high = NUMBER_RANGES[role]
        try:
            out[role] = parse_number(v, low, high)
        except ValueError as e:
            raise RecordError(f"{role}: {e}, got {str(v)[:80]!r}") from None
    for name, metric in (typed or {}).items():
        v = out.get(name)
        try:
            out[name] = typed_value(metric, v)
        except ValueError as e:
            raise RecordError(f"{name}: {e}, got {str(v)[:80]!r}") from None
    return out


def document_from_fields(table: str, record_id: str, version: int, fields: dict[str, Any],
                         params: SignatureParams, scope: str, *, signed: bool = True) -> IndexDocument:
    """The index document of one record's field values: its signature, candidate keys and scope.

    The one place a document is made, for a row of the tracked table (:meth:`DocumentBuilder.build`)
    and for an ad checked through the HTTP API, so a check and the later flag agree.

    Args:
        table: tracked table name (``schema.table``). record_id: the record's id (``""`` for an ad
            that is not stored). version: external version (the change sequence; 0 when not stored).
        fields: role -> value, numbers already coerced (:func:`coerce_numbers`).
        params: ``[signatures]``. scope: the scope kind (:func:`scope_kind`).
        signed: ``False`` for plain sync: no signature is computed and there are no candidate keys.

    Returns:
        The :class:`~daemon.backends.base.IndexDocument` (not encoded); a signed one's keys are the
        signature's candidate keys plus :data:`~daemon.backends.base.SCOPE_KEY` (its scope's
        membership, for the exhaustive comparison of small scopes).

    Raises:
        RecordError: the values cannot be signed (the message names the error).
    """
    sig: Signature | None = None
    if signed:
        try:
            sig = compute_signature(fields, params)
        except (ValueError, TypeError, OverflowError) as e:
            raise record_error(e) from e
    return signed_document(table, record_id, version, fields, scope, sig)


def signed_document(table: str, record_id: str, version: int, fields: dict[str, Any], scope: str,
                    sig: Signature | None) -> IndexDocument:
    """The index document of one record given its signature (``None``: plain sync, no signature and
    no candidate keys); see :func:`document_from_fields` for the arguments."""
    keys: list[str] = []
    signature: dict[str, Any] = {}
    if sig is not None:
        keys, signature = [*sig.keys(), SCOPE_KEY], sig.to_document()
    return IndexDocument(table=table, record_id=record_id, version=version, fields=fields,
                         scope=scope_of(fields, scope), keys=keys, signature=signature)


_WARM_FIELDS = {"title": "Sony Bravia KDL-40V4100 40in LCD TV", "category": "tv", "price": 399.0,
                "body": "Full HD, three HDMI inputs, wall mount. Call 555-0100 or mail a@example.com.",
                "lat": 48.85, "lon": 2.35}
"""A record for :meth:`DocumentBuilder.warm` with a value for every built-in field role."""


def warm_signatures(params: SignatureParams) -> None:
    """Sign one made-up record with ``params`` and drop it: the signature code's first-call costs
    in this process (~130 ms on a 2-core machine: the LSH band/row parameters, cached on
    ``params``; the MinHash permutations; numpy's lazily imported submodules) are paid now rather
    than by the first real record. Never raises for the record."""
    compute_signatures([_WARM_FIELDS], params, errors="return")


@dataclass(frozen=True)
class DocumentBuilder:
    """Builds index documents for one source table.

    Attributes:
        table: the validated source table.
        params: signature parameters (``[signatures]``).
        scope: the scope kind (see :func:`scope_kind`).
        encoder: the index backend's ``document_encoder`` (see
            :class:`~daemon.backends.base.IndexBackend`), applied to every document built, or
            ``None``. Picklable, so it runs in the :class:`SignaturePool` workers with the build.
        signed: ``signatures.enabled``. ``False`` is plain sync: documents carry the fields and
            scope, an empty signature and no candidate keys (no signature is computed).
        typed: field name -> ``"numeric"`` / ``"date"``: mapped fields whose values must parse
            (:func:`coerce_numbers`); empty: none.
    """

    table: SourceTable
    params: SignatureParams
    scope: str
    encoder: Callable[[IndexDocument], IndexDocument] | None = None
    signed: bool = True
    typed: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings, table: SourceTable) -> DocumentBuilder:
        """Validate ``[signatures]`` and ``[dedup]`` (scope, fields) and build. Raises ConfigError
        naming the key."""
        from daemon.dedup.settings import typed_fields

        return cls(table, SignatureParams.from_mapping(settings.signatures), scope_kind(settings),
                   signed=signatures_enabled(settings.signatures), typed=typed_fields(settings))

    def build(self, row: Mapping[str, Any], version: int) -> IndexDocument:
        """One document for ``row`` at external version ``version``.

        Raises:
            RecordError: the row's values cannot be signed, or the document cannot be encoded by
                ``encoder`` (the message says which and why).
        """
        fields = coerce_numbers(self.table.fields_of(row), self.typed)
        doc = document_from_fields(self.table.name, str(row[self.table.settings.id_column]), version, fields,
                                   self.params, self.scope, signed=self.signed)
        return self._encoded(doc)

    def warm(self) -> None:
        """Sign one made-up record and drop it, so that the first real record does not pay the
        signature code's first-call costs in this process: the LSH band/row parameters, the MinHash
        permutations and numpy's lazily imported submodules, ~130 ms on a 2-core machine (most of
        the first insert's COMMIT -> indexed after a daemon start). Nothing in plain sync. Never
        raises for the record (its error, if any, is dropped with it)."""
        if self.signed:
            warm_signatures(self.params)

    def build_many(self, items: list[tuple[dict[str, Any], int]]) -> list[IndexDocument | RecordError]:
        """:meth:`build` for each ``(row, version)``, the same documents; a failing row yields its
        RecordError in place and the others are built as usual.

        The rows are signed together (:func:`~daemon.signatures.batch.compute_signatures`: the
        numeric work once per batch, the same signatures bit for bit). Top-level and picklable so a
        process pool can run it (see :class:`SignaturePool`).
        """
        out: list[IndexDocument | RecordError | None] = [None] * len(items)
        ready: list[tuple[int, str, int, dict[str, Any]]] = []
        for i, (row, version) in enumerate(items):
            try:
                fields = coerce_numbers(self.table.fields_of(row), self.typed)
            except RecordError as e:
                out[i] = e
                continue
            ready.append((i, str(row[self.table.settings.id_column]), version, fields))
        sigs: list[Signature | RecordError | None] = [None] * len(ready)
        if self.signed:
            sigs = compute_signatures([fields for *_, fields in ready], self.params, errors="return")
        for (i, record_id, version, fields), sig in zip(ready, sigs):
            if isinstance(sig, RecordError):
                out[i] = sig
                continue
            try:
                out[i] = self._encoded(signed_document(self.table.name, record_id, version, fields, self.scope, sig))
            except RecordError as e:
                out[i] = e
        return out  # type: ignore[return-value]  # every slot is filled

    def _encoded(self, doc: IndexDocument) -> IndexDocument:
        """``doc`` through :attr:`encoder` (when set). Raises RecordError: not encodable."""
        if self.encoder is None:
            return doc
        try:
            return self.encoder(doc)
        except (ValueError, TypeError) as e:
            raise RecordError(f"document not serialisable: {e}") from e


def exit_with_parent(parent_pid: int, interval_s: float = 1.0) -> None:
    """Worker initializer of :class:`SignaturePool`: a daemon thread that ends this worker process
    (``os._exit(0)``) once process ``parent_pid`` is gone, checked every ``interval_s`` seconds.

    Pool workers started through the forkserver are not the daemon's children and keep their task
    queue's write end, so a daemon killed with ``kill -9`` would otherwise leave them (and the
    forkserver, which waits for them) running for ever outside a systemd control group.
    Also settles the worker's collector (:func:`daemon.heap.settle`).
    """
    def watch() -> None:
        while True:
            time.sleep(interval_s)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:  # alive, owned by another user (pid reused): keep waiting
                pass

    threading.Thread(target=watch, name="nearsync-exit-with-parent", daemon=True).start()
    heap.settle()


class SignaturePool:
    """Builds documents for large batches in worker processes (signatures are CPU-bound).

    Batches smaller than ``min_parallel`` rows are built inline, so realtime latency does not pay
    for inter-process transfer. ``workers = 0`` disables the pool.

    Args:
        builder: the document builder (pickled once per chunk).
        workers: worker processes (default: CPU count, at most 4; none when ``builder.signed`` is
            false: a plain-sync document costs a few µs to build, less than its trip to a worker).
        min_parallel: smallest batch worth splitting across workers.
    """

    def __init__(self, builder: DocumentBuilder, *, workers: int | None = None, min_parallel: int = 256) -> None:
        self.builder = builder
        if workers is None:
            workers = min(4, os.cpu_count() or 1) if builder.signed else 0
        self.workers = workers
        self.min_parallel = min_parallel
        self._pool: Any = None
        self._warming: list[Any] = []
        self._warmer: threading.Thread | None = None

    async def build(self, items: list[tuple[dict[str, Any], int]]) -> list[IndexDocument | RecordError]:
        """Documents (or RecordErrors) for ``(row, version)`` items, in order."""
        out: list[IndexDocument | RecordError] = []
        async for part in self.build_chunks(items, -(-len(items) // max(1, self.workers))):
            out += part
        return out

    async def build_chunks(self, items: list[tuple[dict[str, Any], int]],
                           chunk_rows: int) -> AsyncIterator[list[IndexDocument | RecordError]]:
        """Documents (or RecordErrors) for ``(row, version)`` items, yielded in order as consecutive
        parts of at most ``chunk_rows`` items (one part for fewer than ``min_parallel`` items).

        Every part is handed to the workers at once and yielded as soon as it and the parts before
        it are built, so the caller can write part N while later parts are still being built.
        Always yields at least one part (an empty one for no items). Close it with
        ``contextlib.aclosing`` when leaving early: parts not yet started are then cancelled.

        Without a pool (``workers < 2``, e.g. plain sync), a batch of ``min_parallel`` rows or more
        is built on a thread, one part ahead of the caller: while the caller waits on the index
        write of part N, part N + 1 is built (the write's CPU time is the database's). So is a
        batch that comes while the pool's workers are still starting (:attr:`ready` false; the
        pool is started then if it was not): their forkserver imports the signature code, ~1 s on
        a 2-core machine. The first 500-row batch of ``nearsync evaluate`` (Abt-Buy) took 1.5 s
        waiting for the workers, and 0.8-0.9 s built on the thread (two lanes at once, beside the
        forkserver's imports).
        """
        import asyncio

        if len(items) < self.min_parallel:
            yield self.builder.build_many(items)
            return
        if not self.ready:
            self.start()  # nothing without a pool (workers < 2) or when already started
        if self.workers < 2 or not self.ready:
            size = max(1, chunk_rows)
            chunks = [items[i:i + size] for i in range(0, len(items), size)]
            loop = asyncio.get_running_loop()
            ahead = loop.run_in_executor(None, self.builder.build_many, chunks[0])
            try:
                for i in range(len(chunks)):
                    part = await ahead
                    if i + 1 < len(chunks):
                        ahead = loop.run_in_executor(None, self.builder.build_many, chunks[i + 1])
                    yield part
            finally:
                ahead.cancel()
            return
        pool = self._executor()
        loop = asyncio.get_running_loop()
        size = max(1, chunk_rows)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        futures: list[Any] = [self._submit(loop, pool, c) for c in chunks]
        try:
            for i, chunk in enumerate(chunks):
                future, futures[i] = futures[i], None  # a part yielded is not kept here (memory)
                try:
                    part = await future
                except Exception as e:  # noqa: BLE001 - the pool broke (a worker killed, no forkserver): not the rows' fault
                    # build_many returns RecordError values for bad rows and does not raise for them, so an
                    # exception here is the pool's; build inline and start a fresh pool next time.
                    if self._pool is not None:
                        _log.warning("signature pool failed, building this batch inline",
                                     error=f"{type(e).__name__}: {e}"[:300])
                        self.close()
                    part = self.builder.build_many(chunk)
                yield part
        finally:
            for left in futures:
                if left is not None:
                    left.cancel()

    def _submit(self, loop: Any, pool: Any, chunk: list[tuple[dict[str, Any], int]]) -> Any:
        """``build_many(chunk)`` on ``pool`` as an asyncio future. A pool that already knows it is
        broken (a worker killed) raises on submission; the future then carries that error, so the
        part is handled like one whose worker died while building it (built inline)."""
        try:
            return loop.run_in_executor(pool, self.builder.build_many, chunk)
        except Exception as e:  # noqa: BLE001 - BrokenProcessPool, or a pool shut down meanwhile
            future = loop.create_future()
            future.set_exception(e)
            return future

    def start(self) -> None:
        """Start the worker processes now, on a thread of this process, and return at once, rather
        than at the first large batch (which would otherwise wait ~1 s for them to start and import
        the signature code); :attr:`ready` says when they have. Does nothing when the pool is
        disabled (``workers < 2``) or already started."""
        if self.workers < 2 or self._pool is not None:
            return
        pool = self._executor()

        def warm() -> None:
            # One task each (the first-call costs, DocumentBuilder.warm, paid in each worker
            # before its first batch): the workers are started on demand. The first submit waits for the
            # forkserver to import the signature code (~0.8 s), hence a thread of its own: on the
            # daemon's event loop it held `nearsync run`'s start and every batch meanwhile.
            try:
                warming = [pool.submit(self.builder.warm) for _ in range(self.workers)]
            except Exception:  # noqa: BLE001 - a broken or shut pool: ready, so the next batch finds out
                warming = []
            if self._pool is pool:  # not closed (a broken pool replaced) meanwhile
                self._warming = warming

        self._warmer = threading.Thread(target=warm, name="nearsync-signature-pool-start", daemon=True)
        self._warmer.start()

    @property
    def ready(self) -> bool:
        """True once the pool's start-up tasks (:meth:`start`) have been submitted and have run:
        its forkserver has imported the signature code and its workers take batches without a
        start-up wait (or the submission failed, and the next batch finds the pool broken). False
        for no pool, or a pool created without :meth:`start`."""
        warmer = self._warmer
        return (self._pool is not None and warmer is not None and not warmer.is_alive()
                and all(f.done() for f in self._warming))

    def _executor(self) -> Any:
        """The process pool, created on first use. Its forkserver imports this module (and so the
        signature code) once, before forking the workers."""
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([__name__])
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=exit_with_parent,
                                             initargs=(os.getpid(),))
        return self._pool

    def close(self) -> None:
        """Shut the worker processes down and wait until they have exited, after a start begun by
        :meth:`start` has finished (up to 30 s). Parts not yet started are cancelled; a part being
        built is finished first (a 250-row part takes ~0.1 s). Waiting matters: a worker still
        starting when its parent exits finds the pool's semaphores already removed and prints a
        ``FileNotFoundError`` traceback (``SemLock._rebuild``), as ``nearsync evaluate`` of a few
        records did about once in three runs. Idempotent; the next large batch starts a new pool."""
        if self._warmer is not None:  # a forkserver left half started prints a traceback at exit
            self._warmer.join(timeout=30)
            self._warmer = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._warming = []

