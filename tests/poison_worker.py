"""A queue worker process for tests/test_poison.py: the real :class:`QueueLoop` on the dedup queue
of a real database, with a handler that records what it handled in ``poison_test_done`` and hangs
— a blocking call that never returns, as leidenalg's loop did — on the records named on the command line.

Usage: ``python tests/poison_worker.py DSN STALL_TIMEOUT_S CONCURRENCY PAUSE_S RECORD_ID...`` (PAUSE_S: seconds
each batch awaits, yielding to the event loop, before it is recorded)
Exits 0 once the queue is empty; exit 1 with stacks on stderr is the stall watchdog.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psycopg

from daemon.capture.loop import BatchResult, QueueLoop
from daemon.capture.queue import Claimed
from daemon.config import DaemonSettings


class HangingHandler:
    """Records the rows it handles; blocks the event loop for good on a poison record."""

    def __init__(self, poison: set[str], pause_s: float = 0.0) -> None:
        self.poison = poison
        self.pause_s = pause_s

    async def process(self, conn: psycopg.AsyncConnection[Any], batch: Sequence[Claimed]) -> BatchResult:
        """Insert one ``poison_test_done`` row per handled record (with the batch size), or hang."""
        if any(c.record_id in self.poison for c in batch):
            time.sleep(3600)  # the event loop stops here; only the watchdog's C thread runs
        if self.pause_s:
            await asyncio.sleep(self.pause_s)  # slow work that lets the loop run: no stall
        await conn.execute("INSERT INTO poison_test_done (record_id, batch_size) SELECT unnest(%s::text[]), %s",
                           ([c.record_id for c in batch], len(batch)))
        return BatchResult(done=list(batch))


async def main(dsn: str, stall_s: float, concurrency: int, pause_s: float, poison: set[str]) -> None:
    """Drain the dedup queue once with the hanging handler, then return."""
    settings = replace(DaemonSettings(), stall_timeout_s=stall_s, batch_size=5, poll_interval_s=0.2,
                       retry_backoff_s=0.05)
    loop = QueueLoop(dsn, "dedup", HangingHandler(poison, pause_s), settings, concurrency=concurrency)
    async with loop.session():
        await loop.drain()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), set(sys.argv[5:])))
