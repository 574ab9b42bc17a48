# Long file: the Slurm launcher is one class (allocation, pre-flight, node steps, poll/wait, stop, release) whose
# parts share the job, the step table and the runner; the node-step protocol lives in scripts/slurm-*.sh.
"""The Slurm launcher: an allocation (a holding job, or the operator's job), one
`srun --jobid J --overlap -w NODE -N1 -n1` step per node, and scancel to give the allocation back.

srun runs where Slurm commands run (here, or on the login host over SSH) in its own session, so
the steps do not die with the console. Each node's step runs scripts/slurm-node.sh, which starts that
node's processes exactly as a step of their own did (each under the supervisor, in its own session and
process group, with its own log and exit-code file on the shared file system) and reports each one's
start and end on the step's output. One srun client per node, not per process: a held srun client
costs the launching host ~9.5 MB RSS (~3.7 MB PSS); bench/slurm_scale.py measures it. A process is
stopped on its own by its process group (scripts/slurm-stop.sh, one step per node for all of a
node's processes stopped together).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ..config.cluster import Cluster
from ..config.errors import AtomdeckError
from ..design.commands import ProcessSpec, launcher_wrap
from ..design.inventory import Node, expand_hostlist, parse_scontrol_nodes
from ..remote.engine_flags import check_engine_flags
from ..remote.filetail import follow
from ..remote.preflight import PreflightError, run_checks
from ..remote.shell import LocalRunner, Runner
from . import control_runner
from .base import SUPERVISOR, LauncherBase, ProcHandle, ProcStatus, StopReport, marker, remote_read_log, script
from .local import describe_exit, wait_exit

# every process of the run on each node, killed by one srun task per node (scripts/slurm-sweep.sh)
SWEEP_SCRIPT = script("slurm-sweep")
NODE_SCRIPT = script("slurm-node")  # one step per node starts the node's processes and reports their ends
STOP_SCRIPT = script("slurm-stop")  # stop several of a node's processes by process group, in one step
START_SCRIPT = script("slurm-start")  # through a login host: write the list, start the node's step, wait

AGENT = "atomdeck-node:"  # job-name prefix of the per-node steps
STOP_GATHER_S = 0.02  # teardown stops every process at once, one call each: a node's calls share one step
NEWS_POLL_S = 2.0  # wait() re-checks a process this often even when its node's step says nothing

JOB_START_TIMEOUT = 120.0
TAILS_PER_CONNECTION = 8  # of OpenSSH's 10 sessions per connection (MaxSessions), leave room for reads


async def query_nodes(cluster: Cluster, names: list[str] | None = None, runner: Runner | None = None) -> list[Node]:
    """The live node inventory from `scontrol show node -o` (run where Slurm commands run)."""
    own = runner is None
    runner = runner or control_runner(cluster)
    try:
        res = await runner.run(["scontrol", "show", "node", "-o", *([",".join(names)] if names else [])], timeout=20)
    finally:
        if own:
            await runner.close()
    if not res.ok:
        raise AtomdeckError(f"scontrol on {runner.where}: {res.explain()}")
    return parse_scontrol_nodes(res.stdout)


class SlurmLauncher(LauncherBase):
    kind = "slurm"

    def __init__(self, run_id: str, run_dir: str, cluster: Cluster, meta: dict):
        super().__init__(run_id, run_dir)
        self.cluster = cluster
        self.runner = control_runner(cluster)
        self.local_control = isinstance(self.runner, LocalRunner)
        self.job_id: str | None = meta.get("job_id")
        self.job_owned: bool = bool(meta.get("job_owned"))
        root = cluster.slurm.run_root
        self.shared_dir = f"{root.rstrip('/')}/{run_id}" if root else run_dir
        self._children: dict[str, subprocess.Popen] = {}
        self._steps: dict[str, str] = {}  # name -> step id
        self._step_table: tuple[float, dict[str, tuple[str, str]]] = (0.0, {})
        self._lock = asyncio.Lock()
        self._tail_lanes: dict[str, int] = {}  # process name -> its tail's connection (login host)
        self._tail_runners: dict[int, Runner] = {}
        self._watchers: dict[str, asyncio.Task] = {}  # node step key -> the task following its output
        self._news: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, dict[str, tuple[ProcHandle, asyncio.Future]]] = {}  # node step -> its waiters
        self._stop_batches: dict[tuple[str, float], tuple[list[ProcHandle], asyncio.Future]] = {}

    # ------------------------------------------------------------------------------------ allocation
    async def prepare(self, plan, processes: list[ProcessSpec]) -> dict:
        nodes = list(plan.selection.all())
        try:
            if self.job_id:
                await self._check_given_job(nodes)
            else:
                await self._submit(nodes)  # interrupted while the job waits to start: released below
            facts: dict[str, Any] = {"job_id": self.job_id, "job_owned": self.job_owned, "shared_dir": self.shared_dir}
            await self._mkdir_shared()
            facts.update(await self._preflight(plan, processes))
        except BaseException:
            await self.release()
            raise
        return facts

    async def _mkdir_shared(self) -> None:
        if self.local_control:
            Path(self.shared_dir, "logs").mkdir(parents=True, exist_ok=True, mode=0o700)
        else:
            await self.runner.run(["mkdir", "-p", "-m", "700", f"{self.shared_dir}/logs"], check=True)

    async def _check_given_job(self, nodes: list[str]) -> None:
        assert self.job_id is not None  # called only when the cluster or the run names a job
        res = await self.runner.run(["squeue", "-h", "-j", self.job_id, "-o", "%T|%N"], timeout=20)
        line = res.stdout.strip().splitlines()[0] if res.ok and res.stdout.strip() else ""
        if not line:
            raise AtomdeckError(f"Slurm job {self.job_id} is not running (squeue knows nothing of it); "
                                "give a running job with --job, or leave --job out to get an allocation")
        state, nodelist = line.split("|", 1)
        if state != "RUNNING":
            raise AtomdeckError(f"Slurm job {self.job_id} is {state}, not RUNNING; wait for it or use another")
        missing = [n for n in nodes if n not in expand_hostlist(nodelist)]
        if missing:
            raise AtomdeckError(f"Slurm job {self.job_id} holds {nodelist}, not {', '.join(missing)}; "
                                "choose nodes from the job, or another job")

    async def _submit(self, nodes: list[str]) -> None:
        c = self.cluster
        argv = ["sbatch", "--parsable", "-N", str(len(nodes)), "-w", ",".join(nodes),
                f"--job-name={c.slurm.job_name}:{self.run_id}", f"--time={c.slurm.time_limit}",
                f"--gres=gpu:{c.gpus_per_node}", "--exclusive", f"--output={self.shared_dir}/logs/holding-job.out"]
        if c.partition:
            argv.append(f"--partition={c.partition}")
        if c.account:
            argv.append(f"--account={c.account}")
        argv += list(c.slurm.extra_sbatch)
        argv += ["--wrap", "exec sleep infinity"]
        if self.local_control:
            Path(self.shared_dir, "logs").mkdir(parents=True, exist_ok=True, mode=0o700)
        else:
            await self.runner.run(["mkdir", "-p", "-m", "700", f"{self.shared_dir}/logs"], check=True)
        res = await self.runner.run(argv, timeout=60)
        if not res.ok:
            said = (res.stderr or res.stdout).strip()
            raise AtomdeckError(f"sbatch refused the allocation on {self.runner.where}: "
                                f"{said.splitlines()[-1] if said else f'exit {res.rc}'}")
        self.job_id = res.stdout.strip().split(";")[0]
        self.job_owned = True
        # on disk at once: if this session dies while the job waits to start, `atomdeck down` finds it
        self._record({"job_id": self.job_id, "job_owned": True})
        deadline = time.monotonic() + JOB_START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            q = await self.runner.run(["squeue", "-h", "-j", self.job_id, "-o", "%T|%r"], timeout=20)
            last = q.stdout.strip()
            if last.startswith("RUNNING"):
                return
            if q.ok and not last:
                break  # it ended already
            await asyncio.sleep(0.2)
        raise AtomdeckError(f"the holding job {self.job_id} did not start ({last or 'it ended'}); "
                            "check the partition and the nodes' state")

    async def _preflight(self, plan, processes: list[ProcessSpec]) -> dict[str, dict[str, str]]:
        """The pre-flight script as one srun step per node, all in parallel."""
        facts = await run_checks(plan, processes, lambda node, argv: self.runner.run(
            self._srun(node, "preflight", argv, output=None), timeout=60))
        await check_engine_flags(plan, processes, lambda node, argv: self.runner.run(
            self._srun(node, "preflight-help", argv, output=None), timeout=120))
        return facts

    def _srun(self, node: str, name: str, inner: list[str], output: str | None) -> list[str]:
        argv = ["srun", "--jobid", str(self.job_id), "--overlap", "-w", node, "-N1", "-n1", f"--job-name={name}"]
        if output:
            argv.append(f"--output={output}")
        return argv + inner

    # ------------------------------------------------------------------------------------ processes
    async def start(self, spec: ProcessSpec) -> ProcHandle:
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

        async def node(name: str, group: list[ProcessSpec]) -> None:
            try:
                results.update({h.name: h for h in await self._start_node(name, group)})
            except BaseException as e:
                for s in group:
                    results[s.name] = e

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
                f"--output={agent_log}", "sh", "-c", NODE_SCRIPT, "atomdeck-node", self.run_id, SUPERVISOR, listing]
        env = {"ATOMDECK_RUN": f"{self.run_id}:@{key}"}  # the sweep finds the node's step by it too
        names = [s.name for s in group]
        if self.local_control:
            fd = os.open(listing, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w") as f:
                f.write(text)
            Path(agent_log).unlink(missing_ok=True)
            fd = os.open(srun_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                         start_new_session=True, close_fds=True, env={**os.environ, **env})
            finally:
                os.close(fd)
            self._children[key] = child
            pid, out = child.pid, await self._started_here(agent_log, len(group), child)
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

    async def _steps_now(self, max_age: float = 0.5) -> dict[str, tuple[str, str]]:
        """job-name -> (step id, state) for this job's steps, cached for max_age seconds."""
        async with self._lock:
            t, table = self._step_table
            if time.monotonic() - t < max_age:
                return table
            res = await self.runner.run(["squeue", "-h", "-s", "-j", str(self.job_id), "-o", "%i|%j|%T"], timeout=20)
            table = {}
            if res.ok:
                for line in res.stdout.splitlines():
                    parts = line.strip().split("|")
                    if len(parts) >= 2:
                        table[parts[1]] = (parts[0], parts[2] if len(parts) > 2 else "")
            self._step_table = (time.monotonic(), table)
            return table

    async def _find_step(self, name: str) -> str | None:
        """The step id srun got (concurrent starts share one squeue call per 50 ms)."""
        for _ in range(100):
            steps = await self._steps_now(max_age=0.05)
            if name in steps:
                return steps[name][0]
            await asyncio.sleep(0.05)
        return None

    async def _exit_code(self, h: ProcHandle) -> int | None:
        if self.local_control:
            try:
                return int(Path(h.exit_path).read_text().strip())
            except (OSError, ValueError):
                return None
        res = await self.runner.run(["cat", h.exit_path], timeout=10)
        try:
            return int(res.stdout.strip()) if res.ok else None
        except ValueError:
            return None

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
        for i, h in mine:
            code = _int(texts.get(h.exit_path, ""))
            ended = ended_codes(texts.get(h.extra["agent_log"], ""))
            if code is not None:
                out[i] = ProcStatus(False, code, describe_exit(code))
            elif h.name in ended:  # the supervisor itself ended without writing the exit file
                c = ended[h.name]
                out[i] = ProcStatus(False, c, f"its supervisor {describe_exit(c)}" if c is not None else
                                    "ended, exit code unknown")
            else:
                key = h.extra["agent"]
                if key not in alive:
                    alive[key] = await self._agent_alive(h)
                if alive[key]:
                    out[i] = ProcStatus(True)
                elif (code := await self._exit_code(h)) is not None:  # it ended together with the node's step
                    out[i] = ProcStatus(False, code, describe_exit(code))
                else:
                    out[i] = ProcStatus(False, None, await self._step_end(h))
        return [out[i] for i in range(len(handles))]

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

    async def _agent_alive(self, h: ProcHandle) -> bool:
        key = h.extra["agent"]
        child = self._children.get(key)
        if child is not None:
            return child.poll() is None
        if f"{AGENT}{key}" in await self._steps_now():
            return True
        pid = h.extra.get("srun_pid")
        if pid and not self.local_control:  # a step that squeue has not listed yet, or no longer does
            return (await self.runner.run(["kill", "-0", str(pid)], timeout=10)).ok
        return False

    async def _poll_step(self, handle: ProcHandle) -> ProcStatus:
        child = self._children.get(handle.name)
        if child is not None and child.poll() is None:
            return ProcStatus(True)
        code = await self._exit_code(handle)
        if code is not None:
            return ProcStatus(False, code, describe_exit(code))
        steps = await self._steps_now()
        if handle.name in steps:
            return ProcStatus(True)
        if child is None and handle.pid and not self.local_control:
            res = await self.runner.run(["kill", "-0", str(handle.pid)], timeout=10)
            if res.ok:
                return ProcStatus(True)
        return ProcStatus(False, None, await self._step_end(handle))

    async def _step_end(self, h: ProcHandle) -> str:
        step = h.step or self._steps.get(h.name)
        if not step:
            srun = await self._read(h.extra.get("srun_log", ""))
            return f"the step never started: {srun.strip().splitlines()[-1] if srun.strip() else 'srun gave no reason'}"
        res = await self.runner.run(["sacct", "-n", "-P", "-j", step, "-o", "State,ExitCode"], timeout=20)
        line = res.stdout.strip().splitlines()[0] if res.ok and res.stdout.strip() else ""
        return f"step {step} {line.replace('|', ' exit ')}" if line else f"step {step} ended"

    async def _read(self, path: str) -> str:
        if not path:
            return ""
        if self.local_control:
            try:
                return Path(path).read_text(errors="replace")
            except OSError:
                return ""
        res = await self.runner.run(["cat", path], timeout=10)
        return res.stdout if res.ok else ""

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
            for (_, fut), st in zip(pending, states):
                if not st.alive and not fut.done():
                    fut.set_result(st)
            try:
                await asyncio.wait_for(news.wait(), NEWS_POLL_S)
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

    def tail(self, handle: ProcHandle, offset: int) -> AsyncIterator[tuple[int, str]]:
        if self.local_control:
            return follow(handle.log_path, offset)
        from ..remote.ssh.tail import tail as remote_tail

        return remote_tail(self._tail_runner(handle.name), handle.log_path, offset)

    def _tail_runner(self, name: str) -> Runner:
        """Log tails through the login host ride their own connections, TAILS_PER_CONNECTION each: OpenSSH
        allows 10 sessions per connection, and a tail holds one for good, so on the command connection
        the tenth process's tail (and every squeue, cat and scancel after it) would wait forever."""
        from dataclasses import replace

        from ..remote.ssh.runner import SshRunner

        if not isinstance(self.runner, SshRunner):
            return self.runner
        lane = self._tail_lanes.setdefault(name, 1 + len(self._tail_lanes) // TAILS_PER_CONNECTION)
        if lane not in self._tail_runners:
            self._tail_runners[lane] = SshRunner(replace(self.runner.target, lane=lane))
        return self._tail_runners[lane]

    async def read_log(self, handle: ProcHandle, offset: int = 0, *,
                       partial: bool = False) -> AsyncIterator[tuple[int, str]]:
        if self.local_control:
            async for item in super().read_log(handle, offset, partial=partial):
                yield item
            return
        async for item in remote_read_log(self.runner, handle.log_path, offset, partial):
            yield item

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

    async def _stop_one(self, h: ProcHandle, grace: float) -> StopReport:
        t0 = time.monotonic()
        step = h.step or self._steps.get(h.name) or (await self._steps_now(0.0)).get(h.name, ("", ""))[0]
        if not (await self.poll(h)).alive:
            return StopReport(h.name, h.node, True, "already gone")
        # SIGCONT after SIGTERM: a stopped task (state T: SIGSTOP, a debugger, a frozen container) ignores
        # SIGTERM until it is continued, and would wait out the whole grace period for its SIGKILL
        if step:
            await self.runner.run(["scancel", "--signal=TERM", step], timeout=20)
            await self.runner.run(["scancel", "--signal=CONT", step], timeout=20)
        elif h.pid and self.local_control:
            _signal_group(h.pid, 15)
            _signal_group(h.pid, 18)
        while time.monotonic() - t0 < grace:
            if not (await self._alive_fresh(h)):
                return StopReport(h.name, h.node, True, f"scancel --signal=TERM {step}, gone in "
                                  f"{time.monotonic() - t0:.1f}s")
            await asyncio.sleep(0.2)
        if step:
            await self.runner.run(["scancel", "--signal=KILL", step], timeout=20)
            await self.runner.run(["scancel", step], timeout=20)
        if h.pid and self.local_control:
            _signal_group(h.pid, 9)
        t1 = time.monotonic()
        while time.monotonic() - t1 < 10:
            if not (await self._alive_fresh(h)):
                return StopReport(h.name, h.node, True, f"killed after {grace:g}s grace (scancel {step}), gone")
            await asyncio.sleep(0.25)
        return StopReport(h.name, h.node, False, f"step {step} still listed after scancel")

    async def _alive_fresh(self, h: ProcHandle) -> bool:
        child = self._children.get(h.name)
        if child is not None and child.poll() is None:
            return True
        steps = await self._steps_now(max_age=0.2)
        return h.name in steps

    async def node_run(self, node: str, argv: list[str], timeout: float = 60):
        """A short command on a node: an `srun --overlap` step in the holding job."""
        return await self.runner.run(self._srun(node, "atomdeck-cmd", argv, output=None), timeout=timeout)

    async def release(self, nodes: list[str] | None = None) -> list[str]:
        """Verify no process of the run is left on any node, then cancel the holding job (if ours)."""
        done: list[str] = []
        if not self.job_id:
            return done
        alive_job = await self.runner.run(["squeue", "-h", "-j", str(self.job_id), "-o", "%T|%N"], timeout=20)
        line = alive_job.stdout.strip()
        if line.startswith("RUNNING"):
            nodes = expand_hostlist(line.split("|", 1)[1])
            for _ in range(10):  # the node steps end on their own once their processes have (ms after a stop)
                if not any(name.startswith(AGENT) for name in await self._steps_now(0.0)):
                    break
                await asyncio.sleep(0.1)
            done += await self._sweep_nodes(nodes)
        if not self.job_owned:
            done.append(f"job {self.job_id} left running (it was given with --job, not started by atomdeck)")
            return done
        if line:
            await self.runner.run(["scancel", str(self.job_id)], timeout=20)
            for _ in range(100):
                q = await self.runner.run(["squeue", "-h", "-j", str(self.job_id)], timeout=20)
                if q.ok and not q.stdout.strip():
                    break
                await asyncio.sleep(0.2)
            else:
                done.append(f"job {self.job_id} still listed by squeue after scancel")
                return done
        acct = await self.runner.run(["sacct", "-n", "-X", "-P", "-j", str(self.job_id), "-o", "State"], timeout=20)
        state = acct.stdout.strip().splitlines()[0] if acct.ok and acct.stdout.strip() else "gone from squeue"
        done.append(f"holding job {self.job_id} cancelled ({state})")
        return done

    async def _sweep_nodes(self, nodes: list[str]) -> list[str]:
        """Kill any process of this run still alive on the nodes (found by its environment marker)."""
        argv = ["srun", "--jobid", str(self.job_id), "--overlap", "-w", ",".join(nodes), f"-N{len(nodes)}",
                f"-n{len(nodes)}", "--ntasks-per-node=1", "--job-name=atomdeck-sweep",
                "sh", "-c", SWEEP_SCRIPT, "sweep", self.run_id]
        res = await self.runner.run(argv, timeout=60, env={"ATOMDECK_RUN": ""})
        killed = [ln for ln in res.stdout.splitlines() if ln.startswith("killed")]
        if killed:
            return [f"swept leftovers: {', '.join(killed)}"]
        return [f"no process of the run left on {', '.join(nodes)}"] if res.ok else \
            [f"could not check the nodes for leftovers: {res.explain()}"]

    async def node_health(self, nodes: list[str]) -> dict[str, str]:
        """'' for a healthy node, else why not (e.g. 'down, not responding: Not responding')."""
        try:
            inv = await query_nodes(self.cluster, nodes, self.runner)
        except AtomdeckError as e:
            return {n: f"unknown: {e}" for n in nodes}
        return {n.name: n.why_unhealthy() for n in inv}

    def probe_vantage(self, node: str) -> str:
        if self.local_control or self.cluster.login is None:
            return "this machine"
        return f"the login host {self.cluster.login.host}"

    def probe_runner(self, node: str | None = None) -> Runner:
        return self.runner if not self.local_control else LocalRunner()

    async def close(self) -> None:
        for t in self._watchers.values():
            t.cancel()
        await asyncio.gather(*self._watchers.values(), return_exceptions=True)
        self._watchers.clear()
        for r in self._tail_runners.values():
            await r.close()
        await self.runner.close()


def started_pids(text: str) -> dict[str, int]:
    """name -> PID from a node step's "started NAME PID" lines."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "started" and parts[2].isdigit():
            out[parts[1]] = int(parts[2])
    return out


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def ended_codes(text: str) -> dict[str, int | None]:
    """name -> the supervisor's exit status (None: not known) from a node step's "ended NAME CODE" lines."""
    out: dict[str, int | None] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "ended":
            out[parts[1]] = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
    return out


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["PreflightError", "SlurmLauncher", "launcher_wrap", "query_nodes"]
