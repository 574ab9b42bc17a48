"""The launcher interface: start a process on a node, know if it lives, read its log, stop it.

Every launcher runs the same small POSIX-sh supervisor around the command: it forwards SIGTERM,
waits for the real child (never a `tee`), and writes the child's exit code next to its log, so a
later session can learn how a process ended even if nobody was watching. It writes the child's PID there
too (child_path): a supervisor can be killed while its child, the engine, lives on and serves; then the
engine's own PID decides whether the process lives, and its exit code is not recorded (nobody waits for it).
"""

from __future__ import annotations

import abc
import asyncio
import functools
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from ..design.commands import ProcessSpec
from ..remote.shell import Result, Runner

if TYPE_CHECKING:
    from ..design.plan import Plan
    from ..remote.node_probes import NodeProc

_PACKAGE = __name__.rpartition(".")[0]


def script(name: str) -> str:
    """The text of core/launch/scripts/NAME.sh (package data, checked by shellcheck in the tests) that
    goes to `sh -c`: the file without its leading `#` lines, which say what it does and how it is run."""
    lines = (resources.files(_PACKAGE) / "scripts" / f"{name}.sh").read_text().splitlines()
    while lines and (lines[0].startswith("#") or not lines[0].strip()):
        lines.pop(0)
    return "\n".join(lines)


# $1 = exit-code file; the rest is the command. The marker in $0 lets teardown check a PID is ours.
SUPERVISOR = script("supervisor")


def child_path(exit_path: str) -> str:
    """Where the supervisor records its child's PID: the exit-code file's path with .child for .exit (as
    supervisor.sh derives it)."""
    return (exit_path[:-5] if exit_path.endswith(".exit") else exit_path) + ".child"


def marker(run_id: str, name: str) -> str:
    """argv[0] of the supervisor: how atomdeck recognises its own processes."""
    return f"atomdeck:{run_id}:{name}"


T = TypeVar("T")


async def spawn(argv: list[str], keep: Callable[[subprocess.Popen], None], **popen) -> subprocess.Popen:
    """`subprocess.Popen(argv, **popen)` in a thread, not on the event loop: Popen returns only once the
    child has exec'd, and with 129 simulators starting on 2 cores each exec waited for a core (the console's
    loop, which launches, drew nothing for 20-30 s at 128 nodes). `keep` gets the child, also when the task
    is cancelled meanwhile (the child runs: the launcher must know it to stop it); the cancellation is
    raised after that. Whatever `popen` hands the child (a log's fd) stays open until this returns."""
    started = asyncio.get_running_loop().run_in_executor(None, functools.partial(subprocess.Popen, argv, **popen))
    child, cancelled = await outlive_cancel(started)
    keep(child)
    if cancelled:
        raise asyncio.CancelledError
    return child


async def outlive_cancel(work: asyncio.Future[T]) -> tuple[T, bool]:
    """Wait for work running in a thread (a fork) even if this task is cancelled meanwhile: what it started
    runs, and the caller must record it before it raises the cancellation. Returns (result, cancelled)."""
    cancelled = False
    while True:
        try:
            return await asyncio.shield(work), cancelled
        except asyncio.CancelledError:
            if work.cancelled():
                raise
            cancelled = True


@dataclass
class ProcHandle:
    """What is needed to find a process again, persisted in the run directory."""

    name: str
    node: str
    host: str
    launcher: str
    pid: int | None = None  # the supervisor (also the process group leader)
    log_path: str = ""  # on the node (ssh) or here (local, slurm on a shared file system)
    exit_path: str = ""
    step: str | None = None  # Slurm step id "JOB.STEP"
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> ProcHandle:
        return ProcHandle(**{k: d[k] for k in ProcHandle.__dataclass_fields__ if k in d})


@dataclass
class ProcStatus:
    alive: bool
    exit_code: int | None = None
    detail: str = ""  # "exited 1", "killed by signal 9", "step CANCELLED"
    # alive, but its supervisor is gone: the engine's own PID (from child_path) says it lives. Its exit code
    # will not be recorded; the launcher's wait() then waits on the engine itself
    engine_pid: int | None = None

    @property
    def orphaned(self) -> bool:
        return self.alive and self.engine_pid is not None


