"""The Slurm launcher: an allocation (a holding job, or the operator's job), one
`srun --jobid J --overlap -w NODE -N1 -n1` step per node, and scancel to give the allocation back.

srun runs where Slurm commands run (here, or on the login host over SSH) in its own session, so
the steps do not die with the console. Each node's step runs scripts/slurm-node.sh, which starts that
node's processes exactly as a step of their own did (each under the supervisor, in its own session and
process group, with its own log and exit-code file on the shared file system) and reports each one's
start and end on the step's output. One srun client per node, not per process: a held srun client
costs the launching host ~9.5 MB RSS (~3.7 MB PSS); bench/slurm_scale.py measures it. A process is
stopped on its own by its process group (scripts/slurm-stop.sh, one step per node for all of a
node's processes stopped together). The node steps are in slurm_node.py; with pyxis a node's step runs in
the run's enroot container on the node, whose names and removal are in slurm_pyxis.py.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import subprocess
import time
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
from .base import LauncherBase, ProcHandle, ProcStatus, StopReport, remote_read_log, script
from .local import describe_exit
from .slurm_node import AGENT, NodeSteps
from .slurm_pyxis import PyxisSteps

# every process of the run on each node, killed by one srun task per node (scripts/slurm-sweep.sh)
SWEEP_SCRIPT = script("slurm-sweep")
RELEASE_SCRIPT = script("slurm-release")  # squeue, the sweep, scancel, squeue until gone, sacct: one command

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


class SlurmLauncher(PyxisSteps, NodeSteps, LauncherBase):
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
        self._orphans_told: set[str] = set()
        self.container_runtime = cluster.container.runtime

    # ------------------------------------------------------------------------------------ allocation
    async def prepare(self, plan, processes: list[ProcessSpec]) -> dict:
        nodes = list(plan.selection.all())
        named = processes
        try:
            if self.job_id:
                self._say(f"checking that Slurm job {self.job_id} holds the {len(nodes)} nodes")
                await self._check_given_job(nodes)
            else:
                await self._submit(nodes)  # interrupted while the job waits to start: released below
            facts: dict[str, Any] = {"job_id": self.job_id, "job_owned": self.job_owned, "shared_dir": self.shared_dir}
            await self._mkdir_shared()
            self._say(f"pre-flight checks on {len(nodes)} nodes (one srun step each, in job {self.job_id})")
            named = self._named_for_this_run(plan, processes)
            facts.update(await self._preflight(plan, named))
        except BaseException:
            await self._remove_pyxis_after_preflight(named)
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
        self._say(f"asking Slurm for {len(nodes)} nodes (sbatch on {self.runner.where})")
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
            state, _, reason = last.partition("|")
            self._say(f"Slurm job {self.job_id} is {state or 'not in squeue yet'}"
                      + (f" ({reason})" if reason and reason != "None" else "")
                      + f"; waiting up to {JOB_START_TIMEOUT:.0f} s for it to start")
            await asyncio.sleep(0.2)
        raise AtomdeckError(f"the holding job {self.job_id} did not start ({last or 'it ended'}); "
                            "check the partition and the nodes' state")

    async def _preflight(self, plan, processes: list[ProcessSpec]) -> dict[str, dict[str, str]]:
        """The pre-flight script as one srun step per node, all in parallel; then the checks in the image (a
        pull may take container.pull_timeout_s; pyxis: the step's own --container-* options lead the argv)."""
        facts = await run_checks(plan, processes, lambda node, argv: self.runner.run(
            self._srun(node, "preflight", argv, output=None), timeout=60), self.run_id,
            run_image=lambda node, argv, t: self.runner.run(self._srun(node, "preflight-image", argv, output=None),
                                                            timeout=t),
            progress=self._say)
        await check_engine_flags(plan, processes, lambda node, argv: self.runner.run(
            self._srun(node, "preflight-help", argv, output=None), timeout=120))
        return facts

    def _srun(self, node: str, name: str, inner: list[str], output: str | None) -> list[str]:
        argv = ["srun", "--jobid", str(self.job_id), "--overlap", "-w", node, "-N1", "-n1", f"--job-name={name}"]
        if output:
            argv.append(f"--output={output}")
        return argv + inner

    # ------------------------------------------------------------------------------------ processes
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

    async def put_file(self, node: str, src: str, dest: str, mode: int = 0o755) -> None:
        """Slurm's own file broadcast: `sbcast` to the job's nodes, run where Slurm commands run (through a login
        host, the file goes there first over SFTP). The destination directory is made on the node first."""
        if not self.job_id:
            raise AtomdeckError("no Slurm job holds this run's nodes: nothing to copy a file to")
        made = await self.node_run(node, ["mkdir", "-p", posixpath.dirname(dest)], timeout=60)
        if not made.ok:
            raise AtomdeckError(f"{node}: cannot make {posixpath.dirname(dest)}: {made.explain()}")
        source = src
        if not isinstance(self.runner, LocalRunner):
            source = f"/tmp/atomdeck-sbcast-{self.run_id}-{posixpath.basename(src)}"
            await self.runner.put(src, source, mode)
        res = await self.runner.run(["sbcast", "-f", "-p", "-j", str(self.job_id), source, dest], timeout=120)
        if not res.ok:
            raise AtomdeckError(f"sbcast of {src} to {dest} on the nodes of job {self.job_id} failed: {res.explain()}")

    async def sweep_leftovers(self, nodes: list[str]) -> list[str]:
        """The release's sweep (scripts/slurm-sweep.sh, a step on every node), run on its own while the job still
        holds the nodes: the teardown's GPU check reads them again after it (once the job is cancelled, nothing
        reaches them). Returns the "killed PID on NODE" lines."""
        if not self.job_id or not nodes:
            return []
        argv = ["srun", "--jobid", str(self.job_id), "--overlap", "-w", ",".join(nodes), f"-N{len(nodes)}",
                f"-n{len(nodes)}", "--ntasks-per-node=1", "--job-name=atomdeck-sweep", "sh", "-c", SWEEP_SCRIPT,
                "sweep", self.run_id]
        res = await self.runner.run(argv, timeout=60, env={"ATOMDECK_RUN": ""})
        return [ln for ln in res.stdout.splitlines() if ln.startswith("killed")]

    async def release(self, nodes: list[str] | None = None) -> list[str]:
        """Verify no process of the run is left on any node (the sweep), then cancel the holding job (if ours)
        and read its end back from sacct: one command where Slurm commands run (scripts/slurm-release.sh), so
        through a login host one SSH round trip instead of one per squeue, sweep, scancel and sacct."""
        done: list[str] = []
        if not self.job_id:
            return done
        res = await self.runner.run(["sh", "-c", RELEASE_SCRIPT, "release", str(self.job_id), self.run_id,
                                     "1" if self.job_owned else "0", AGENT, SWEEP_SCRIPT],
                                    timeout=120, env={"ATOMDECK_RUN": ""})
        said = res.stdout.splitlines()
        job = next((ln[4:] for ln in said if ln == "job" or ln.startswith("job ")), None)
        if job is None:  # the script did not run (a login host not answering): nothing is known
            raise AtomdeckError(f"could not release Slurm job {self.job_id} on {self.runner.where}: {res.explain()}")
        if job.startswith("RUNNING|"):
            nodes = expand_hostlist(job.split("|")[1])
            killed = [ln for ln in said if ln.startswith("killed")]
            sweep = next((ln.split()[1] for ln in said if ln.startswith("sweep ")), "")
            if killed:
                done.append(f"swept leftovers: {', '.join(killed)}")
            elif sweep == "0":
                done.append(f"no process of the run left on {', '.join(nodes)}")
            else:
                err = res.stderr.strip().splitlines()
                done.append(f"could not check the nodes for leftovers: the sweep step exited {sweep or '?'}: "
                            f"{err[-1] if err else '(no output)'}")
        if not self.job_owned:
            done.append(f"job {self.job_id} left running (it was given with --job, not started by atomdeck)")
            return done
        if "listed" in said:
            done.append(f"job {self.job_id} still listed by squeue after scancel")
            return done
        state = next((ln[5:].strip() for ln in said if ln.startswith("acct ")), "")
        done.append(f"holding job {self.job_id} cancelled ({state or 'gone from squeue'})")
        return done

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

    def log_runner(self, node: str) -> Runner:
        return self.runner if not self.local_control else LocalRunner()  # srun --output files: the shared dir

    async def close(self) -> None:
        for t in self._watchers.values():
            t.cancel()
        await asyncio.gather(*self._watchers.values(), return_exceptions=True)
        self._watchers.clear()
        for r in self._tail_runners.values():
            await r.close()
        await self.runner.close()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["PreflightError", "SlurmLauncher", "launcher_wrap", "query_nodes"]
