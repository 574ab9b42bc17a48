"""The local launcher (the demo cluster): processes on this machine, one loopback address per node.

Each process runs in its own process group under the supervisor, with its output appended to a log file
in the run directory, so it outlives the console. The processes of one launch are started by one starter
process (starter.py) and share its session: one scheduling group beside the console's, as engines on other
nodes would be, instead of one per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from ..config.errors import AtomdeckError
from ..config.text import listed
from ..design.commands import ProcessSpec
from ..remote.filetail import follow
from ..remote.listening import ListenTable, local_table
from ..remote.loglines import read_lines
from ..remote.node_probes import NodeProc, ProcessReads, connect_here
from .base import (
    ORPHAN_ENDED,
    SUPERVISOR,
    LauncherBase,
    ProcHandle,
    ProcStatus,
    StopReport,
    child_path,
    marker,
    orphan,
    outlive_cancel,
)
from .procfs import alive, carries_marker, marked_processes, parent_of, proc_stat, scan_trees, title


def read_exit(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def read_child(exit_path: str) -> int | None:
    """The engine's PID, as its supervisor recorded it next to the exit-code file (None: not recorded)."""
    return read_exit(child_path(exit_path)) if exit_path else None


def describe_exit(code: int | None) -> str:
    if code is None:
        return "ended without an exit code (killed with its supervisor)"
    if code > 128:
        try:
            return f"killed by {signal.Signals(code - 128).name} (exit {code})"
        except ValueError:
            return f"exited {code}"
    return f"exited {code}"


# connect_from: a port open for one node's probe is open for every node's during this long (they all are
# this machine). Asked each time, a 64P64D's 64 decodes made 32,768 connects to its 512 handshake ports while it
# came up, in the watcher (28-37 % of a core then, bench/README.md)
OPEN_FOR_S = 2.0
LISTEN_TABLE_S = 0.05  # the barrier reads this namespace's /proc/net/tcp* this often while a port is closed
INLINE_READ_BYTES = 256 * 1024  # a log's unread end smaller than this is read on the loop, not in a thread
TAIL_SAFETY_POLL_S = 2.0  # a local log is followed by file events; polled this often only in case one is lost
KILL_VERIFY_S = 10.0  # a SIGKILLed process still runs its exit (1 s was too short under load: bench/README.md)
STARTER = str(Path(__file__).with_name("starter.py"))
REAPED_WAIT_S = 1.0  # a process that ended without its exit-code file: the starter writes it before reaping
STARTER_EXIT_S = 5.0  # a starter whose processes are all gone exits at once; on a loaded machine it waits for a core


STOP_TICK_S = 0.05  # a teardown re-reads /proc this often until every group it stops is gone


