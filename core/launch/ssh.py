"""The ssh launcher: each process started detached on its node (its own session, a pidfile and a log
in a per-run directory on the node), watched and stopped over pooled SSH connections.

The processes survive the console and the connection; teardown kills the recorded process groups
(after checking they still carry this run's marker) and verifies they are gone.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from ..config.cluster import Cluster
from ..config.errors import AtomdeckError
from ..design.commands import ProcessSpec
from ..remote.backoff import Backoff
from ..remote.listening import ListenTable, shell_table
from ..remote.node_shell import NodeShell, RemoteShell
from ..remote.shell import LocalRunner, Runner
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
    remote_read_log,
    script,
)
from .local import describe_exit

# a node's wait channel that broke is reopened after 0.25 s, ×2, at most 5 s apart; reset once it works
NODE_WAIT_RETRY = Backoff(first_s=0.25, factor=2.0, max_s=5.0, give_up_s=None)
LISTEN_TABLE_S = 0.5  # the barrier reads a node's listening sockets this often (its shell) while a port is closed:
# one exchange on the persistent shell per node and read; 128 nodes at 0.25 s would keep a console core busy

# the ssh launcher's remote scripts (core/launch/scripts/*.sh; each says its arguments)
WAIT_SCRIPT = script("wait")  # one channel per node reports every process's end
STOP_SCRIPT = script("stop")  # TERM a process group, wait, KILL, verify
SWEEP_SCRIPT = script("sweep")  # kill what is left of the run on a node
POLL_SCRIPT = script("poll")  # alive, or how it ended
ALREADY_SCRIPT = script("already")  # a start run twice reports the first one's PID


def detached_command(run_id: str, name: str, remote_dir: str, log: str, exit_path: str, pid_path: str,
                     inner: list[str], attempt: str = "") -> str:
    """The shell line that starts a process detached on a node (own session, log, pidfile) and prints its
    PID. Every piece of the command is quoted with shlex: no value can change what runs.

    It runs at most once: a start token (a directory next to the pidfile, made atomically) is taken first;
    run again (a retry after the SSH connection dropped mid-start), it prints the PID of the process the
    first run started instead of starting a second copy."""
    q = shlex.quote
    detached = shlex.join(["env", f"ATOMDECK_RUN={run_id}:{name}", "setsid", "/bin/sh", "-c", SUPERVISOR,
                           marker(run_id, name), exit_path, *inner])
    token = f"{pid_path}.started" + (f".{attempt}" if attempt else "")  # a restart's start is a start of its own
    already = shlex.join(["sh", "-c", ALREADY_SCRIPT, "already", f"{run_id}:{name}", pid_path])
    return (f"umask 077; if mkdir {q(token)} 2>/dev/null; then rm -f {q(exit_path)} {q(child_path(exit_path))}; "
            f"cd {q(remote_dir)} && {{ {detached} >>{q(log)} 2>&1 </dev/null & }} && "
            f"echo $! > {q(pid_path)}; echo $!; else {already}; fi")


class SshLauncher(LauncherBase):
    kind = "ssh"

    def __init__(self, run_id: str, run_dir: str, cluster: Cluster, meta: dict):
        super().__init__(run_id, run_dir)
        self.cluster = cluster
        self.remote_dir = meta.get("remote_dir") or f"{cluster.remote_dir.rstrip('/')}/{run_id}"
        self._runners: dict[str, Runner] = {}
        self._shells: dict[str, NodeShell] = {}
        self._conn_listeners: list[Callable[[str, str, str], None]] = []
        self._waiting: dict[str, dict[int | None, tuple[ProcHandle, asyncio.Future]]] = {}
        self._watchers: dict[str, asyncio.Task] = {}
        self._restart: dict[str, asyncio.Event] = {}
        self._unsub: list[Callable[[], None]] = []
        self._tables: dict[str, ListenTable] = {}
        self._orphans: dict[str, int] = {}  # process -> its engine's PID, once wait() said its supervisor is gone

    def runner(self, node: str) -> Runner:
        if node not in self._runners:
            from ..remote.ssh.runner import ssh_runner_for_node

            r = ssh_runner_for_node(self.cluster, node)
            self._runners[node] = r
            watch = getattr(r, "watch", None)
            if watch is not None:
                self._unsub.append(watch(lambda st, n=node: self._on_conn(n, st)))
        return self._runners[node]

    def shell(self, node: str) -> NodeShell:
        """The node's persistent shell, for short commands (no login shell per command)."""
        if node not in self._shells:
            self._shells[node] = RemoteShell(self.runner(node))
        return self._shells[node]

    def listen_table(self, node: str) -> ListenTable:
        """The node's listening sockets (/proc/net/tcp*), read through its persistent shell."""
        if node not in self._tables:
            self._tables[node] = shell_table(self.shell(node).run, LISTEN_TABLE_S, node)
        return self._tables[node]

    def _on_conn(self, node: str, st) -> None:
        for fn in list(self._conn_listeners):
            fn(node, st.state, st.reason)

    def on_connection_state(self, fn: Callable[[str, str, str], None]) -> None:
        """fn(node, state, reason) on every SSH connection state change (up, lost, reconnecting, ...)."""
        self._conn_listeners.append(fn)

    # ---------------------------------------------------------------------------------------- prepare
    async def prepare(self, plan, processes: list[ProcessSpec]) -> dict:
        from ..remote.engine_flags import check_engine_flags
        from ..remote.preflight import run_checks

        nodes = list(plan.selection.all())
        reached = 0

        async def mk(node: str) -> None:
            nonlocal reached
            await self.shell(node).run(["mkdir", "-p", "-m", "700", f"{self.remote_dir}/logs"], timeout=30,
                                       check=True)
            reached += 1
            self._say(f"connected to {reached} of {len(nodes)} nodes over SSH")

        self._say(f"connecting to {len(nodes)} nodes over SSH")
        await asyncio.gather(*(mk(n) for n in nodes))  # also: the first connection to every node, in parallel
        self._say(f"pre-flight checks on {len(nodes)} nodes")
        facts = await run_checks(plan, processes, lambda node, argv: self.shell(node).run(argv, timeout=60),
                                 self.run_id, progress=self._say,
                                 run_image=lambda node, argv, t: self.shell(node).run(argv, timeout=t))
        self._say(f"checking the engines' flags on {len(nodes)} nodes")
        await check_engine_flags(plan, processes, lambda node, argv: self.shell(node).run(argv, timeout=120))
        return {"remote_dir": self.remote_dir, **facts}

    # ---------------------------------------------------------------------------------------- processes
    async def start(self, spec: ProcessSpec, attempt: str = "") -> ProcHandle:
        logs = f"{self.remote_dir}/logs"
        log, exit_path, pid_path = f"{logs}/{spec.name}.log", f"{logs}/{spec.name}.exit", f"{logs}/{spec.name}.pid"
        line = detached_command(self.run_id, spec.name, self.remote_dir, log, exit_path, pid_path, spec.inner,
                                attempt)
        res = await self.shell(spec.node).run(["sh", "-c", line], timeout=30, check=True)
        pid = int(res.stdout.strip().split()[-1])
        return ProcHandle(spec.name, spec.node, spec.host, self.kind, pid=pid, log_path=log, exit_path=exit_path,
                          extra={"pid_path": pid_path, "remote_dir": self.remote_dir})

    async def start_many(self, specs: list[ProcessSpec]) -> list[ProcHandle | BaseException]:
        """One SSH command per node starts all of that node's processes; the nodes go in parallel (a login
        shell on the node can cost 100 ms, so fewer commands is what makes a big launch fast)."""
        by_node: dict[str, list[ProcessSpec]] = {}
        for s in specs:
            by_node.setdefault(s.node, []).append(s)
        results: dict[str, ProcHandle | BaseException] = {}
        self._count_started(len(specs))

        async def node(name: str, group: list[ProcessSpec]) -> None:
            logs = f"{self.remote_dir}/logs"
            lines = [detached_command(self.run_id, s.name, self.remote_dir, f"{logs}/{s.name}.log",
                                      f"{logs}/{s.name}.exit", f"{logs}/{s.name}.pid", s.inner) for s in group]
            try:
                res = await self.shell(name).run(["sh", "-c", "\n".join(f"({ln})" for ln in lines)], timeout=60,
                                                 check=True)
                pids = [int(x) for x in res.stdout.split()]
                if len(pids) != len(group):
                    raise AtomdeckError(f"starting on {name}: expected {len(group)} PIDs, got {res.stdout!r}")
            except BaseException as e:
                for s in group:
                    results[s.name] = e
                self._count_started(len(specs), failed=len(group))
                return
            for s, pid in zip(group, pids):
                results[s.name] = h = ProcHandle(s.name, s.node, s.host, self.kind, pid=pid,
                                                 log_path=f"{logs}/{s.name}.log", exit_path=f"{logs}/{s.name}.exit",
                                                 extra={"pid_path": f"{logs}/{s.name}.pid",
                                                        "remote_dir": self.remote_dir})
                self._heard_started(h)
            self._count_started(len(specs), started=len(group))

        await asyncio.gather(*(node(n, g) for n, g in by_node.items()))
        return [results[s.name] for s in specs]

    async def poll(self, handle: ProcHandle) -> ProcStatus:
        res = await self.shell(handle.node).run(["sh", "-c", POLL_SCRIPT, "poll", str(handle.pid), handle.exit_path,
                                                 f"{self.run_id}:{handle.name}"], timeout=30)
        out = res.stdout.strip()
        if not res.ok:
            raise AtomdeckError(f"cannot check {handle.name} on {handle.node}: {res.explain()}")
        if out == "alive":
            return ProcStatus(True)
        if out.startswith("orphan ") and out.split()[1].isdigit():
            return orphan(int(out.split()[1]))
        head, _, engine = out.partition(" engine=")
        code = _code(head)
        if code is None and engine.strip().isdigit():
            return ProcStatus(False, None, ORPHAN_ENDED.format(pid=engine.strip()))
        return ProcStatus(False, code, describe_exit(code))

    async def wait(self, handle: ProcHandle) -> ProcStatus:
        """Return when the process ends. One remote watcher per node serves every waiting process there
        (a dropped connection is retried with back-off, and the watcher resumes with what is left)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(handle.node, {})[handle.pid] = (handle, fut)
        watcher = self._watchers.get(handle.node)
        if watcher is None or watcher.done():
            self._watchers[handle.node] = asyncio.create_task(self._watch_node(handle.node))
        elif handle.node in self._restart:
            self._restart[handle.node].set()  # a new process joins: restart the remote loop with it
        try:
            return await asyncio.shield(fut)
        finally:
            waiting = self._waiting.get(handle.node, {})
            if (entry := waiting.get(handle.pid)) is not None and entry[1] is fut:
                waiting.pop(handle.pid, None)

    async def _watch_node(self, node: str) -> None:
        delays = NODE_WAIT_RETRY.delays()
        while self._waiting.get(node):
            pending = {pid: item for pid, item in self._waiting[node].items() if not item[1].done()}
            if not pending:
                return
            args = [f"{self.remote_dir}/logs", self.run_id,
                    *(f"{pid}:{h.name}" + (":o" if h.name in self._orphans else "") for pid, (h, _) in pending.items())]
            restart = self._restart[node] = asyncio.Event()
            job = asyncio.ensure_future(self._stream_node(node, args, pending))
            stop = asyncio.ensure_future(restart.wait())
            try:
                done, _ = await asyncio.wait({job, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:  # (cancelled with the launcher's close: the stream ends here too, its error retrieved)
                for t in (job, stop):
                    if not t.done():
                        t.cancel()
                await asyncio.gather(job, stop, return_exceptions=True)
            if job in done and job.exception() is not None:
                await asyncio.sleep(next(delays))
            else:
                delays = NODE_WAIT_RETRY.delays()

    async def _stream_node(self, node: str, args: list[str], pending: dict) -> None:
        async for line in self.runner(node).stream(["sh", "-c", WAIT_SCRIPT, "wait", *args]):
            parts = line.split()
            if len(parts) == 3 and parts[0] == "orphan" and parts[1].isdigit() and parts[2].isdigit():
                item = pending.get(int(parts[1]))
                if item and not item[1].done():  # its supervisor is gone, the engine lives: said once
                    self._orphans[item[0].name] = int(parts[2])
                    item[1].set_result(orphan(int(parts[2])))
            elif len(parts) >= 2 and parts[0] == "ended" and parts[1].isdigit():
                item = pending.get(int(parts[1]))
                if item and not item[1].done():
                    code = _code("=" + (parts[2] if len(parts) > 2 else ""))
                    engine = self._orphans.get(item[0].name)
                    item[1].set_result(ProcStatus(False, code, describe_exit(code)) if code is not None or not engine
                                       else ProcStatus(False, None, ORPHAN_ENDED.format(pid=engine)))

    def tail(self, handle: ProcHandle, offset: int) -> AsyncIterator[tuple[int, str]]:
        return self._mirrored_tail(handle, offset)

    def read_log(self, handle: ProcHandle, offset: int = 0, *,
                 partial: bool = False) -> AsyncIterator[tuple[int, str]]:
        if partial:  # an unfinished line is shown, never mirrored: the mirror holds whole lines only
            return remote_read_log(self.runner(handle.node), handle.log_path, offset, True)
        return self._mirrored_tail(handle, offset, follow=False)

    async def _mirrored_tail(self, handle: ProcHandle, offset: int,
                             follow: bool = True) -> AsyncIterator[tuple[int, str]]:
        """The node's log from a byte offset, resuming after drops. Lines past what the local mirror in the
        run directory already holds are appended to it, so history can be shown without asking the node."""
        from ..remote.ssh.tail import tail as remote_tail

        mirror = Path(self.run_dir) / "logs" / f"{handle.name}.log"
        mark = mirror.with_suffix(".mirrored")  # the node-side byte offset the mirror ends at
        mirror.parent.mkdir(parents=True, exist_ok=True)
        try:
            mirrored = int(mark.read_text().strip() or 0)
        except (OSError, ValueError):
            mirrored = 0
        fd = os.open(mirror, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(fd, "a", encoding="utf-8") as f:
            lines = remote_tail(self.runner(handle.node), handle.log_path, offset) if follow else \
                self._read_to_end(handle, offset)
            async for off, line in lines:
                if off > mirrored:
                    f.write(line + "\n")
                    f.flush()
                    mirrored = off
                    mark.write_text(str(off))
                yield off, line

    async def _read_to_end(self, handle: ProcHandle, offset: int) -> AsyncIterator[tuple[int, str]]:
        """Through the node's persistent shell (no login shell: a death is reported after this read),
        or over a channel of its own when the shell cannot (a flood's backlog, a broken shell)."""
        from ..remote.shell_log import shell_read_log

        last = offset
        try:
            async for off, line in shell_read_log(self.shell(handle.node), handle.log_path, offset):
                last = off
                yield off, line
            return
        except (LookupError, AtomdeckError):
            pass
        async for item in remote_read_log(self.runner(handle.node), handle.log_path, last, False):
            yield item

    async def stop(self, handles: list[ProcHandle], grace: float) -> list[StopReport]:
        async def one(h: ProcHandle) -> StopReport:
            if not h.pid:
                return StopReport(h.name, h.node, True, "never started")
            res = await self.runner(h.node).run(
                ["sh", "-c", STOP_SCRIPT, "stop", str(h.pid), f"{self.run_id}:{h.name}", str(int(max(1, grace)))],
                timeout=grace + 30)
            text = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.explain()
            return StopReport(h.name, h.node, res.rc == 0, text)

        return list(await asyncio.gather(*(one(h) for h in handles)))

    async def node_run(self, node: str, argv: list[str], timeout: float = 60):
        return await self.shell(node).run(argv, timeout=timeout)

    async def put_file(self, node: str, src: str, dest: str, mode: int = 0o755) -> None:
        """Over SFTP on the node's pooled SSH connection."""
        await self.runner(node).put(src, dest, mode)

    async def release(self, nodes: list[str] | None = None) -> list[str]:
        """Sweep every node of the run for leftovers of this run (by environment marker)."""
        out = []

        async def sweep(node: str) -> None:
            res = await self.shell(node).run(["sh", "-c", SWEEP_SCRIPT, "sweep", self.run_id], timeout=60)
            killed = [ln for ln in res.stdout.splitlines() if ln.startswith("killed")]
            if killed:
                out.append(f"{node}: swept {len(killed)} leftover process(es)")
            else:
                out.append(f"{node}: no process of the run left" if res.ok else
                           f"{node}: could not check ({res.explain()})")

        await asyncio.gather(*(sweep(n) for n in sorted({*(nodes or ()), *self._runners})))
        return sorted(out)

    def probe_vantage(self, node: str) -> str:
        if self.cluster.login and self.cluster.ssh.via_login:
            return node  # the node's sshd opens the connection (direct-tcpip)
        return "this machine"

    def log_runner(self, node: str) -> Runner:
        return self.runner(node)  # the log is in remote_dir on the node

    def probe_runner(self, node: str | None = None) -> Runner:
        """Probes go through the node's own SSH connection (direct-tcpip) when nodes are reached through
        the login host, so a laptop outside the cluster network can still watch the barrier."""
        if node and self.cluster.login and self.cluster.ssh.via_login:
            return self.runner(node)
        return LocalRunner()

    async def node_health(self, nodes: list[str]) -> dict[str, str]:
        out = {}
        for n in nodes:
            st = getattr(self._runners.get(n), "state", None)
            if st is not None and st.state in ("lost", "reconnecting", "failed"):
                out[n] = f"ssh {st.state}: {st.reason}" if st.reason else f"ssh {st.state}"
            elif st is not None:
                out[n] = ""
        return out

    async def close(self) -> None:
        for t in self._watchers.values():  # (first: their streams run over the connections closed below)
            t.cancel()
        await asyncio.gather(*self._watchers.values(), return_exceptions=True)
        self._watchers.clear()
        for sh in self._shells.values():
            await sh.close()
        self._shells.clear()
        for u in self._unsub:
            try:
                u()
            except Exception:
                pass
        self._unsub.clear()
        for r in self._runners.values():
            await r.close()


def _code(line: str) -> int | None:
    v = line.split("=", 1)[1].strip() if "=" in line else ""
    try:
        return int(v)
    except ValueError:
        return None

