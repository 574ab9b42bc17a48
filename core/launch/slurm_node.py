"""The Slurm launcher's node steps: one `srun --overlap` step per node runs scripts/slurm-node.sh, which
starts that node's processes (each under the supervisor, in its own session and process group, with its
own log and exit-code file on the shared file system) and reports each one's start and end on the step's
output ("started NAME PID", "ended NAME CODE"). Here: starting a node's processes (directly, or through a
login host with scripts/slurm-start.sh), reading their state in one command, waiting on the step's output,
and stopping a node's processes together in one step (scripts/slurm-stop.sh).

`NodeSteps` is a part of `SlurmLauncher` (slurm.py), which holds the job, the runner and the step table.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.cluster import Cluster
from ..config.errors import AtomdeckError
from ..design.commands import ProcessSpec
from ..design.container import with_mount
from ..remote.filetail import follow
from ..remote.shell import Runner
from .base import ORPHAN_ENDED, SUPERVISOR, ProcHandle, ProcStatus, StopReport, marker, orphan, script, spawn
from .local import describe_exit, wait_exit
from .slurm_lines import _int, _supervisor_ended, ended_codes, started_pids

NODE_SCRIPT = script("slurm-node")  # one step per node starts the node's processes and reports their ends
STOP_SCRIPT = script("slurm-stop")  # stop several of a node's processes by process group, in one step
START_SCRIPT = script("slurm-start")  # through a login host: write the list, start the node's step, wait
POLL_SCRIPT = script("poll")  # on the node (a step): alive, an engine that outlived its supervisor, or its end
# runs POLL_SCRIPT ($1) for each PID EXIT_FILE MARKER triple after it: one step for several of a node's processes
POLL_EACH = 'p=$1; shift; while [ $# -ge 3 ]; do printf "%s " "$1"; sh -c "$p" poll "$1" "$2" "$3"; shift 3; done'

AGENT = "atomdeck-node:"  # job-name prefix of the per-node steps
STOP_GATHER_S = 0.02  # teardown stops every process at once, one call each: a node's calls share one step
NEWS_POLL_S = 2.0  # wait() re-checks a process this often even when its node's step says nothing


class NodeSteps:
    """Starting, watching and stopping processes through one step per node (mixed into SlurmLauncher)."""

    # SlurmLauncher's (slurm.py)
    kind: str
    cluster: Cluster
    run_id: str
    job_id: str | None
    runner: Runner
    local_control: bool
    shared_dir: str
    _children: dict[str, subprocess.Popen]  # node step key (or a process of its own step) -> its srun client
    _watchers: dict[str, asyncio.Task]  # node step key -> the task following its output
    _news: dict[str, asyncio.Event]
    _waiting: dict[str, dict[str, tuple[ProcHandle, asyncio.Future]]]  # node step -> its waiters
    _stop_batches: dict[tuple[str, float], tuple[list[ProcHandle], asyncio.Future]]
    _orphans_told: set[str]  # processes whose wait() said their engine outlived its supervisor

    if TYPE_CHECKING:  # SlurmLauncher's too: the job's step table, reads, and processes of a step of their own
        def _srun(self, node: str, name: str, inner: list[str], output: str | None) -> list[str]: ...
        def _tail_runner(self, name: str) -> Runner: ...
        async def _steps_now(self, max_age: float = 0.5) -> dict[str, tuple[str, str]]: ...
        async def _find_step(self, name: str) -> str | None: ...
        def _count_started(self, total: int, started: int = 0, failed: int = 0) -> None: ...
        def _heard_started(self, h: ProcHandle) -> None: ...
        async def _read(self, path: str) -> str: ...
        async def _exit_code(self, h: ProcHandle) -> int | None: ...
        async def _poll_step(self, handle: ProcHandle) -> ProcStatus: ...
        async def _step_end(self, h: ProcHandle) -> str: ...
        async def _stop_one(self, h: ProcHandle, grace: float) -> StopReport: ...
        async def node_run(self, node: str, argv: list[str], timeout: float = 60) -> Any: ...

    async def start(self, spec: ProcessSpec, attempt: str = "") -> ProcHandle:
        (h,) = await self.start_many([spec])
        if isinstance(h, BaseException):
            raise h
        return h

    async def start_many(self, specs: list[ProcessSpec]) -> list[ProcHandle | BaseException]:
        """One step per node starts all of that node's processes; the nodes go in parallel."""
        by_node: dict[str, list[ProcessSpec]] = {}
        for s in specs:
            by_node.setdefault(s.node, []).append(s)
        results: dict[str, ProcHandle | BaseException] = {}
        self._count_started(len(specs))

        async def node(name: str, group: list[ProcessSpec]) -> None:
            try:
                handles = await self._start_node(name, group)
            except BaseException as e:
                for s in group:
                    results[s.name] = e
                self._count_started(len(specs), failed=len(group))
                return
            for h in handles:
                results[h.name] = h
                self._heard_started(h)
            self._count_started(len(specs), started=len(group))

        await asyncio.gather(*(node(n, g) for n, g in by_node.items()))
        return [results[s.name] for s in specs]

    async def _start_node(self, node: str, group: list[ProcessSpec]) -> list[ProcHandle]:
        logs = f"{self.shared_dir}/logs"
        key = f"{node}.{uuid.uuid4().hex[:6]}"  # a later start on the node gets a step of its own
        base = f"{logs}/node-{key}"
        agent_log, listing, srun_log = f"{base}.log", f"{base}.list", f"{base}.srun.log"
        text = "".join(shlex.join(["start", s.name, marker(self.run_id, s.name), f"{logs}/{s.name}.log",
                                   f"{logs}/{s.name}.exit", *s.inner]) + "\n" for s in group)
        argv = ["srun", "--jobid", str(self.job_id), "--overlap", "-w", node, "-N1", "-n1", f"--job-name={AGENT}{key}",
                f"--output={agent_log}", *self._step_options(node, group), "sh", "-c", NODE_SCRIPT, "atomdeck-node",
                self.run_id, SUPERVISOR, listing]
        env = {"ATOMDECK_RUN": f"{self.run_id}:@{key}"}  # the sweep finds the node's step by it too
        names = [s.name for s in group]
        if self.local_control:
            fd = os.open(listing, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w") as f:
                f.write(text)
            Path(agent_log).unlink(missing_ok=True)
            fd = os.open(srun_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                child = await spawn(argv, lambda child: self._children.update({key: child}),
                                    stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
                                    close_fds=True, env={**os.environ, **env})
            finally:
                os.close(fd)
            # in a container the step may first import the image (pyxis with no container name): a pull's time
            wait = max(60.0, self.cluster.container.pull_timeout_s) if any(s.step_options for s in group) else 60.0
            pid, out = child.pid, await self._started_here(agent_log, len(group), child, wait)
        else:
            command = ["env", *[f"{k}={v}" for k, v in env.items()], *argv]
            res = await self.runner.run(["sh", "-c", START_SCRIPT, "start", listing, agent_log, srun_log,
                                         str(len(group)), *command], input=text, timeout=90, check=True)
            lines = res.stdout.splitlines()
            pid = int(lines[0].split()[1]) if lines and lines[0].startswith("srun ") else 0
            out = "\n".join(lines[1:])
        pids = started_pids(out)
        missing = [n for n in names if n not in pids]
        if missing:
            said = (await self._read(srun_log)).strip()
            why = said.splitlines()[-1] if said else "srun gave no reason"
            raise AtomdeckError(f"the step for {node} did not start {', '.join(missing)}: {why}")
        step = await self._find_step(f"{AGENT}{key}")
        extra = {"job_id": self.job_id, "agent": key, "agent_log": agent_log, "agent_seen": len(out.encode()),
                 "srun_log": srun_log, "srun_pid": pid, "srun_here": self.local_control}
        return [ProcHandle(s.name, s.node, s.host, self.kind, pid=pids[s.name], log_path=f"{logs}/{s.name}.log",
                           exit_path=f"{logs}/{s.name}.exit", step=step, extra=dict(extra)) for s in group]

    def _step_options(self, node: str, group: list[ProcessSpec]) -> list[str]:
        """pyxis: the node's step runs in the run's container on the node (every process of the node shares
        it: one --container-name per node and run), with the run's shared directory mounted at its own path,
        since the node script, the supervisors' exit files and the logs live there."""
        opts = [s.step_options for s in group if s.step_options]
        if not opts:
            return []
        if any(o != opts[0] for o in opts):
            raise AtomdeckError(f"the processes on {node} ask for different containers; one step holds them all")
        return with_mount(opts[0], self.shared_dir)

    async def _started_here(self, path: str, n: int, child: subprocess.Popen, timeout: float = 60) -> str:
        """The node step's output once it shows n "started" lines (or srun ended, or the timeout)."""
        t0 = time.monotonic()
        while True:
            ended = child.poll() is not None  # before the read: once srun has ended, its output is complete
            try:
                text = Path(path).read_text(errors="replace")
            except OSError:
                text = ""
            if len(started_pids(text)) >= n or ended or time.monotonic() - t0 > timeout:
                return text
            await asyncio.sleep(0.01)


    async def poll(self, handle: ProcHandle) -> ProcStatus:
        return (await self.poll_many([handle]))[0]

    async def poll_many(self, handles: list[ProcHandle]) -> list[ProcStatus]:
        """Alive, or how each ended: the exit files and the node steps' output read in one go (one command
        through a login host however many processes), then the step table for those still running."""
        out: dict[int, ProcStatus] = {}
        mine = [(i, h) for i, h in enumerate(handles) if h.extra.get("agent")]
        for i, h in enumerate(handles):
            if not h.extra.get("agent"):  # a process started as a step of its own (by an earlier version)
                out[i] = await self._poll_step(h)
        texts = await self._read_many(sorted({p for _, h in mine for p in (h.exit_path, h.extra["agent_log"])}))
        alive: dict[str, bool] = {}
        ask: list[tuple[int, ProcHandle, int | None]] = []  # to be looked at on their node: (index, handle, code)
        for i, h in mine:
            code = _int(texts.get(h.exit_path, ""))
            ended = ended_codes(texts.get(h.extra["agent_log"], ""))
            if code is not None:
                out[i] = ProcStatus(False, code, describe_exit(code))
            elif h.name in ended:  # the supervisor ended without writing the exit file: its engine may live on
                ask.append((i, h, ended[h.name]))
            else:
                key = h.extra["agent"]
                if key not in alive:
                    alive[key] = await self._agent_alive(h)
                if alive[key]:
                    out[i] = ProcStatus(True)
                elif (code := await self._exit_code(h)) is not None:  # it ended together with the node's step
                    out[i] = ProcStatus(False, code, describe_exit(code))
                else:  # the node's step is gone (or only its srun client): its processes may live on
                    ask.append((i, h, None))
        if ask:
            out.update(await self._on_nodes(ask))
        return [out[i] for i in range(len(handles))]

    async def _on_nodes(self, ask: list[tuple[int, ProcHandle, int | None]]) -> dict[int, ProcStatus]:
        """Processes whose supervisor or node step is gone, looked at on their nodes (poll.sh, one step per node):
        alive, an engine that outlived its supervisor, or how it ended. Where no step can run there (the job is
        gone), what the node step said of the supervisor, or the step's end from sacct."""
        by_node: dict[str, list[tuple[int, ProcHandle, int | None]]] = {}
        for item in ask:
            by_node.setdefault(item[1].node, []).append(item)
        out: dict[int, ProcStatus] = {}

        async def node(name: str, items: list[tuple[int, ProcHandle, int | None]]) -> None:
            argv = ["sh", "-c", POLL_EACH, "poll-each", POLL_SCRIPT,
                    *(x for _, h, _ in items for x in (str(h.pid), h.exit_path, f"{self.run_id}:{h.name}"))]
            try:
                res = await self.node_run(name, argv, timeout=30)
                said = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in res.stdout.splitlines() if " " in ln}
            except Exception:
                said = {}
            for i, h, sup in items:
                found = said.get(str(h.pid), "")
                if found == "alive":
                    out[i] = ProcStatus(True)
                    continue
                if found.startswith("orphan ") and found.split()[1].isdigit():
                    out[i] = orphan(int(found.split()[1]))
                    continue
                head, _, engine = found.partition(" engine=")
                code = _int(head[5:]) if found.startswith("exit=") else None
                if code is not None:
                    out[i] = ProcStatus(False, code, describe_exit(code))
                elif h.name in self._orphans_told and engine.strip():
                    out[i] = ProcStatus(False, None, ORPHAN_ENDED.format(pid=engine.strip()))
                elif sup is not None:
                    out[i] = _supervisor_ended(sup)
                else:  # it ended with its node's step: how the step ended, and why, if its client was killed
                    out[i] = ProcStatus(False, None, await self._step_end(h) + self._client_end(h))

        await asyncio.gather(*(node(n, items) for n, items in by_node.items()))
        return out

    async def _read_many(self, paths: list[str]) -> dict[str, str]:
        """path -> text of the files that exist (small files: exit codes, node step output)."""
        if self.local_control:
            return {p: await self._read(p) for p in paths}
        res = await self.runner.run(["sh", "-c", 'for f; do printf "\\036%s\\n" "$f"; cat -- "$f" 2>/dev/null; done',
                                     "read", *paths], timeout=20)
        out: dict[str, str] = {}
        path = None
        for line in res.stdout.split("\n"):  # not splitlines(): it splits at \036 too
            if line.startswith("\036"):
                path = line[1:]
                out[path] = ""
            elif path is not None:
                out[path] += line + "\n"
        return out

    def _client_end(self, h: ProcHandle) -> str:
        """How the node step's srun client (here) ended, when a signal killed it: Slurm then ends the step and its
        tasks (measured on the lab, Slurm 22.05: `kill -9` of the client, the step CANCELLED within 2.4 s)."""
        child = self._children.get(h.extra.get("agent", ""))
        rc = child.returncode if child is not None else None
        if rc is None or rc >= 0:
            return ""
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        return (f"; the step's srun client (pid {child.pid if child else '?'}, on this machine) was killed by {sig}, "
                "and Slurm ends a step whose srun client is gone")

    async def _agent_alive(self, h: ProcHandle) -> bool:
        key = h.extra["agent"]
        child = self._children.get(key)
        if child is not None and child.poll() is None:
            return True
        # its srun client is not known to live (another session, or it was killed): the step may go on without it
        if f"{AGENT}{key}" in await self._steps_now():
            return True
        pid = h.extra.get("srun_pid")
        if pid and not self.local_control:  # a step that squeue has not listed yet, or no longer does
            return (await self.runner.run(["kill", "-0", str(pid)], timeout=10)).ok
        return False


    async def wait(self, handle: ProcHandle) -> ProcStatus:
        """Return when the process ends. One loop per node step serves every process it holds: it reads
        their state when the step's output grows (an "ended" line comes right after the supervisor wrote the
        exit file) or its srun client ends, and every NEWS_POLL_S in case neither is seen."""
        key = handle.extra.get("agent")
        if not key:  # a step of its own, reattached: the exit file is the fast signal
            while True:
                st = await self.poll(handle)
                if not st.alive:
                    return st
                await asyncio.sleep(0.25 if self.local_control else 1.0)
        fut = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, {})[handle.name] = (handle, fut)
        loop = self._watchers.get(f"{key}/wait")
        if loop is None or loop.done():
            self._watchers[f"{key}/wait"] = asyncio.create_task(self._wait_loop(key))
        try:
            return await asyncio.shield(fut)
        finally:
            entry = self._waiting.get(key, {}).get(handle.name)
            if entry is not None and entry[1] is fut:
                del self._waiting[key][handle.name]

    async def _wait_loop(self, key: str) -> None:
        while pending := [item for item in self._waiting.get(key, {}).values() if not item[1].done()]:
            news = self._news_event(pending[0][0])
            try:
                states = await self.poll_many([h for h, _ in pending])
            except Exception:
                states = [ProcStatus(True)] * len(pending)  # a login host not answering: try again soon
            for (h, fut), st in zip(pending, states):
                if fut.done():
                    continue
                if not st.alive:
                    fut.set_result(st)
                elif st.orphaned and h.name not in self._orphans_told:  # said once; then waited for its end
                    self._orphans_told.add(h.name)
                    fut.set_result(st)
            try:
                async with asyncio.timeout(NEWS_POLL_S):
                    await news.wait()
            except TimeoutError:
                pass

    def _news_event(self, h: ProcHandle) -> asyncio.Event:
        """Set on the next line of the node step's output or when its srun client ends."""
        key = h.extra["agent"]
        watcher = self._watchers.get(key)
        if watcher is None or watcher.done():
            self._watchers[key] = asyncio.create_task(self._follow_agent(h))
        return self._news.setdefault(key, asyncio.Event())

    def _tell(self, key: str) -> None:
        ev = self._news.pop(key, None)
        if ev is not None:
            ev.set()

    async def _follow_agent(self, h: ProcHandle) -> None:
        key, path, seen = h.extra["agent"], h.extra["agent_log"], int(h.extra.get("agent_seen", 0))
        child = self._children.get(key)
        if child is not None:
            async def srun_ended() -> None:
                await wait_exit(child.pid, child)
                self._tell(key)
            self._watchers[f"{key}/srun"] = asyncio.create_task(srun_ended())
        if self.local_control:
            lines = follow(path, seen)
        else:
            from ..remote.ssh.tail import tail as remote_tail

            lines = remote_tail(self._tail_runner(f"@{key}"), path, seen)
        try:
            async for _ in lines:
                self._tell(key)
        except Exception:
            pass  # a connection lost: wait() still re-checks every NEWS_POLL_S


    async def stop(self, handles: list[ProcHandle], grace: float) -> list[StopReport]:
        return list(await asyncio.gather(*(self._stop_batched(h, grace) if h.extra.get("agent") else
                                           self._stop_one(h, grace) for h in handles)))

    async def _stop_batched(self, h: ProcHandle, grace: float) -> StopReport:
        """Stop calls for one node made together (teardown makes one per process, all at once) share one
        step: a step costs slurmctld and the node a slurmstepd each, and ~60 ms to start."""
        key = (h.node, grace)
        batch = self._stop_batches.get(key)
        if batch is None:
            batch = self._stop_batches[key] = ([], asyncio.get_running_loop().create_future())
            self._watchers[f"stop/{h.node}/{grace}"] = asyncio.create_task(self._flush_stop(key))
        batch[0].append(h)
        reports = await asyncio.shield(batch[1])
        return reports[h.name]

    async def _flush_stop(self, key: tuple[str, float]) -> None:
        await asyncio.sleep(STOP_GATHER_S)
        handles, fut = self._stop_batches.pop(key)
        try:
            fut.set_result(await self._stop_node(key[0], handles, key[1]))
        except BaseException as e:
            fut.set_exception(e if isinstance(e, Exception) else AtomdeckError(f"stopping on {key[0]}: cancelled"))
            if not isinstance(e, Exception):
                raise

    async def _stop_node(self, node: str, handles: list[ProcHandle], grace: float) -> dict[str, StopReport]:
        """TERM (+CONT) the process groups, KILL what is left after the grace period, verify: one step. No poll
        first: the step says "gone already" of a group with no member (one round trip less through a login host),
        and a group whose PID now belongs to someone else is left alone (the marker check)."""
        out: dict[str, StopReport] = {}
        alive = handles
        inner = ["sh", "-c", STOP_SCRIPT, "stop", str(int(max(1, grace))),
                 *(f"{h.pid}:{self.run_id}:{h.name}" for h in alive)]
        res = await self.runner.run(self._srun(node, "atomdeck-stop", inner, output=None), timeout=grace + 30,
                                    env={"ATOMDECK_RUN": ""})
        said = {}
        for line in res.stdout.splitlines():
            pg, _, rest = line.partition(" ")
            said[pg] = rest
        for h in alive:
            text = said.get(str(h.pid))
            if text is not None:
                out[h.name] = StopReport(h.name, h.node, text.startswith("gone"), text)
            elif not (await self.poll(h)).alive:  # the step could not run (the job ended): neither does it
                out[h.name] = StopReport(h.name, h.node, True, "gone (with its node's step)")
            else:
                out[h.name] = StopReport(h.name, h.node, False, f"could not stop it on {node}: {res.explain()}")
        return out
