"""A Run as the console sees it: core's state, plus the last lines of every process and change
counters the screens read on a timer.

core calls our listeners synchronously for every state change and every log line, so they only
count and append to bounded deques; the screens redraw at most ten times a second from what is
here (see ConsoleApp's pulse). Nothing here talks to a node: live lines come from core's line
listeners, earlier lines from the log file core keeps on disk.

core's watching itself runs in a watcher process (watcher.py); what it reports is folded into
this Run in the console's event loop (watch_client.py), so everything here is single-threaded.
That watcher sends every line only of the processes a view shows (a log view, the last lines panel:
`want_lines`), the others' last lines into core's state; a log view loads the file up to the offset
the watcher names for a process, then appends what it sends (issue 19: under 8 x 2,000 lines/s the
console decoded every line of every process).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.run.events import Event, RunState
from .gc_steward import settle_gc
from .logtext import read_tail

if TYPE_CHECKING:
    from ..core.run.run import Run, TeardownReport

KEEP_LINES = 5_000  # per process, in memory; the full log stays on disk
OVER = ("stopped",)  # nothing left to watch
# the part of the state an event kind changes: a panel redraws only when a part it shows changed
PARTS = {"cell": "cells", "pair": "pairs", "check": "checks", "conn": "conns", "metrics": "metrics",
         "run": "run", "teardown": "run", "note": "run"}  # every other kind ("proc.*"): "procs"


class LiveRun:
    """One attached run. `version` changes with every state change, `line_seq[name]` counts every
    line a process ever logged while attached (so a reader can tell what it has not seen yet)."""

    OVER = OVER

    def __init__(self, run: Run, keep: int = KEEP_LINES, settle: bool = True) -> None:
        self.run = run
        self.keep = keep
        self.buffers: dict[str, deque[str]] = {name: deque(maxlen=keep) for name in run.processes}
        self.line_seq: dict[str, int] = {name: 0 for name in run.processes}
        self.version = 0
        self.metrics_version = 0  # metrics scrapes (not state changes: the clock shows them)
        self.lines_version = 0
        self.changes: dict[str, int] = {}  # part (see PARTS) -> how many events changed it
        self.watching = False
        self.teardown_running = False
        self.report: TeardownReport | None = None
        self.teardown_error = ""
        self.teardown_events: dict[str, tuple[str, str]] = {}  # process/port/allocation -> (value, detail)
        # where core resumes reading each log: lines before it are history, read from disk on demand
        self.start_offsets = {name: int(run.offsets.get(name, 0)) for name in run.processes}
        # A watcher process sends every line only of the processes a view shows (want_lines); of the others
        # core's last lines only. `ask` tells it (None: every line of every process reaches the listeners).
        self.ask: Callable[[set[str]], None] | None = None
        self.filtering = False  # a watcher that sends only what is asked was used: buffers hold only that
        self.wants: dict[object, set[str]] = {}  # who (a screen) -> the processes it shows every line of
        self.asked: set[str] = set()
        self.synced: set[str] = set()  # asked, and the watcher said from which offset their lines come
        self._history: dict[str, tuple[tuple[int, int], list[str]]] = {}  # tail()'s lines from disk
        self.base_seq: dict[str, int] = {}  # line_seq when that offset was set (buffers hold what came after)
        self.resyncs: dict[str, int] = {}  # how often it was set (a log view reloads when it changes)
        self._told = False  # the watcher was told what to send
        run.listeners.append(self._on_event)
        run.line_listeners.append(self._on_line)
        # what the console holds from the start (Textual, its screens, core: ~130,000 objects) leaves the cyclic
        # GC's full passes: under a log flood a full pass over all of it ran every few seconds, 140-220 ms each,
        # and a key behind one waited that long. One full pass per attach (it first collects what died since),
        # or (settle=False) a launch's, made before its processes started (at 128 local nodes, once they boot, the
        # pass took 190 ms of a key's wait: bench/busy_trace)
        if settle:
            settle_gc()

    # -- core's listeners: O(1), no I/O ----------------------------------------------------------
    def _on_event(self, e: Event) -> None:
        # A metrics scrape (every 2 s per endpoint) is not a state change the views must answer at
        # once: the run view's one-second clock redraw shows it. Counting it here redrew every panel
        # several times a second while a run merely served.
        if e.kind != "metrics":
            self.version += 1
        else:
            self.metrics_version += 1
        part = PARTS.get(e.kind, "procs")
        self.changes[part] = self.changes.get(part, 0) + 1
        if e.kind == "teardown" and self.teardown_running:
            self.teardown_events[e.name] = (e.value, e.detail)

    def _on_line(self, name: str, line: str) -> None:
        buf = self.buffers.get(name)
        if buf is None:
            buf = self.buffers[name] = deque(maxlen=self.keep)
            self.line_seq[name] = 0
        buf.append(line)
        self.line_seq[name] += 1
        self.lines_version += 1

    def _on_count(self, name: str, count: int) -> None:
        """Lines a process logged that no view showed (core's last lines of it changed)."""
        self.lines_version += 1

    def _on_from(self, name: str, offset: int) -> None:
        """The watcher's answer to `ask`: every line of `name` after byte `offset` of its log comes from now
        on; the lines before it are on disk (history reads up to it)."""
        if name not in self.asked:  # asked and dropped again meanwhile
            return
        buf = self.buffers.get(name)
        if buf is None:
            buf = self.buffers[name] = deque(maxlen=self.keep)
            self.line_seq[name] = 0
        buf.clear()
        self.base_seq[name] = self.line_seq[name]
        self.start_offsets[name] = offset
        self.synced.add(name)
        self.resyncs[name] = self.resyncs.get(name, 0) + 1
        self.lines_version += 1

    def use_watcher(self, ask: Callable[[set[str]], None] | None) -> None:
        """A watcher that sends lines only when asked (None: none any more, every line is on disk)."""
        self.ask = ask
        if ask is not None:  # (when it ends, what it had synced stays synced up to where it ended)
            self.filtering = True
            self.asked, self.synced, self._told = set(), set(), False
            self._ask()

    def want_lines(self, who: object, names: list[str]) -> None:
        """`who` (a screen) shows every line of `names` ([]: none any more)."""
        if names:
            self.wants[who] = set(names)
        else:
            self.wants.pop(who, None)
        if self.ask is not None:
            self._ask()

    def _ask(self) -> None:
        union: set[str] = set().union(*self.wants.values())
        if self.ask is None or (self._told and union == self.asked):
            return
        self._told = True
        self.synced &= union
        self.asked = union
        self.ask(union)

    def streams(self, name: str) -> bool:
        """Whether every line of `name` reaches this console (else only its last lines, in core's state)."""
        return not self.filtering or name in self.synced

    def begin_teardown(self) -> None:
        self.teardown_running = True
        self.teardown_events = {}
        self.report, self.teardown_error = None, ""
        self.version += 1
        self.changes["run"] = self.changes.get("run", 0) + 1

    def detach(self) -> None:
        for lst, fn in ((self.run.listeners, self._on_event), (self.run.line_listeners, self._on_line)):
            if fn in lst:
                lst.remove(fn)

    # -- what the screens read -------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.run.id

    @property
    def state(self) -> RunState:
        return self.run.state

    @property
    def over(self) -> bool:
        """Stopped and verified: nothing runs any more."""
        return self.state.status in OVER

    @property
    def running(self) -> list[str]:
        """Processes that may still be running (what quitting leaves behind)."""
        return [p.name for p in self.state.procs.values() if p.alive is not False]

    def nodes_of(self, names: list[str]) -> list[str]:
        return list(dict.fromkeys(self.state.procs[n].node for n in names if n in self.state.procs))

    def pid(self, name: str) -> int | None:
        h = self.run.handles.get(name)
        if h is not None and h.pid:
            return h.pid
        p = self.state.procs.get(name)
        return p.pid if p else None

    def log_path(self, name: str) -> Path | None:
        """The full log on this machine: the launcher's file (local, Slurm), the local mirror (ssh)."""
        h = self.run.handles.get(name)
        if h is None:
            return None
        if h.launcher == "ssh" or not h.log_path:
            return self.run.rd.path / "logs" / f"{name}.log"
        return Path(h.log_path)

    def history(self, name: str, n: int, to_end: bool = False) -> list[str]:
        """Up to n lines logged before the lines this console received (or, `to_end`, the last n lines of
        the file), read from the file on disk and redacted as the watcher redacts the lines it sends."""
        end = None if to_end else self.start_offsets.get(name, 0)
        path = self.log_path(name)
        if n <= 0 or (end is not None and end <= 0) or path is None:
            return []
        redact = getattr(self.run, "redact", None)
        lines = read_tail(path, n, end=end)
        return [redact(x) for x in lines] if redact is not None else lines

    def snapshot_lines(self, name: str) -> tuple[list[str], int]:
        """(every line the buffer holds, the count of lines received since history ends) at one instant."""
        return list(self.buffers.get(name, ())), self.line_seq.get(name, 0) - self.base_seq.get(name, 0)

    def lines_after(self, name: str, seen: int) -> tuple[list[str], int, int]:
        """(new lines, lines skipped because they already left the bounded buffer, new seq)."""
        seq = self.line_seq.get(name, 0)
        new = seq - seen
        if new <= 0:
            return [], 0, seq
        buf = self.buffers.get(name) or deque()
        take = min(new, len(buf))
        lines = list(islice(reversed(buf), take))[::-1] if take < len(buf) else list(buf)
        return lines, new - take, seq

    def tail(self, name: str, n: int) -> list[str]:
        """The last n lines of a process: what this console received, else core's last lines (read
        from disk when the run was reattached)."""
        buf = self.buffers.get(name)
        got = list(islice(reversed(buf), n))[::-1] if buf else []
        if self.filtering and name in self.synced and len(got) < n:
            # every line after the offset the watcher named came here; those before it are on disk
            got = self._before(name, n)[len(got) - n:] + got
        if got and self.streams(name):
            return got
        p = self.state.procs.get(name)
        return list(p.last_lines)[-n:] if p else []

    def _before(self, name: str, n: int) -> list[str]:
        """history(name, n), read once per offset the watcher named (a view asks at every redraw)."""
        key = (self.start_offsets.get(name, 0), n)
        hit = self._history.get(name)
        if hit is None or hit[0] != key:
            hit = self._history[name] = (key, self.history(name, n))
        return hit[1]

    def secrets(self) -> dict[str, str]:
        """The run's environment, for masking secret values in lines read from disk."""
        env: dict[str, str] = {}
        for p in self.run.processes.values():
            env.update(p.all_env())
        return env

