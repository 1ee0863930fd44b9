"""Poison records: a queued change whose handling crashes or hangs every worker that takes it.

Per-record errors are the handler's to report (retried, then dead-lettered), but a record that
kills its worker — a library call that never returns and is cut by the stall watchdog
(:mod:`daemon.capture.watchdog`) or systemd's, a segmentation fault, the kernel's out-of-memory
killer — leaves no error behind. Its claim outlives the worker, the next worker takes it over, dies
the same way, and the queue stands still behind it. The claim counts those stops: a row taken over
from a holder that no longer holds its liveness lock gets one more ``takeovers``
(``sql/queries/queue.sql``, ``claim``). Then:

* **one stop** costs nothing: deploys, host restarts and kills stop workers in the middle of a
  batch, and the batch is simply handled again;
* **from** ``max_takeovers - 1`` **stops** (2 by default) the row is a *suspect*: the lane that
  claims it gives back every row it claimed (the suspect too), waits until no other lane of its
  process holds rows (:class:`IsolationGate`), claims the suspect again and handles it alone.
  Should the process stop now, the suspect is the only change in its hands, so the next count is
  that record's own;
* **at** ``max_takeovers`` **stops** (3 by default) the row goes straight to the dead-letter table
  with an error saying so, and the rest of the queue flows. ``nearsync deadletter retry`` puts
  it back once the cause is fixed.

An innocent record can reach the suspect count by sharing two dying batches with a poison record,
but never the dead-letter count: a suspect is only ever in hand alone, so its third stop is its own.
Lanes of other processes do not matter: a process's stop orphans its own claims only.

The decision per claimed batch is pure (:func:`screen`); the gate is the only shared state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from daemon.capture.queue import Claimed


def poison_error(takeovers: int) -> str:
    """The dead-letter error text of a record whose worker stopped ``takeovers`` times with it in
    hand (the last time with nothing else in hand)."""
    return (f"PoisonRecord: the worker stopped {takeovers} times while handling this change "
            "(a crash, a kill, or the stall watchdog cutting a call that did not return), the last "
            "time with no other change in hand; dead-lettered so that the rest of the queue flows. "
            "Look for the worker's traceback in its log, fix the cause, then `nearsync deadletter retry`")


@dataclass(frozen=True)
class Screened:
    """What to do with a claimed batch (:func:`screen`).

    Attributes:
        poison: rows to dead-letter now (``takeovers >= max_takeovers``).
        suspect: the one row to handle alone, or None.
        release: rows to give back unhandled (the rest of the batch when there is a suspect, which
            is given back too while its lane waits; every suspect when one is already being
            handled alone in this process).
        handle: rows to handle as a normal batch (empty when there is a suspect).
    """

    poison: list[Claimed]
    suspect: Claimed | None
    release: list[Claimed]
    handle: list[Claimed]


def screen(batch: Sequence[Claimed], max_takeovers: int, *, isolating_elsewhere: bool) -> Screened:
    """Sort a claimed batch into poison, one suspect, rows to give back and rows to handle (pure).

    Args:
        batch: the claimed rows, oldest change first.
        max_takeovers: ``[daemon] max_takeovers`` (>= 2): rows at it are poison; rows at
            ``max_takeovers - 1`` are suspects.
        isolating_elsewhere: another lane of this process is handling (or waiting to handle) a
            suspect alone: every suspect here is given back, the other rows are handled.
    Returns:
        :class:`Screened`; ``poison``, ``suspect``, ``release`` and ``handle`` partition ``batch``.
    """
    suspect_at = max_takeovers - 1
    poison = [c for c in batch if c.takeovers >= max_takeovers]
    suspects = [c for c in batch if suspect_at <= c.takeovers < max_takeovers]
    normal = [c for c in batch if c.takeovers < suspect_at]
    if not suspects:
        return Screened(poison, None, [], normal)
    if isolating_elsewhere:
        return Screened(poison, None, suspects, normal)
    return Screened(poison, suspects[0], suspects[1:] + normal, [])


class IsolationGate:
    """Lets the lanes of one process hold rows together, or one lane hold one suspect alone.

    A lane handles a normal batch inside :meth:`shared` (claim included, so rows are in hand only
    inside it). A lane that claimed a suspect calls :meth:`alone` from inside its own
    :meth:`shared`: from then on no lane enters :meth:`shared` (new claims wait), and ``alone``
    returns once every other lane has left it. :attr:`isolating` tells lanes that claim meanwhile
    (they entered before) to give their suspects back rather than hold them.
    """

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._inside = 0
        self.isolating = False
        """A lane is handling, or waiting to handle, a suspect alone."""

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        """Hold rows beside the other lanes; waits while a lane handles a suspect alone."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self.isolating)
            self._inside += 1
        try:
            yield
        finally:
            async with self._cond:
                self._inside -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def alone(self, give_back: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
        """From inside :meth:`shared`, with nothing awaited since :attr:`isolating` was read false:
        close the gate to new lanes, ``await give_back()`` (the lane returns every row it holds,
        the suspect included, so that nothing of its own is in hand while it waits), wait until
        every other lane has left, and keep them out until the block ends."""
        self.isolating = True
        try:
            await give_back()
            async with self._cond:
                await self._cond.wait_for(lambda: self._inside <= 1)
            yield
        finally:
            async with self._cond:
                self.isolating = False
                self._cond.notify_all()
