"""The local launcher (the demo cluster): processes on this machine, one loopback address per node.

Each process runs in its own session (its own process group) under the supervisor, with its
output appended to a log file in the run directory, so it outlives the console.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path

from ..design.commands import ProcessSpec
from ..remote.filetail import follow
from ..remote.listening import ListenTable, local_table
from ..remote.loglines import read_lines
from .base import SUPERVISOR, LauncherBase, ProcHandle, ProcStatus, StopReport, marker, spawn


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of a PID, or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return rest[0], int(rest[2])


def alive(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may linger as a zombie until PID 1 reaps it)."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def scan_groups(pgids: Collection[int]) -> dict[int, list[int]]:
    """The live (non-zombie) processes of each of these process groups, from one pass over /proc."""
    out: dict[int, list[int]] = {pg: [] for pg in pgids}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = proc_stat(int(entry.name))
            if st and st[1] in out and st[0] not in ("Z", "X"):
                out[st[1]].append(int(entry.name))
    return out


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group."""
    return scan_groups((pgid,))[pgid]


def env_marker(run_id: str, name: str) -> str:
    return f"ATOMDECK_RUN={run_id}:{name}"


def is_ours(pgid: int, run_id: str, name: str) -> bool:
    """Some live member of the group carries our marker in its environment (PIDs get reused, so this is
    checked before any signal is sent)."""
    return carries_marker(group_members(pgid), run_id, name)


def carries_marker(pids: list[int], run_id: str, name: str) -> bool:
    """One of these processes (a group's members, already read) carries our marker in its environment."""
    want = env_marker(run_id, name).encode()
    for pid in pids:
        try:
            if want in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False


def read_exit(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def describe_exit(code: int | None) -> str:
    if code is None:
        return "ended without an exit code (killed with its supervisor)"
    if code > 128:
        try:
            return f"killed by {signal.Signals(code - 128).name} (exit {code})"
        except ValueError:
            return f"exited {code}"
    return f"exited {code}"


LISTEN_TABLE_S = 0.05  # the barrier reads this namespace's /proc/net/tcp* this often while a port is closed
INLINE_READ_BYTES = 256 * 1024  # a log's unread end smaller than this is read on the loop, not in a thread
TAIL_SAFETY_POLL_S = 2.0  # a local log is followed by file events; polled this often only in case one is lost
KILL_VERIFY_S = 1.0  # after SIGKILL a process is gone at once, stopped or not: verify within this


STOP_TICK_S = 0.05  # a teardown re-reads /proc this often until every group it stops is gone


async def stop_groups(items: list[tuple[ProcHandle, int]], grace: float,
                      is_ours_fn: Callable[[ProcHandle, list[int]], bool],
                      scan: Callable[[Collection[int]], dict[int, list[int]]] = scan_groups,
                      tick: Callable[[], Awaitable[object]] | None = None) -> list[StopReport]:
    """SIGTERM (+SIGCONT) each process group, wait up to `grace`, SIGKILL what is left, and verify every
    member is gone. One pass over /proc per tick (`scan`) serves every group still being stopped: a
    teardown of 129 processes reads /proc as often as one of a single process. `is_ours_fn(handle,
    members)` is asked before any signal (a reused PID's group is left alone)."""
    tick = tick or (lambda: asyncio.sleep(STOP_TICK_S))
    reports: dict[int, StopReport] = {}
    pending: dict[int, tuple[ProcHandle, int]] = {}
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
            try:  # SIGCONT too: a stopped process (state T: SIGSTOP, a debugger) ignores SIGTERM until continued
                os.killpg(pgid, signal.SIGTERM)
                os.killpg(pgid, signal.SIGCONT)
            except ProcessLookupError:
                reports[i] = StopReport(h.name, h.node, True, "already gone")
                continue
            pending[i] = (h, pgid)
    killed: dict[int, float] = {}  # item -> when it was sent SIGKILL
    while pending:
        await tick()
        table = scan({pg for _, pg in pending.values()})
        now = time.monotonic()
        for i, (h, pgid) in list(pending.items()):
            left = table.get(pgid)
            if not left:
                reports[i] = StopReport(h.name, h.node, True, f"SIGKILL after {grace:g}s grace, gone" if i in killed
                                        else f"SIGTERM, gone in {now - t0:.1f}s")
            elif i in killed:
                if now - killed[i] < KILL_VERIFY_S:
                    continue
                reports[i] = StopReport(h.name, h.node, False, f"still running after SIGKILL: pids {left}")
            else:
                if now - t0 >= grace:
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    killed[i] = now
                continue
            del pending[i]
    return [reports[i] for i in range(len(items))]


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
        # Popen, not asyncio's subprocess: closing an asyncio transport kills a running child, and these
        # processes must outlive the console.
        self._children: dict[str, subprocess.Popen] = {}
        self._table: ListenTable | None = None
        self._stop_batches: dict[float, tuple[list[ProcHandle], asyncio.Future]] = {}
        self._flushes: set[asyncio.Task] = set()
        self.scan = scan_groups  # how stop reads the process groups (a test counts the reads)
        self.tick: Callable[[], Awaitable[object]] | None = None  # stop_groups' pause between reads

    async def start(self, spec: ProcessSpec) -> ProcHandle:
        logs = Path(self.run_dir) / "logs"
        logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        log = logs / f"{spec.name}.log"
        exit_path = logs / f"{spec.name}.exit"
        exit_path.unlink(missing_ok=True)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = await spawn(
                ["/bin/sh", "-c", SUPERVISOR, marker(self.run_id, spec.name), str(exit_path), *spec.launch_argv],
                lambda child: self._children.update({spec.name: child}),
                stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True, close_fds=True,
                cwd=self.run_dir, env={**os.environ, "ATOMDECK_RUN": f"{self.run_id}:{spec.name}"})
        finally:
            os.close(fd)
        return ProcHandle(spec.name, spec.node, spec.host, self.kind, pid=proc.pid, log_path=str(log),
                          exit_path=str(exit_path))

    async def poll(self, handle: ProcHandle) -> ProcStatus:
        child = self._children.get(handle.name)
        if child is not None and child.poll() is not None:
            code = read_exit(handle.exit_path)
            code = code if code is not None else _rc(child.returncode)
            return ProcStatus(False, code, describe_exit(code))
        if handle.pid and alive(handle.pid):
            return ProcStatus(True)
        code = read_exit(handle.exit_path)
        return ProcStatus(False, code, describe_exit(code))

    async def wait(self, handle: ProcHandle) -> ProcStatus:
        if handle.pid:
            await wait_exit(handle.pid, self._children.get(handle.name))
        return await self.poll(handle)

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
        for h in handles:  # reap our children so they do not linger as zombies
            child = self._children.get(h.name)
            if child is not None:
                child.poll()
        return out


def _rc(returncode: int) -> int:
    """asyncio's negative signal numbers -> the shell's 128+N."""
    return 128 - returncode if returncode < 0 else returncode