async def stop_groups(items: list[tuple[ProcHandle, int]], grace: float,
                      is_ours_fn: Callable[[ProcHandle, list[int]], bool],
                      scan: Callable[[Collection[int]], dict[int, list[int]]] = scan_trees,
                      tick: Callable[[], Awaitable[object]] | None = None) -> list[StopReport]:
    """SIGTERM (+SIGCONT) each process group, wait up to `grace`, SIGKILL what is left, and verify every
    member is gone. A member is every process of the group and every descendant that left it (`scan`, read
    before any signal: a rank that called setsid is signalled by its PID, and followed by its PID once its
    parent is gone). One pass over /proc per tick (`scan`) serves every group still being stopped: a
    teardown of 129 processes reads /proc as often as one of a single process. `is_ours_fn(handle,
    members)` is asked before any signal (a reused PID's group is left alone)."""
    tick = tick or (lambda: asyncio.sleep(STOP_TICK_S))
    reports: dict[int, StopReport] = {}
    pending: dict[int, tuple[ProcHandle, int]] = {}
    outside: dict[int, list[int]] = {}  # item -> its processes outside its group, signalled by PID
    size: dict[int, int] = {}
    names: dict[int, str] = {}
    t0 = time.monotonic()
    table = scan({pg for _, pg in items})
    for i, (h, pgid) in enumerate(items):
        members = table.get(pgid)
        if not members:
            reports[i] = StopReport(h.name, h.node, True, "already gone")
        elif not is_ours_fn(h, members):  # the PID was reused (e.g. after a reboot): theirs is left alone
            reports[i] = StopReport(h.name, h.node, True,
                                    f"gone (process group {pgid} now holds someone else's processes; left alone)")
        else:
            outside[i] = [p for p in members if (st := proc_stat(p)) is not None and st[1] != pgid]
            names.update({p: title(p) for p in outside[i]})  # before the signals: named as they were
            size[i] = len(members)
            try:  # SIGCONT too: a stopped process (state T: SIGSTOP, a debugger) ignores SIGTERM until continued
                os.killpg(pgid, signal.SIGTERM)
                os.killpg(pgid, signal.SIGCONT)
            except ProcessLookupError:
                if not outside[i]:
                    reports[i] = StopReport(h.name, h.node, True, "already gone")
                    continue
            _signal_each(outside[i], signal.SIGTERM, signal.SIGCONT)
            pending[i] = (h, pgid)
    killed: dict[int, float] = {}  # item -> when it was sent SIGKILL
    while pending:
        await tick()
        table = scan({pg for _, pg in pending.values()})
        now = time.monotonic()
        for i, (h, pgid) in list(pending.items()):
            left = sorted({*table.get(pgid, ()), *(p for p in outside[i] if alive(p))})
            if not left:
                what = (f"SIGKILL after {grace:g}s grace, gone" if i in killed
                        else f"SIGTERM, gone in {now - t0:.1f}s")
                reports[i] = StopReport(h.name, h.node, True, what + _tree_note(size[i], outside[i], names))
            elif i in killed:
                if now - killed[i] < KILL_VERIFY_S:
                    continue
                reports[i] = StopReport(h.name, h.node, False, f"still running after SIGKILL: pids {left}")
            else:
                if now - t0 >= grace:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pgid, signal.SIGKILL)
                    _signal_each(outside[i], signal.SIGKILL)
                    killed[i] = now
                continue
            del pending[i]
    return [reports[i] for i in range(len(items))]


def _signal_each(pids: list[int], *sigs: int) -> None:
    for pid in pids:
        for sig in sigs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


def _tree_note(size: int, outside: list[int], names: dict[int, str]) -> str:
    """Said when some of the processes had left the process group: how many the stop ended, naming those."""
    if not outside:
        return ""
    odd = ", ".join(f"{p} {names.get(p) or '?'}" for p in outside)
    return f" ({size} processes, {len(outside)} outside its process group: {odd})"


