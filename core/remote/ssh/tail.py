"""Resumable log tails from a byte offset, over any Runner (local or SSH).

`tail()` yields `(next_offset, line)`: `next_offset` is the byte offset just past that line, so a
caller that stores it can resume later (another session, after a crash) with no line lost and
none repeated. Offsets count bytes of the file, not characters: a partial last line is held back
until its newline arrives, lines are split and decoded by loglines (as local and Slurm logs are),
and a line longer than `max_line` bytes comes out in pieces. When the connection drops the
tail restarts from the last offset with back-off; the connection's state reaches `on_state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from ..backoff import Backoff
from ..loglines import MAX_LINE, LineSplitter
from ..shell import CommandError, LocalRunner, Result, Runner
from .connection import ConnState
from .target import SshError

__all__ = ["DEFAULT_MAX_LINE", "ConnState", "LineSplitter", "tail", "tail_argv"]

DEFAULT_MAX_LINE = MAX_LINE
# a dropped `tail -F` restarts after 0.25 s, ×2, at most 5 s apart (give up: the caller's give_up_s)
TAIL_RETRY = Backoff(first_s=0.25, factor=2.0, max_s=5.0, give_up_s=None)


def tail_argv(path: str, offset: int, follow: bool = True) -> list[str]:
    """The command that prints `path` from byte `offset` on (and keeps following it by name)."""
    return ["tail", "-c", f"+{offset + 1}", *(["-F"] if follow else []), "--", path]


async def tail(runner: Runner, path: str, offset: int = 0, *, follow: bool = True,
               max_line: int = DEFAULT_MAX_LINE, backoff: Backoff | None = None,
               give_up_s: float | None = None, partial: bool = True,
               on_state: Callable[[ConnState], None] | None = None) -> AsyncIterator[tuple[int, str]]:
    """Lines of `path` on the runner's host from byte `offset`, as `(next_offset, line)`.

    follow=True keeps going (`tail -F`) and survives dropped connections: it restarts from the
    last offset with back-off, forever unless `give_up_s` seconds pass without progress. Trust and
    login errors (SshError.permanent) and a missing `tail` are raised at once. follow=False reads
    to the current end of the file and then hands out the partial last line too (unless not `partial`:
    its writer may still finish it, and the next read starts at its first byte).
    `on_state` receives the SSH connection's state changes (connecting/up/lost/reconnecting/...).
    """
    bo = backoff or TAIL_RETRY
    lines = LineSplitter(offset, max_line)
    watch = getattr(runner, "watch", None)
    unwatch = watch(on_state) if on_state is not None and watch is not None else None
    loop = asyncio.get_running_loop()
    delays = bo.delays()
    failing_since: float | None = None
    try:
        while True:
            error: Exception | None = None
            try:
                stream = _byte_stream(runner, tail_argv(path, lines.offset, follow))
                async with contextlib.aclosing(stream):
                    async for data in stream:
                        failing_since, delays = None, bo.delays()
                        for item in lines.feed(data):
                            yield item
                if not follow:
                    for item in lines.flush() if partial else []:
                        yield item
                    return
                # `tail -F` only ends when something killed it: treat it like a drop.
            except SshError as exc:
                if exc.permanent:
                    raise
                error = exc
            except CommandError as exc:
                if not follow or exc.result.rc in (126, 127):  # no such file / no `tail` there
                    raise
                error = exc
            lines.reset()  # the partial line will be read again from lines.offset
            now = loop.time()
            failing_since = failing_since if failing_since is not None else now
            if give_up_s is not None and now - failing_since >= give_up_s:
                if error is not None:
                    raise error
                raise CommandError(Result(tail_argv(path, lines.offset, follow), 1, "", "tail kept stopping"))
            await asyncio.sleep(next(delays, bo.max_s))
    finally:
        if unwatch is not None:
            unwatch()


def _byte_stream(runner: Runner, argv: list[str]) -> AsyncGenerator[bytes, None]:
    """Raw stdout of argv on the runner. Line-based `Runner.stream` cannot count bytes (it decodes
    and merges stderr), so runners offer `stream_bytes`; LocalRunner gets it here."""
    stream_bytes = getattr(runner, "stream_bytes", None)
    if stream_bytes is not None:
        return stream_bytes(argv)
    if isinstance(runner, LocalRunner):
        return _local_stream_bytes(argv)
    raise TypeError(f"{type(runner).__name__} has no stream_bytes(); remote tails need one")


async def _local_stream_bytes(argv: list[str], chunk: int = 65536) -> AsyncGenerator[bytes, None]:
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    errs = asyncio.ensure_future(proc.stderr.read())
    try:
        while data := await proc.stdout.read(chunk):
            yield data
        rc = await proc.wait()
        if rc != 0:
            raise CommandError(Result(argv, rc, "", (await errs).decode(errors="replace")))
    finally:
        errs.cancel()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