SUPERVISOR_GONE = "its supervisor is gone; the engine (pid {pid}) still runs; its exit code will not be recorded"
ORPHAN_ENDED = "the engine (pid {pid}) ended after its supervisor was gone: its exit code was not recorded"


def orphan(pid: int) -> ProcStatus:
    return ProcStatus(True, None, SUPERVISOR_GONE.format(pid=pid), engine_pid=pid)


@dataclass
class StopReport:
    name: str
    node: str
    ok: bool  # the process (and its group) is gone
    detail: str  # what was done: "SIGTERM, exited in 0.4s" / "SIGKILL after 10s grace" / "already gone"


READ_LOG_GIVE_UP_S = 30.0


async def remote_read_log(runner: Runner, path: str, offset: int, partial: bool) -> AsyncIterator[tuple[int, str]]:
    """A remote log to its end of file over `runner` (a login host, a node): no lines when it is not there."""
    from ..remote.shell import CommandError
    from ..remote.ssh.tail import tail as remote_tail

    try:
        async for item in remote_tail(runner, path, offset, follow=False, partial=partial,
                                      give_up_s=READ_LOG_GIVE_UP_S):
            yield item
    except CommandError:
        return


@runtime_checkable
class Launcher(Protocol):
    """What the run engine needs of a launcher: start a run's processes, know if they live, read their
    logs, stop them, give back what was taken. One instance per run; LauncherBase holds shared code."""

    kind: str
    on_facts: Callable[[dict], None] | None
    on_progress: Callable[[str], None] | None
    on_started: Callable[[ProcHandle], None] | None
    container_runtime: str  # the cluster's container.runtime (remove_containers)

    async def prepare(self, plan: Plan, processes: list[ProcessSpec]) -> dict: ...
    async def node_health(self, nodes: list[str]) -> dict[str, str]: ...
    async def start(self, spec: ProcessSpec, attempt: str = "") -> ProcHandle: ...
    async def start_many(self, specs: list[ProcessSpec]) -> list[ProcHandle | BaseException]: ...
    def started_so_far(self) -> list[ProcHandle]: ...
    async def poll(self, handle: ProcHandle) -> ProcStatus: ...
    async def wait(self, handle: ProcHandle) -> ProcStatus: ...
    def tail(self, handle: ProcHandle, offset: int) -> AsyncIterator[tuple[int, str]]: ...
    def read_log(self, handle: ProcHandle, offset: int = 0, *,
                 partial: bool = False) -> AsyncIterator[tuple[int, str]]: ...
    async def stop(self, handles: list[ProcHandle], grace: float) -> list[StopReport]: ...
    async def release(self, nodes: list[str] | None = None) -> list[str]: ...
    async def sweep_leftovers(self, nodes: list[str]) -> list[str]: ...
    async def node_run(self, node: str, argv: list[str], timeout: float = 60) -> Result: ...
    async def node_processes(self, node: str, marker: str, timeout: float = 10.0) -> list[NodeProc]: ...
    async def put_file(self, node: str, src: str, dest: str, mode: int = 0o755) -> None: ...
    async def connect_from(self, node: str, targets: list[tuple[str, int]], timeout: float = 1.0) -> dict: ...
    async def remove_containers(self, by_node: dict[str, list[str]]) -> list[tuple[bool, str]]: ...
    def probe_vantage(self, node: str) -> str: ...
    def probe_runner(self, node: str | None = None) -> Runner: ...
    def log_runner(self, node: str) -> Runner: ...
    async def close(self) -> None: ...