async def wait_exit(pid: int, child: subprocess.Popen | None = None) -> int | None:
    """Return as soon as a process ends (pidfd: no polling, zombies count as ended).

    For our own child the exit status is reaped and returned (shell-style 128+N for signals)."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        fd = None
    if fd is not None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.add_reader(fd, lambda: None if done.done() else done.set_result(None))
        try:
            if alive(pid):
                await done
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    else:
        while alive(pid):
            await asyncio.sleep(0.1)
    if child is not None:
        try:
            return _rc(child.wait(timeout=2))
        except subprocess.TimeoutExpired:
            return None
    return None


class LocalLauncher(LauncherBase):
    kind = "local"

    def __init__(self, run_id: str, run_dir: str):
        super().__init__(run_id, run_dir)
        self._starters: dict[int, subprocess.Popen] = {}  # pid -> a start_many's starter (reaped after a stop)
        self._table: ListenTable | None = None
        self._opened: dict[tuple[str, int], float] = {}  # (host, port) -> when a connect_from last got in
        self._stop_batches: dict[float, tuple[list[ProcHandle], asyncio.Future]] = {}
        self._flushes: set[asyncio.Task] = set()
        self.scan = scan_trees  # how stop reads the process groups and their trees (a test counts the reads)
        self.tick: Callable[[], Awaitable[object]] | None = None  # stop_groups' pause between reads
        self._orphans_told: set[str] = set()  # processes whose wait() said their engine outlived its supervisor
        self._proc_reads = ProcessReads()

    async def start(self, spec: ProcessSpec, attempt: str = "") -> ProcHandle:
        (h,) = await self.start_many([spec])
        if isinstance(h, BaseException):
            raise h
        return h

    async def start_many(self, specs: list[ProcessSpec]) -> list[ProcHandle | BaseException]:
        """Start every process through one starter (starter.py), in a thread: this process forks once, and
        the started processes share the starter's session. Each start is heard as the starter reports it
        (`_heard_started`), also when the task is cancelled meanwhile (the starter goes on: the launcher must
        know them to stop them); the cancellation is raised once every start was heard."""
        total = len(specs)
        self._count_started(total)
        if not specs:
            return []
        logs = Path(self.run_dir) / "logs"
        logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        procs: list[dict[str, Any]] = []
        for spec in specs:
            exit_path = logs / f"{spec.name}.exit"
            exit_path.unlink(missing_ok=True)
            Path(child_path(str(exit_path))).unlink(missing_ok=True)
            procs.append({"name": spec.name, "log": str(logs / f"{spec.name}.log"), "exit": str(exit_path),
                          "child": child_path(str(exit_path)),
                          "env": {"ATOMDECK_RUN": f"{self.run_id}:{spec.name}"},
                          "argv": ["/bin/sh", "-c", SUPERVISOR, marker(self.run_id, spec.name), str(exit_path),
                                   *spec.launch_argv]})
        loop = asyncio.get_running_loop()
        by_name = {spec.name: (spec, p) for spec, p in zip(specs, procs)}
        made: dict[str, ProcHandle] = {}

        def said(item: list) -> None:  # (from the starter's thread) each start, and the count the launch shows
            kind, h = item[0], None
            if kind == "started" and item[1] in by_name:
                spec, p = by_name[item[1]]
                h = made[spec.name] = ProcHandle(spec.name, spec.node, spec.host, self.kind, pid=item[2],
                                                 log_path=p["log"], exit_path=p["exit"])
            loop.call_soon_threadsafe(self._heard, total, kind, h)

        work = loop.run_in_executor(None, self._run_starter, {"cwd": self.run_dir, "procs": procs}, said)
        (said_by, trouble), cancelled = await outlive_cancel(work)  # the starter goes on if we are cancelled
        out: list[ProcHandle | BaseException] = []  # (every start told was heard: told before `work` ended)
        for spec in specs:
            item = said_by.get(spec.name)
            if item is None:
                out.append(RuntimeError(f"the local starter ended before starting it{trouble}"))
            elif item[0] == "failed":
                out.append(OSError(item[2], item[3]))
            else:
                out.append(made[spec.name])
        if cancelled:
            raise asyncio.CancelledError
        return out

    def _heard(self, total: int, kind: str, h: ProcHandle | None) -> None:
        if h is not None:
            self._heard_started(h)
        self._count_started(total, int(kind == "started"), int(kind == "failed"))

    def _run_starter(self, req: dict, said: Callable[[list], None]) -> tuple[dict[str, list], str]:
        """(In a thread) start the starter in a session of its own, give it the processes, and read how each
        start went until it closes its output: {name: its line}, and what it wrote on stderr (if anything)."""
        starter = subprocess.Popen([sys.executable, "-I", STARTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True, close_fds=True, cwd=self.run_dir)
        self._starters[starter.pid] = starter
        out: dict[str, list] = {}
        stdin, stdout, stderr = starter.stdin, starter.stdout, starter.stderr
        assert stdin is not None and stdout is not None and stderr is not None
        with stdin, stdout, stderr:
            try:
                stdin.write(json.dumps(req).encode())
            except BrokenPipeError:
                pass
            stdin.close()
            for line in stdout:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                out[item[1]] = item
                said(item)
            err = stderr.read().decode(errors="replace").strip().splitlines()
        # it lives on to reap its processes and exits with the last: reaped then by a thread blocked in its
        # waitpid, so that it never lingers as this console's zombie when they end on their own
        threading.Thread(target=starter.wait, name=f"atomdeck-reap-{starter.pid}", daemon=True).start()
        return out, f": {err[-1]}" if err else ""

    async def poll(self, handle: ProcHandle) -> ProcStatus:
        if handle.pid and alive(handle.pid):
            return ProcStatus(True)
        engine = read_child(handle.exit_path)
        if engine and self._engine_lives(handle, engine):  # its supervisor was killed; the engine lives on
            return orphan(engine)
        code = read_exit(handle.exit_path)
        if code is None and handle.pid:
            code = await self._exit_once_reaped(handle)
        if code is None and engine:
            return ProcStatus(False, None, ORPHAN_ENDED.format(pid=engine))
        return ProcStatus(False, code, describe_exit(code))

    def _engine_lives(self, handle: ProcHandle, pid: int) -> bool:
        """The engine's PID is alive and still ours (the run's marker in its environment: PIDs get reused)."""
        return alive(pid) and carries_marker([pid], self.run_id, handle.name)

    async def _exit_once_reaped(self, handle: ProcHandle) -> int | None:
        """A supervisor killed by a signal wrote no exit-code file; its starter writes one, then reaps it.
        While it is a zombie whose parent is not PID 1 (the starter lives), wait up to REAPED_WAIT_S for that."""
        until = time.monotonic() + REAPED_WAIT_S
        while time.monotonic() < until:
            st, parent = proc_stat(handle.pid or 0), parent_of(handle.pid or 0)
            if st is None or st[0] not in ("Z", "X") or parent in (None, 1):
                break
            await asyncio.sleep(0.01)
        return read_exit(handle.exit_path)

    async def wait(self, handle: ProcHandle) -> ProcStatus:
        """When the supervisor ends; an engine that outlives it is told (an orphaned status) and waited for
        on the next call."""
        if handle.pid and alive(handle.pid):
            await wait_exit(handle.pid)
        st = await self.poll(handle)
        if st.orphaned and st.engine_pid and handle.name in self._orphans_told:
            await wait_exit(st.engine_pid)
            st = await self.poll(handle)
        if st.orphaned:
            self._orphans_told.add(handle.name)
        return st

    def tail(self, handle: ProcHandle, offset: int) -> AsyncIterator[tuple[int, str]]:
        # written on this machine: inotify sees every write, so the idle poll is only a safety net
        return follow(handle.log_path, offset, max_interval=TAIL_SAFETY_POLL_S)

    async def read_log(self, handle: ProcHandle, offset: int = 0, *,
                       partial: bool = False) -> AsyncIterator[tuple[int, str]]:
        """As LauncherBase's, but a small unread end (what a process wrote just before it died) is read
        here at once: a thread hop is another turn of a busy event loop before the death is reported."""
        try:
            small = os.path.getsize(handle.log_path) - offset <= INLINE_READ_BYTES
        except OSError:
            small = True
        if not small:
            async for item in super().read_log(handle, offset, partial=partial):
                yield item
            return
        for item in read_lines(handle.log_path, offset, partial=partial):
            yield item

    async def connect_from(self, node: str, targets: list[tuple[str, int]], timeout: float = 1.0) -> dict:
        """The nodes are addresses of this machine: connected from here, in this process (node_probes.py).
        Every node sees the same: a port that let a connect in during the last OPEN_FOR_S is open for each
        node that asks (a 64P64D's 64 decodes ask about the same 512 handshake ports within seconds); one
        that did not is tried again each time."""
        now = time.monotonic()
        known = {t: "open" for t in targets if now - self._opened.get(t, -OPEN_FOR_S) < OPEN_FOR_S}
        got = await connect_here([t for t in targets if t not in known], timeout)
        now = time.monotonic()
        self._opened.update((t, now) for t, r in got.items() if r == "open")
        return {**known, **got}

    async def node_processes(self, node: str, marker: str, timeout: float = 10.0) -> list[NodeProc]:
        """The nodes are this machine: /proc is read in this process, one read for the calls made together."""
        return await self._proc_reads.ask(marker, timeout)

    def listen_table(self, node: str) -> ListenTable:
        """The listening sockets of every node: they are loopback addresses of this network namespace,
        so one table (read at most every LISTEN_TABLE_S) serves them all."""
        if self._table is None:
            self._table = local_table(LISTEN_TABLE_S)
        return self._table

    async def stop(self, handles: list[ProcHandle], grace: float) -> list[StopReport]:
        """Stop calls made together (a teardown makes one per process, all at once) are stopped together by
        one stop_groups, so one /proc read per tick serves them all: joined on the loop's next turn, no wait."""
        batch = self._stop_batches.get(grace)
        if batch is None:
            batch = self._stop_batches[grace] = ([], asyncio.get_running_loop().create_future())
            task = asyncio.create_task(self._flush_stop(grace))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        batch[0].extend(handles)
        reports = await asyncio.shield(batch[1])
        return [reports[id(h)] for h in handles]

    async def _flush_stop(self, grace: float) -> None:
        await asyncio.sleep(0)  # the stop calls started in the same turn of the loop join this one
        handles, fut = self._stop_batches.pop(grace)
        try:
            fut.set_result(await self._stop_now(handles, grace))
        except BaseException as e:
            fut.set_exception(e if isinstance(e, Exception) else RuntimeError("stopping: cancelled"))
            if not isinstance(e, Exception):
                raise

    async def _stop_now(self, handles: list[ProcHandle], grace: float) -> dict[int, StopReport]:
        started = [h for h in handles if h.pid]
        out = {id(h): StopReport(h.name, h.node, True, "never started") for h in handles if not h.pid}
        reports = await stop_groups([(h, h.pid or 0) for h in started], grace,
                                    lambda h, members: carries_marker(members, self.run_id, h.name),
                                    scan=self.scan, tick=self.tick)
        out.update({id(h): r for h, r in zip(started, reports)})
        await self._reap_starters()
        return out

    async def release(self, nodes: list[str] | None = None) -> list[str]:
        """Sweep this machine (every node of a local cluster is this machine) for processes of the run that no
        handle found: a launch cut short before it wrote its handles (a second Ctrl-C, a console killed while the
        processes started) leaves them running, and only their environment's marker tells they are ours. Each is
        SIGKILLed, as the ssh and Slurm sweeps do, and verified gone."""
        left = await asyncio.to_thread(marked_processes, self.run_id)
        if not left:
            return []
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_VERIFY_S
        while any(alive(pid) for pid in left) and time.monotonic() < deadline:
            await asyncio.sleep(STOP_TICK_S)
        await self._reap_starters()
        named = sorted(set(left.values()))
        names = listed(named, 6)
        still = sorted(pid for pid in left if alive(pid))
        if still:
            raise AtomdeckError(f"this machine: {len(still)} process(es) of the run outlived SIGKILL "
                                f"(PIDs {', '.join(map(str, still))}): look at them with `ps -o pid,stat,cmd -p "
                                f"{','.join(map(str, still))}`")
        return [f"this machine: swept {len(left)} leftover process(es) of the run ({names}): no handle knew them"]

    async def _reap_starters(self) -> None:
        """A starter whose processes have all ended exits at once: wait for it (its reaping thread reaps it),
        so that a teardown leaves none behind (it is our child; the processes are its children)."""
        for pid, starter in list(self._starters.items()):
            if starter.poll() is None and not any(alive(h.pid) for h in self._started.values()
                                                  if h.pid and parent_of(h.pid) == pid):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STARTER_EXIT_S):
                        await wait_exit(pid, starter)
            if starter.poll() is not None:
                del self._starters[pid]


def _rc(returncode: int) -> int:
    """asyncio's negative signal numbers -> the shell's 128+N."""
    return 128 - returncode if returncode < 0 else returncode
