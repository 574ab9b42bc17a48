"""Follow a local log file from a byte offset, yielding complete lines (bytes counted exactly).

New bytes are noticed through inotify (core/remote/inotify.py: one watch per directory, shared by every
follower) the moment they are written; polling stays as the safety net (files on NFS written by other
hosts raise no local event) and is all there is where inotify is unavailable.
Splitting and decoding are loglines' (the same for local, Slurm and SSH logs)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import replace

from . import inotify
from .backoff import Backoff
from .loglines import LineSplitter, read_last_lines

# a file with nothing new is polled after `interval`, ×1.5, at most 0.25 s apart; reset by new data
IDLE_POLL = Backoff(first_s=0.05, factor=1.5, max_s=0.25, give_up_s=None)

__all__ = ["follow", "read_last_lines"]


async def follow(path: str, offset: int = 0, interval: float = 0.05,
                 stop: asyncio.Event | None = None, max_interval: float | None = None,
                 events: bool = True) -> AsyncIterator[tuple[int, str]]:
    """Yield (offset after the line, line) for each complete line from `offset`, then keep following.

    With `events` (inotify), a write wakes the follower at once; the idle poll (`interval`, x1.5, at
    most `max_interval`, default 0.25 s) is then only a safety net, so a caller whose files are written
    on this host (the local launcher) can make it long. The file may not exist yet; if it shrinks
    (truncated or replaced), reading restarts at 0."""
    lines = LineSplitter(offset)
    pos = offset  # bytes read so far
    idle = replace(IDLE_POLL, first_s=interval, max_s=max(interval, max_interval or IDLE_POLL.max_s))
    waits = idle.delays()
    sub = inotify.subscribe(path) if events else None
    try:
        while stop is None or not stop.is_set():
            if sub is not None:
                sub.clear()  # before looking at the file: a write from here on sets it again
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
            if sub is not None and sub.lost:  # the directory went away: poll, and watch again once it is back
                sub.close()
                sub = None
            if sub is None and events:
                sub = inotify.subscribe(path)
                if sub is not None:
                    continue  # look once more: the file may have changed before the watch existed
            if sub is not None:
                # a caller that named max_interval says the file is written on this host (inotify sees
                # every write): the safety poll need not start short after each burst
                await sub.wait(idle.max_s if max_interval else next(waits))
            else:
                await asyncio.sleep(next(waits))
    finally:
        if sub is not None:
            sub.close()
