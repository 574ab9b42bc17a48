"""Log line formats of the programs the simulator stands in for, one flushed line at a time.

The console tails log files and must see each line as soon as it is written, so every line is
written whole and flushed at once, under a lock (Mooncake transfers run in worker threads).

- ATOM's own logger ("atom"): ``[atom HH:MM:SS] message`` on stdout (ATOM's engine logs share
  stdout with uvicorn's access log).
- uvicorn: ``INFO:     message`` on stderr (its default handler), access lines on stdout.
- Python tracebacks and argparse errors: stderr.
- AToMesh (Rust ``tracing``): ``YYYY-MM-DD HH:MM:SS  INFO mesh::server: message`` on stdout;
  its ``println!`` banner lines are bare; ``Error: ...`` from ``main`` goes to stderr.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

_lock = threading.Lock()
_RUST_LEVELS = {"debug": 10, "info": 20, "warn": 30, "error": 40}
_rust_threshold = 20


def reset_lock() -> None:
    """A forked child gets a lock of its own (another thread of the parent may have held this one)."""
    global _lock
    _lock = threading.Lock()


def setup_streams() -> None:
    """Make stdout/stderr line-buffered so nothing waits in a buffer."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
        except (AttributeError, ValueError):
            pass


def emit(line: str, stream: TextIO | None = None) -> None:
    """Write one or more complete lines and flush them."""
    stream = stream or sys.stdout
    text = line if line.endswith("\n") else line + "\n"
    with _lock:
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):  # a full disk, a closed pipe: the line is lost, the program goes on, as
            pass  # Python's logging.Handler.handleError does for ATOM's logger ("atom"), which the real ATOM uses


def emit_many(lines: list[str], stream: TextIO | None = None) -> None:
    """Write a batch of lines with one flush (used by the log flood)."""
    if lines:
        emit("\n".join(lines), stream)


def atom(message: str) -> None:
    """A line from ATOM's ``atom`` logger."""
    emit(f"[atom {time.strftime('%H:%M:%S')}] {message}")


def out(message: str) -> None:
    """A bare ``print()`` line on stdout."""
    emit(message)


def err(message: str) -> None:
    """A bare line on stderr (tracebacks, argparse, Rust ``Error:``)."""
    emit(message, sys.stderr)


def uvicorn(message: str, level: str = "INFO") -> None:
    """A uvicorn server line (stderr, level padded the way uvicorn pads it)."""
    emit(f"{(level + ':'):<10}{message}", sys.stderr)


def uvicorn_access(peer: str, method: str, path: str, status: int, reason: str) -> None:
    """A uvicorn access-log line (stdout)."""
    emit(f'INFO:     {peer} - "{method} {path} HTTP/1.1" {status} {reason}')


def set_rust_level(level: str) -> None:
    """Apply AToMesh's ``--log-level``."""
    global _rust_threshold
    _rust_threshold = _RUST_LEVELS.get(level.lower(), 20)


def rust(level: str, target: str, message: str) -> None:
    """A line from AToMesh's ``tracing`` subscriber."""
    if _RUST_LEVELS.get(level.lower(), 20) < _rust_threshold:
        return
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    emit(f"{ts} {level.upper():>5} {target}: {message}")


def rust_duration(seconds: float) -> str:
    """Format a duration the way Rust's ``{:?}`` formats ``std::time::Duration``."""
    if seconds >= 1:
        return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.6f}".rstrip("0").rstrip(".") + "ms"
    return f"{seconds * 1e6:.3f}".rstrip("0").rstrip(".") + "µs"


def rust_str(value: str | None) -> str:
    """``{:?}`` of ``Option<&str>``."""
    if value is None:
        return "None"
    return 'Some("' + value.replace("\\", "\\\\").replace('"', '\\"') + '")'


def rust_list(values: list[str]) -> str:
    """``{:?}`` of ``Vec<String>``."""
    return "[" + ", ".join('"' + v.replace('"', '\\"') + '"' for v in values) + "]"


def hard_exit(code: int) -> None:
    """Leave now, after flushing: no interpreter teardown (Mooncake threads may linger)."""
    with _lock:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (BrokenPipeError, ValueError):
                pass
    os._exit(code)
