"""Log text for the screen: lines made safe to draw, the tail of a log file, saving a log.

A log may hold anything a program printed: megabyte "lines", binary junk, terminal escapes. What
reaches the screen is one printable line, capped in length; the full text stays on disk.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from ..core.run.classify import HIGHLIGHT  # noqa: F401 - re-exported: the one list of lines to highlight

MAX_CELLS = 2_000  # longer lines are cut on screen (the file keeps them whole)
_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")  # colour codes and other escapes
_CONTROL = {c: "\ufffd" for c in (*range(0x00, 0x09), *range(0x0a, 0x20), 0x7f)}


def clean(line: str, limit: int = MAX_CELLS) -> str:
    """One printable line: escapes dropped, control characters shown as �, tabs expanded, capped."""
    if line.isascii() and line.isprintable() and len(line) <= limit:
        # the common line, as is (~1 us; the general path's translate looks up every character in a dict:
        # ~6 us a line, 2.6 ms of the loop for a flood's 400-line batch)
        return line
    if len(line) > limit * 4:  # never scan megabytes for escapes
        line = line[:limit * 4]
    if "\x1b" in line:
        line = _CSI.sub("", line)
    line = line.translate(_CONTROL)
    if "\t" in line:
        line = line.expandtabs(4)
    if len(line) > limit:
        line = f"{line[:limit]} … [line cut at {limit} characters; the file on disk has all of it]"
    return line


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")


def read_tail(path: Path, n: int, end: int | None = None, max_bytes: int = 4 * 1024 * 1024) -> list[str]:
    """The last n lines of a file before byte `end` (default: its size), reading at most max_bytes."""
    try:
        size = os.path.getsize(path)
        end = size if end is None else min(end, size)
        start = max(0, end - max_bytes)
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
    except OSError:
        return []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if start > 0 and lines:
        lines = lines[1:]  # the first one is probably cut
    return [decode(x) for x in lines[-n:]]


def iter_lines(path: Path, chunk: int = 1 << 20) -> Iterable[str]:
    """Every line of a file, read in chunks (a log may be large)."""
    rest = b""
    with open(path, "rb") as f:
        while True:
            data = f.read(chunk)
            if not data:
                break
            parts = (rest + data).split(b"\n")
            rest = parts.pop()
            for p in parts:
                yield decode(p)
    if rest:
        yield decode(rest)


def save_logs(target: Path, sources: list[tuple[str, Path | None]], redact, prefix: bool) -> int:
    """Write the full logs (secrets masked by `redact`) to target; returns the number of lines.

    Blocking: run it in a thread worker."""
    count = 0
    with open(target, "w", encoding="utf-8", errors="replace") as out:
        for name, path in sources:
            if path is None or not path.exists():
                continue
            for line in iter_lines(path):
                line = redact(line)
                out.write(f"{name}| {line}\n" if prefix else f"{line}\n")
                count += 1
    return count
