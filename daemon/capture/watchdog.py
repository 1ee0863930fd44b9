"""The stall watchdog: a process whose event loop stops running exits, with its stacks on stderr.

A library call that never returns (leidenalg 0.12 looped forever on one 12-record component, see
``clusters.leiden_weight``) holds the event loop, and usually the GIL: no Python thread, signal
handler or asyncio timer of the process runs again. :func:`faulthandler.dump_traceback_later`
does not need either: its C thread waits for the timeout, writes every thread's Python stack to
stderr and calls ``_exit(1)``. :class:`StallWatchdog` re-arms that timer from a task of the event
loop every quarter of the timeout, so it fires only when the loop has not run for the whole
timeout. The supervisor (systemd's ``Restart=on-failure``) then restarts the process; the change it
held is taken over by the next claim, which counts the stop (:mod:`daemon.capture.poison`).

The same task pings systemd's ``WATCHDOG=1``: the units' ``WatchdogSec`` then means "the event loop
is running", not "a batch ended within 60 s", so a long batch that makes progress is not killed.

``faulthandler``'s timer is one per process: several loops in one process (``evaluate`` runs two)
re-arm the same timer, which fires only when none of them ran, i.e. when the shared event loop
did not.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
from collections.abc import AsyncIterator
from typing import Protocol


STDERR_FD = 2
"""Where the stacks go: the process's stderr by descriptor (``sys.stderr`` may be replaced by an
object without one, as under a test runner's capture)."""


class _Notifier(Protocol):
    def notify(self, state: str) -> None: ...


class StallWatchdog:
    """Arms :func:`faulthandler.dump_traceback_later` and keeps re-arming it while the loop runs.

    Args:
        timeout_s: seconds without the event loop running before the process exits (0: off,
            nothing armed; systemd's ping is still sent).
        notifier: ``sdnotify.SystemdNotifier``-like object; ``notify("WATCHDOG=1")`` is called on
            every beat (a no-op outside systemd).
    """

    def __init__(self, timeout_s: float, notifier: _Notifier) -> None:
        self.timeout_s = timeout_s
        self.notifier = notifier
        self.beat_s = min(5.0, timeout_s / 4) if timeout_s > 0 else 5.0
        """Seconds between beats: a quarter of the timeout, at most 5 s (systemd's watchdog wants a
        ping well inside its 60 s)."""

    def beat(self) -> None:
        """Re-arm the timer for a full ``timeout_s`` from now and ping systemd."""
        if self.timeout_s > 0:
            faulthandler.dump_traceback_later(self.timeout_s, repeat=False, file=STDERR_FD, exit=True)
        self.notifier.notify("WATCHDOG=1")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[StallWatchdog]:
        """Beat every :attr:`beat_s` until the block ends, then disarm the timer."""
        self.beat()

        async def beats() -> None:
            while True:
                await asyncio.sleep(self.beat_s)
                self.beat()

        task = asyncio.create_task(beats(), name="nearsync-stall-watchdog")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if self.timeout_s > 0:
                faulthandler.cancel_dump_traceback_later()
