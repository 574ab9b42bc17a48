"""The console's side of the watcher process (watcher.py): start it for a run, fold what it reports
into the console's Run with core's own fold (RunState.apply), hand its lines to the line
listeners, stop it. Runs in the console's event loop; reading a report is cheap (the expensive
per-line work happened in the watcher)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.run.events import Event
from ..core.run.watchers.metrics import HISTORY  # values per metrics series ("history+" of the stream)

if TYPE_CHECKING:
    from ..core.run.run import Run

LIMIT = 64 * 1024 * 1024  # one report line (the watcher keeps them near a megabyte)
KEEP_LAST = 20  # ProcState.last_lines holds this many
# Events of one report folded in one turn of the loop; a key pressed meanwhile goes between two slices. While
# 128 nodes come up one report can hold thousands (the pairs of a 64P64D run move 4,096 at a time): folding
# 2,310 at once took 80 ms (bench/atomdeck_key_trace.py), and a key waited for all of them.
FOLD_SLICE = 256
# The watcher runs this much nicer than the console. It runs in a session of its own, and sets its session's
# scheduling group below the console's itself (core/cli/watcher.py GROUP_NICE): with the kernel's autogroups a
# process's nice ranks it only inside its session. Its own nice still ranks it under the console where there are no
# autogroups. It stops when the console closes its stdin or goes away: no signal of the console's terminal needed.
WATCHER_NICE = 5


class WatchProcess:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.proc: asyncio.subprocess.Process | None = None
        self.known = len(run.rd.event_lines())  # events this console's Run has folded in already
        self.error = ""
        self.ready = False
        self.stopping = asyncio.Event()  # the watcher acknowledged "stopping"
        # the processes whose every line this console wants (a log view, the last lines panel); the others
        # come as counts and their last lines, into core's state. None: every line of every process.
        self.wanted: set[str] | None = None
        self.on_from: Callable[[str, int], None] | None = None  # (process, offset): its every line from there
        self.on_count: Callable[[str, int], None] | None = None  # (process, lines) it logged, not sent
        self.slices = 0  # slices of a report's events folded with the loop let go after them (tests)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def stderr_path(self):
        return self.run.rd.path / "watcher.log"

    async def start(self) -> None:
        # stderr to a file, not a pipe nobody reads until the end: a watcher that logs more than a pipe
        # holds (64 KiB of repeated tracebacks) would block on its next write and stop watching
        # (opened in a thread: creating a file waits for the file system's journal, and right after 129 local
        # starts that open held this loop 65-370 ms, keys waiting; scale_console.py 128 with bench/busy_trace)
        fd = await asyncio.to_thread(os.open, self.stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "atomdeck.core.cli.watcher", self.run.id, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=fd, limit=LIMIT, start_new_session=True)
        finally:
            os.close(fd)
        try:
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, os.getpriority(os.PRIO_PROCESS, 0) + WATCHER_NICE)
        except OSError:  # (it ended already: its error is in its log, read when it is reaped)
            pass

    async def pump(self) -> None:
        """Read reports until the watcher ends; the run keeps running whatever happens here."""
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            await self.handle_sliced(msg)
        code = await self.proc.wait()
        if code not in (0, -15) and not self.error:
            try:
                err = self.stderr_path.read_text(errors="replace").strip()
            except OSError:
                err = ""
            self.error = f"the watcher exited {code}" + (f": {err.splitlines()[-1]}" if err else "") + \
                f" (its log: {self.stderr_path})"

    def handle(self, msg: dict) -> None:
        run = self.run
        if "ready" in msg:
            self.ready = True
            # what other sessions recorded between this console reading the run and the watcher
            # opening it: fold it in from the run directory
            for text in run.rd.event_lines()[self.known:int(msg["ready"])]:
                if text.strip():
                    self._fold(Event.from_json(text))
            self.known = int(msg["ready"])
            if self.wanted is not None:
                self._ask()
        for e in msg.get("e", ()):
            self._fold(self._event(e))
        t = msg.get("t", 0.0)
        listeners = list(run.line_listeners)
        for name, lines in msg.get("l", ()):
            for fn in listeners:
                for line in lines:
                    fn(name, line)
            for line in lines[-KEEP_LAST:]:  # last lines and "silent for", through core's fold
                run.state.apply(Event("proc.line", name, detail=line, t=t))
        for name, count, last in msg.get("q", ()):  # processes no view shows: their last lines only
            for line in last[-KEEP_LAST:]:
                run.state.apply(Event("proc.line", name, detail=line, t=t))
            if self.on_count is not None:
                self.on_count(name, int(count))
        for name, offset in (msg.get("from") or {}).items():
            if self.on_from is not None:
                self.on_from(name, int(offset))
        if msg.get("stopping"):
            self.stopping.set()
        if "error" in msg:
            self.error = str(msg["error"])

    async def handle_sliced(self, msg: dict) -> None:
        """`handle`, with a report's events folded FOLD_SLICE at a time, the loop free between slices (in order:
        the rest of the report, its lines and flags, after its last events, as handle does)."""
        events = msg.get("e") or ()
        if len(events) <= FOLD_SLICE or "ready" in msg:
            self.handle(msg)
            return
        last = (len(events) - 1) // FOLD_SLICE * FOLD_SLICE  # where the last slice starts
        for start in range(0, last, FOLD_SLICE):
            for e in events[start:start + FOLD_SLICE]:
                self._fold(self._event(e))
            self.slices += 1
            await asyncio.sleep(0)
        self.handle({**msg, "e": events[last:]})

    def want(self, names: set[str]) -> None:
        """Ask for every line of these processes (and only counts and last lines of the others); the
        watcher answers with the offset each newly asked one starts from (on_from)."""
        self.wanted = set(names)
        if self.ready:
            self._ask()

    def _ask(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None or proc.stdin is None:
            return
        try:
            proc.stdin.write(b"lines " + json.dumps(sorted(self.wanted or ())).encode() + b"\n")
        except (OSError, RuntimeError):  # the watcher is going away: pump() reports how it ended
            pass

    def _event(self, e: dict | str) -> Event:
        """An event of the stream: an object (a JSON string from a watcher before issue 19's stream change);
        a metrics event's "history+" is appended to the history this console has of the endpoint."""
        d = json.loads(e) if isinstance(e, str) else e
        data = d.get("data") or {}
        if "history+" in data:
            had = (self.run.state.metrics.get(d["name"]) or {}).get("history") or {}
            data = {k: v for k, v in data.items() if k != "history+"}
            data["history"] = {k: (had.get(k, []) + add)[-HISTORY:] for k, add in d["data"]["history+"].items()}
        return Event.from_dict({**d, "data": data})

    def _fold(self, e: Event) -> None:
        if self.run.state.apply(e):
            for fn in list(self.run.listeners):
                fn(e)

    async def tell_stopping(self, wait: float = 2.0) -> bool:
        """Tell the watcher a teardown starts (so it records exits as stops); True once it knows."""
        proc = self.proc
        if proc is None or proc.returncode is not None or proc.stdin is None or not self.ready:
            return False
        try:
            proc.stdin.write(b"stopping\n")
            await proc.stdin.drain()
            await asyncio.wait_for(self.stopping.wait(), wait)
        except (OSError, RuntimeError, TimeoutError):
            return False
        return True

    async def stop(self, grace: float = 3.0) -> None:
        """Ask the watcher to stop (it saves where it read each log), then insist, by its PID."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except (OSError, RuntimeError):
                pass
        for signal_it in (None, proc.terminate, proc.kill):
            if signal_it is not None:
                try:
                    signal_it()
                except ProcessLookupError:
                    return
            try:
                await asyncio.wait_for(proc.wait(), grace)
                return
            except TimeoutError:
                continue
