"""Follow a local log file from a byte offset, yielding complete lines (bytes counted exactly)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import replace

from .backoff import Backoff

MAX_LINE = 64 * 1024  # a longer "line" is split into pieces, never dropped
# a file with nothing new is polled after `interval`, ×1.5, at most 0.25 s apart; reset by new data
IDLE_POLL = Backoff(first_s=0.05, factor=1.5, max_s=0.25, give_up_s=None)


def split_lines(buf: bytes, final: bool = False) -> tuple[list[tuple[bytes, int]], bytes]:
    """(line, bytes it used) for each complete line, and the unfinished rest.

    A line longer than MAX_LINE comes out in MAX_LINE pieces; with `final`, the rest comes out too."""
    out: list[tuple[bytes, int]] = []
    start = 0
    n = len(buf)
    while start < n:
        i = buf.find(b"\n", start, start + MAX_LINE + 1)
        if i >= 0:
            out.append((buf[start:i], i + 1 - start))
            start = i + 1
        elif n - start >= MAX_LINE:
            out.append((buf[start:start + MAX_LINE], MAX_LINE))
            start += MAX_LINE
        else:
            break
    rest = buf[start:]
    if final and rest:
        out.append((rest, len(rest)))
        rest = b""
    return out, rest


def decode(line: bytes) -> str:
    text = line.decode("utf-8", "replace").rstrip("\r")
    # control characters (other than tab) could drive a terminal: show them, do not send them
    if any(c < " " and c != "\t" for c in text):
        text = "".join(c if c >= " " or c == "\t" else f"\\x{ord(c):02x}" for c in text)
    return text


async def follow(path: str, offset: int = 0, interval: float = 0.05,
                 stop: asyncio.Event | None = None) -> AsyncIterator[tuple[int, str]]:
    """Yield (offset after the line, line) for each complete line from `offset`, then keep following.

    The file may not exist yet; if it shrinks (truncated or replaced), reading restarts at 0."""
    pending = b""
    pos = offset  # bytes read so far
    idle = replace(IDLE_POLL, first_s=interval)
    waits = idle.delays()
    while stop is None or not stop.is_set():
        try:
            size = os.path.getsize(path)
        except OSError:
            size = -1
        if 0 <= size < pos:
            pos, pending = 0, b""
        if size > pos:
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read(min(size - pos, 4 * 1024 * 1024))
            line_start = pos - len(pending)
            pos += len(chunk)
            lines, pending = split_lines(pending + chunk)
            for i, (raw, used) in enumerate(lines, 1):
                line_start += used
                yield line_start, decode(raw)
                if i % 256 == 0:
                    # a 4 MB backlog is ~30,000 lines, each classified by the consumer between yields:
                    # let the loop run (probes, other tails) every few hundred, or a 1 s probe
                    # timeout expires in a stalled loop while the port is open
                    await asyncio.sleep(0)
            waits = idle.delays()
            await asyncio.sleep(0)  # a file that never stops growing must not starve the event loop
            continue
        await asyncio.sleep(next(waits))


def read_last_lines(path: str, n: int = 20, max_bytes: int = 256 * 1024) -> list[str]:
    """The last n complete lines of a file (for diagnoses), without reading all of a big log."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines, _ = split_lines(data, final=True)
    return [decode(raw) for raw, _ in lines[-n:]]
