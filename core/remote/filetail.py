"""Follow a local log file from a byte offset, yielding complete lines (bytes counted exactly).

Splitting and decoding are loglines' (the same for local, Slurm and SSH logs)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import replace

from .backoff import Backoff
from .loglines import LineSplitter, read_last_lines

# a file with nothing new is polled after `interval`, ×1.5, at most 0.25 s apart; reset by new data
IDLE_POLL = Backoff(first_s=0.05, factor=1.5, max_s=0.25, give_up_s=None)

__all__ = ["follow", "read_last_lines"]


async def follow(path: str, offset: int = 0, interval: float = 0.05,
                 stop: asyncio.Event | None = None) -> AsyncIterator[tuple[int, str]]:
    """Yield (offset after the line, line) for each complete line from `offset`, then keep following.

    The file may not exist yet; if it shrinks (truncated or replaced), reading restarts at 0."""
    lines = LineSplitter(offset)
    pos = offset  # bytes read so far
    idle = replace(IDLE_POLL, first_s=interval)
    waits = idle.delays()
    while stop is None or not stop.is_set():
        try:
            size = os.path.getsize(path)
        except OSError:
            size = -1
        if 0 <= size < pos:
            pos, lines = 0, LineSplitter(0)
        if size > pos:
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read(min(size - pos, 4 * 1024 * 1024))
            pos += len(chunk)
            for i, item in enumerate(lines.feed(chunk), 1):
                yield item
                if i % 256 == 0:
                    # a 4 MB backlog is ~30,000 lines, each classified by the consumer between yields:
                    # let the loop run (probes, other tails) every few hundred, or a 1 s probe
                    # timeout expires in a stalled loop while the port is open
                    await asyncio.sleep(0)
            waits = idle.delays()
            await asyncio.sleep(0)  # a file that never stops growing must not starve the event loop
            continue
        await asyncio.sleep(next(waits))