class LauncherBase(abc.ABC):
    """Shared code of the launchers (local.py, ssh.py, slurm.py); each satisfies `Launcher`."""

    kind: str = "?"
    container_runtime: str = "none"  # the cluster's container.runtime: how remove_containers removes them

    def __init__(self, run_id: str, run_dir: str):
        self.run_id = run_id
        self.run_dir = run_dir
        self.on_facts: Callable[[dict], None] | None = None
        self.on_progress: Callable[[str], None] | None = None
        self.on_started: Callable[[ProcHandle], None] | None = None  # each start, as it is known (on the loop)
        self._started_count = (0, 0)  # (started, failed) of the current start_many
        self._started: dict[str, ProcHandle] = {}  # every process known started, also by a start cut short

    def _say(self, what: str) -> None:
        """Say what the launch is doing now (a console shows it, `up` prints it): a wait for an allocation
        or a pre-flight check can take minutes, and a launch that says nothing looks hung."""
        if self.on_progress is not None:
            self.on_progress(what)

    def _count_started(self, total: int, started: int = 0, failed: int = 0) -> None:
        """`started` (and `failed`) more of the `total` processes of this start_many; 0, 0 begins a count."""
        s, f = self._started_count if started or failed else (0, 0)
        s, f = s + started, f + failed
        self._started_count = (s, f)
        self._say(f"{s} of {total} processes started" + (f", {f} could not start" if f else ""))

    def _heard_started(self, h: ProcHandle) -> None:
        """(On the loop) a process known started, as soon as it is: recorded, and told to the run engine, which
        shows it started while the others still start (a node whose start hangs is seen as the one left)."""
        self._started[h.name] = h
        if self.on_started is not None:
            self.on_started(h)

    def started_so_far(self) -> list[ProcHandle]:
        """Every process this launcher knows it started, also when the start_many that started it was
        cancelled or failed half-way (the run engine records them so that `atomdeck down` finds them; a
        start whose answer never came is found by release()'s sweep instead)."""
        return list(self._started.values())

    def _record(self, facts: dict) -> None:
        """Write facts into the run's run.json now (not when prepare() returns), so that a session that
        dies half-way leaves enough on disk for `atomdeck down` to find what it took. The run engine
        gives the writer (`on_facts`); a launcher never reaches up into the run directory itself."""
        if self.on_facts is not None:
            self.on_facts(facts)

    async def prepare(self, plan: Plan, processes: list[ProcessSpec]) -> dict:
        """Get ready to start the plan's processes (an allocation, remote directories, pre-flight checks).

        Returns facts for the LaunchContext (e.g. {"job_id": "42", "nic": {...}}) and the run directory.
        Raises (e.g. PreflightError) when launching must not go ahead.
        """
        return {}

    async def node_health(self, nodes: list[str]) -> dict[str, str]:
        """'' per healthy node, else why not. Polled during a run (e.g. a slurmd that died)."""
        return {}

    @abc.abstractmethod
    async def start(self, spec: ProcessSpec, attempt: str = "") -> ProcHandle:
        """Start one process detached from this console; its output goes to its log. `attempt` names a start of
        a process that was started before (a restart): a launcher that starts each process at most once (ssh:
        a retried command must not start a second copy) starts it again for a new attempt."""

    async def start_many(self, specs: list[ProcessSpec]) -> list[ProcHandle | BaseException]:
        """Start every process, in parallel. A launcher that can batch per node overrides this."""
        import asyncio

        self._count_started(len(specs))

        async def one(spec: ProcessSpec) -> ProcHandle:
            try:
                h = await self.start(spec)
            except Exception:
                self._count_started(len(specs), failed=1)
                raise
            self._heard_started(h)
            self._count_started(len(specs), started=1)
            return h

        return list(await asyncio.gather(*(one(s) for s in specs), return_exceptions=True))

    @abc.abstractmethod
    async def poll(self, handle: ProcHandle) -> ProcStatus:
        """Is it alive, and if not, how did it end?"""

    async def wait(self, handle: ProcHandle) -> ProcStatus:
        """Return when the process ends. Launchers that can be told (a child) override this."""
        raise NotImplementedError

    @abc.abstractmethod
    def tail(self, handle: ProcHandle, offset: int) -> AsyncIterator[tuple[int, str]]:
        """The log's complete lines from a byte offset, following it: (offset after the line, line)."""

    async def read_log(self, handle: ProcHandle, offset: int = 0, *,
                       partial: bool = False) -> AsyncIterator[tuple[int, str]]:
        """The log's lines from a byte offset to its end of file now, then stop (never waits on silence:
        a connect through a jump host may take longer than any quiet spell). With `partial`, an
        unfinished last line too. A log not there yet has no lines; a node that stays unreachable for
        READ_LOG_GIVE_UP_S raises. This base reads `log_path` here (local, Slurm on a shared file system)."""
        import asyncio

        from ..remote.loglines import read_lines

        for item in await asyncio.to_thread(read_lines, handle.log_path, offset, partial=partial):
            yield item

    @abc.abstractmethod
    async def stop(self, handles: list[ProcHandle], grace: float) -> list[StopReport]:
        """SIGTERM every process (in parallel), SIGKILL what is left after `grace`, verify each is gone."""

    async def release(self, nodes: list[str] | None = None) -> list[str]:
        """Give back what prepare() took (e.g. cancel the holding job) and sweep `nodes` (the run's
        nodes: a process whose start was cut short has no handle, but may be running); returns what
        was done."""
        return []

    async def sweep_leftovers(self, nodes: list[str]) -> list[str]:
        """Kill the run's marked leftovers now, before the release, where the release would end the means to read
        the nodes afterwards (Slurm: the holding job). Here the release's own sweep comes first: nothing to do."""
        return []

    async def node_run(self, node: str, argv: list[str], timeout: float = 60) -> Result:
        """Run a short command on a node (here, for the local launcher)."""
        from ..remote.shell import LocalRunner

        return await LocalRunner().run(argv, timeout=timeout)

    async def node_processes(self, node: str, marker: str, timeout: float = 10.0) -> list[NodeProc]:
        """The processes of `marker` (run:name) on the node, with their state and listening sockets, read there
        (node_probes.processes_on_node). Raises RuntimeError when it could not look."""
        from ..remote.node_probes import processes_on_node

        async def node_run(argv: list[str], t: float) -> Result:
            return await self.node_run(node, argv, t)

        return await processes_on_node(node_run, marker, timeout)

    async def put_file(self, node: str, src: str, dest: str, mode: int = 0o755) -> None:
        """Copy this machine's file `src` to `dest` on a node (here, for the local launcher), whole or not at all."""
        from ..remote.shell import LocalRunner

        await LocalRunner().put(src, dest, mode)

    async def connect_from(self, node: str, targets: list[tuple[str, int]], timeout: float = 1.0) -> dict:
        """(host, port) -> 'open' | 'refused' | 'timeout' | 'unreachable', connected from `node` itself (a
        command run there). Raises RuntimeError when it could not run there."""
        from ..remote.node_probes import connect_from_node

        async def node_run(argv: list[str], t: float) -> Result:
            return await self.node_run(node, argv, t)

        return await connect_from_node(node_run, targets, timeout)

    async def remove_containers(self, by_node: dict[str, list[str]]) -> list[tuple[bool, str]]:
        """`docker rm -f` (`podman rm -f`) the run's containers on every node, as InferenceX's teardown does:
        stopping the `docker run` client (SIGKILL after the grace period) does not stop its container, which
        would keep the node's GPUs. Returns (done, what happened) per node."""
        import asyncio

        binary = self.container_runtime if self.container_runtime in ("docker", "podman") else "docker"

        def gone(line: str) -> bool:  # docker: "No such container: x"; podman 4: "... no such container"
            return "No such container" in line or "no such container" in line

        async def one(node: str, names: list[str]) -> tuple[bool, str]:
            try:
                res = await self.node_run(node, [binary, "rm", "-f", *names])
            except Exception as e:
                return False, f"{node}: could not remove containers {', '.join(names)}: {e}"
            removed = [n for n in names if n in res.stdout.split()]
            errors = [ln for ln in res.stderr.splitlines() if ln.strip() and not gone(ln)]
            if res.ok or not errors:  # a container already gone is what we want
                return True, (f"{node}: containers removed: {', '.join(removed)}" if removed else
                              f"{node}: no container left")
            return False, f"{node}: {binary} rm -f {' '.join(names)} failed: {errors[-1]}"

        return list(await asyncio.gather(*(one(n, names) for n, names in sorted(by_node.items()))))

    def probe_vantage(self, node: str) -> str:
        """Where a probe of `node`'s view really runs from, for messages ("reachable from ...")."""
        return "this machine"

    def probe_runner(self, node: str | None = None) -> Runner:
        """Where probes of node ports run from (here, or through an SSH connection)."""
        from ..remote.shell import LocalRunner

        return LocalRunner()

    def log_runner(self, node: str) -> Runner:
        """Where a command sees the filesystem a process's log is written to (here: local logs, a Slurm shared
        directory mounted here; the login host: a shared directory this machine cannot see; the node: SSH)."""
        from ..remote.shell import LocalRunner

        return LocalRunner()

    async def close(self) -> None:
        return None
