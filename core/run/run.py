"""A Run: launch a plan, watch it come up, keep its state, tear it down. The one path used by the
console, the CLI and any later session (the run directory is the truth).

The one object every session uses for a run, from its launch (the starts as they are heard, a launch cut short)
to its teardown. What it is made of lives beside it: the checks before a launch (checks.py: inuse, ports), the run
directory and its files (rundir, runfiles), the state and its events (events), the watchers (watchers/); the
launcher is chosen by launch/ and every command rendered by design/.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from ..config.cluster import Cluster
from ..config.errors import AtomdeckError
from ..config.recipe import Recipe
from ..config.secrets import MASK, is_secret, redact_line
from ..design.commands import ProcessSpec
from ..design.lint import Assessment
from ..design.plan import Plan, with_node_ips
from ..design.workspace import Workspace, render_for_run
from ..launch.base import Launcher, ProcHandle, outlive_cancel
from ..launch.choose import launcher_for
from ..remote.filetail import read_last_lines
from .barrier import BarrierProber
from .checks import check_free
from .diagnose import diagnose
from .events import Event, RunState, fresh_state, replay
from .intents import Intent, expected_exit
from .intents import read_all as read_intents
from .logspace import LogSpace
from .rundir import RunDir
from .runfiles import added_event, design_from_disk, new_run_dir, record_facts, write_plan_files
from .teardown import TeardownReport, teardown_run
from .watchers import Watchers, keep_going, raise_open_files_limit

DEFAULT_GRACE = 10.0
PERSIST = {"proc.started", "proc.stage", "proc.health", "proc.exit", "proc.error", "cell", "pair", "check", "run",
           "teardown", "conn", "note", "storage", "action", "proc.reset", "proc.removed", "proc.added",
           "proc.supervisor", "proc.parked"}
STORAGE_TICK_S = 2.0  # while watching: write what waits in an unwritable run directory, or find it unwritable
LOG_SPACE_EVERY = 5  # ticks between checks of the log directories where they live (a command per node)


def make_launcher(cluster: Cluster, run_id: str, run_dir: str, meta: dict | None = None) -> Launcher:
    """The cluster's launcher for a run (launch/ chooses it), whose facts go into the run's run.json as they come."""
    launcher = launcher_for(cluster, run_id, run_dir, meta)
    launcher.on_facts = partial(record_facts, Path(run_dir))
    return launcher


class Run:
    """One deployment, live or reattached. It HAS its watchers (run/watchers/: logs, barrier, pairs,
    router, nodes, timeouts, binding, health, metrics, gpus), each a small object that reports by events."""

    def __init__(self, rd: RunDir, recipe: Recipe, cluster: Cluster, plan: Plan, processes: list[ProcessSpec],
                 launcher: Launcher, state: RunState):
        self.rd = rd
        self.id = rd.id
        self.recipe = recipe
        self.cluster = cluster
        self.plan = plan
        self.processes = {p.name: p for p in processes}
        self.launcher = launcher
        self.state = state
        self.handles: dict[str, ProcHandle] = {}
        self.offsets: dict[str, int] = {}
        self.listeners: list[Callable[[Event], None]] = []
        self.line_listeners: list[Callable[[str, str], None]] = []
        self.stopping = False
        self.unsaved_words = ""  # set by close(): what could not be written to the run directory, and where it is
        self._logspace: LogSpace | None = None
        self._unsaved: builtins.list[ProcHandle] = []  # started, their handle files not written yet
        self._saving: asyncio.Future | None = None  # writes them, then says they started
        self._changed = asyncio.Event()
        self._secrets = {k: v for p in processes for k, v in p.all_env().items() if is_secret(k) and v and v != MASK}
        self.watchers = Watchers(self, self._changed)

    # ---------------------------------------------------------------------------------------- watching
    async def watch(self, until: Callable[[RunState], bool] | None = None, timeout: float | None = None) -> RunState:
        """Watch every process, port and check until `until(state)` holds, the timeout passes, or cancelled."""
        raise_open_files_limit()
        tick = asyncio.create_task(self._storage_tick(), name="storage")
        try:
            return await self.watchers.watch(until, timeout)
        finally:
            tick.cancel()

    async def _storage_tick(self) -> None:
        """Every STORAGE_TICK_S: write what waits (space may have come back while nothing was emitted), or
        probe the directory, so the console says it cannot be written within seconds, also when all is quiet."""
        n = 0
        while True:
            await asyncio.sleep(STORAGE_TICK_S)
            self.check_storage()
            n += 1
            if n % LOG_SPACE_EVERY == 0:
                await self.check_log_space()

    async def check_log_space(self) -> None:
        """The processes' log directories, where they live (core/run/logspace.py)."""
        if self._logspace is None:
            self._logspace = LogSpace(self)
        await self._logspace.check()

    def check_storage(self) -> None:
        """Probe the run directory (or write what waits in it) and tell the state when that changed."""
        try:
            self.rd.probe()
        except OSError:  # not a directory that is full or read-only: the next write says what it is
            return
        self.emit_many([])

    async def refresh(self) -> RunState:
        """One bounded pass of every watcher (for `atomdeck status`), health and metrics included."""
        return await self.watchers.refresh()

    @property
    def prober(self) -> BarrierProber | None:
        return self.watchers.barrier.prober

    def redact(self, line: str) -> str:
        return redact_line(line, self._secrets)

    def emit_stage(self, name: str, stage: str, detail: str = "") -> bool:
        before = self.state.procs[name].stage
        self.emit(Event("proc.stage", name, stage, detail))
        return self.state.procs[name].stage != before

    def _on_line(self, name: str, raw: str) -> None:
        """A log line of a process, as its log watcher takes it (tests feed lines here)."""
        self.watchers.logs.on_line(name, raw)

    async def _keep_going(self, what: str, factory, first_delay: float = 1.0) -> None:
        await keep_going(self.emit, what, factory, first_delay)

    # ---------------------------------------------------------------------------------------- creation
    @classmethod
    async def launch(cls, ws: Workspace, a: Assessment, job_id: str | None = None,
                     progress: Callable[[str], None] | None = None,
                     on_run: Callable[[Run], Awaitable[None]] | None = None) -> Run:
        """Start every process of an assessed plan. Refuses a plan with errors. `progress(text)` hears
        what the launch does meanwhile: the ports check, the allocation's wait, pre-flight, the count started.
        `on_run(run)` is awaited once the run exists (its directory, its plan files, its processes pending) and
        before the first process starts: a console shows the run while its processes start, and draws it
        before they take the machine's CPU."""
        plan = a.launchable()  # design: a plan without errors, or nothing is launched
        say = progress or (lambda _: None)
        await check_free(plan, a.processes, say)  # checks.py: no live run on the nodes, no port taken
        rd, meta = new_run_dir(plan, job_id)  # runfiles.py: run.json and the design's files
        launcher = make_launcher(plan.cluster, rd.id, str(rd.path), meta)  # launch/ chooses it
        launcher.on_progress = progress
        facts = await _prepare(launcher, rd, meta, plan, a.processes)  # pre-flight, the allocation
        plan = with_node_ips(plan, facts.get("node_ips"))  # design: the addresses the nodes gave at pre-flight
        if plan is not a.plan:
            a = replace(a, plan=plan)
        processes = render_for_run(plan, ws.catalog, rd.id, meta.get("job_id"), str(rd.path / "logs"),
                                   facts.get("nic", {}))  # design: every command as this run starts it
        write_plan_files(rd, a, processes)  # runfiles.py: plan.json, commands.sh
        run = cls(rd, plan.recipe, plan.cluster, plan, processes, launcher, fresh_state(rd.id, plan, processes))
        await run._start_processes(on_run)
        return run

    async def _start_processes(self, on_run: Callable[[Run], Awaitable[None]] | None) -> None:
        """The launch's last step: say the run is launching, hand it to `on_run`, start every process (each
        handle file written as its start is heard: a launch cut short records what it started), then say
        whether every start succeeded."""
        launcher, processes = self.launcher, list(self.processes.values())
        self.emit(Event("run", value="launching", detail=f"{self.plan.shape} on {self.plan.cluster.name}"))
        if on_run is not None:
            await on_run(self)
        launcher.on_started = self._heard_started  # each start shown as it is known, its handle file first
        try:
            started = await launcher.start_many(processes)
        except BaseException as e:  # cancelled (Ctrl-C, a console quit) or failed half-way: record what runs
            await self._launch_cut_short(e)
            raise
        for h in started:  # (a launcher that told none of them as they started)
            if not isinstance(h, BaseException):
                self._heard_started(h)
        if await self._all_saved():  # every start returned, then the cancellation came: the run says so all the same
            await self._launch_cut_short(asyncio.CancelledError())
            raise asyncio.CancelledError
        self.emit_many([Event("proc.stage", p.name, "failed", f"could not start: {h}")
                        for p, h in zip(processes, started) if isinstance(h, BaseException)])
        if any(p.stage == "failed" for p in self.state.procs.values()):
            self._set_status("failed")
        else:
            self.emit(Event("run", value="starting", detail=f"{len(processes)} processes started"))
            self.rd.update_meta(status="starting")  # `atomdeck runs` says so even when nobody watches it

    def _heard_started(self, h: ProcHandle) -> None:
        """A process of the launch known started: its handle file is written (in a thread, a batch at a time: 129
        of them held a console's loop ~0.35 s on a loaded machine), then its 'started' event is emitted, so that
        whoever is told it started (a teardown in another session) finds it by the file."""
        if h.name not in self.processes or h.name in self.handles:
            return
        self.handles[h.name] = h
        self._unsaved.append(h)
        if self._saving is None or self._saving.done():
            self._saving = asyncio.ensure_future(self._save_started())

    async def _save_started(self) -> None:
        loop = asyncio.get_running_loop()
        while self._unsaved:
            batch, self._unsaved = self._unsaved, []
            await loop.run_in_executor(None, self.rd.save_handles, batch)
            self.emit_many([Event("proc.started", h.name, detail=f"pid {h.pid} on {h.node}",
                                  data={"pid": h.pid, "node": h.node, "step": h.step}) for h in batch])

    async def _all_saved(self) -> bool:
        """Wait until every start heard has its file and its event, also if cancelled meanwhile (then True)."""
        cancelled = False
        while self._saving is not None and not self._saving.done():
            _, was = await outlive_cancel(self._saving)
            cancelled = cancelled or was
        if self._saving is not None and not self._saving.cancelled() and (e := self._saving.exception()):
            raise e  # (a handle file that could not be written: the launch says why)
        return cancelled

    async def _launch_cut_short(self, why: BaseException) -> None:
        """The launch stopped while its processes started: a handle file for each the launcher knows it started
        (`atomdeck down` stops the processes by them, and sweeps the nodes for any whose start never answered),
        their events, and the run marked failed, naming how to stop it. Outlives a second cancellation; a second
        Ctrl-C that kills this process leaves the sweep to find them."""
        for h in self.launcher.started_so_far():
            self._heard_started(h)
        cancelled = await self._all_saved()
        how = ("interrupted" if isinstance(why, (asyncio.CancelledError, KeyboardInterrupt))
               else f"stopped by an error ({why})")
        self._set_status("failed", f"the launch was {how} while its processes started: {len(self.handles)} of "
                                   f"{len(self.processes)} started and left running; stop them with "
                                   f"`atomdeck down {self.id}`")
        if cancelled:
            raise asyncio.CancelledError

    @classmethod
    def open(cls, run_id: str | None = None) -> Run:
        """Reattach to a run from its directory (any session, any console)."""
        rd = RunDir.find(run_id)
        meta = rd.meta()
        plan, processes = design_from_disk(rd, meta)
        recipe, cluster = plan.recipe, plan.cluster
        launcher = make_launcher(cluster, rd.id, str(rd.path), meta)
        state = replay(fresh_state(rd.id, plan, processes), rd.event_lines())
        run = cls(rd, recipe, cluster, plan, processes, launcher, state)
        run.stopping = state.status in ("stopping", "stopped", "dirty")
        run.check_storage()  # a full directory is said by any session, also one with nothing to write
        run.handles = {h.name: h for h in rd.handles()}
        try:
            run.offsets = {k: int(v) for k, v in rd.read_json("offsets.json").items()}
        except AtomdeckError:
            run.offsets = {}
        for name, h in run.handles.items():
            p = run.state.procs.get(name)
            if p is not None and not p.last_lines:
                local = h.log_path if h.launcher != "ssh" else str(rd.log_path(name))  # ssh: the local mirror
                p.last_lines.extend(read_last_lines(local, 20))
        return run

    @staticmethod
    def list() -> list[dict]:
        """Every run directory's summary, newest last."""
        out = []
        for rd in RunDir.all():
            try:
                m = rd.meta()
            except AtomdeckError:
                continue
            out.append({**m, "dir": str(rd.path)})
        return sorted(out, key=lambda m: m.get("created", 0))

    # ----------------------------------------------------------------------------------------- events
    def emit(self, e: Event) -> None:
        self.emit_many([e])

    def emit_many(self, events: builtins.list[Event]) -> None:
        """Apply each event in order; the ones that changed the state and are kept go to events.jsonl in one
        write (a launch's 129 'started' were 129 opens and writes in the loop), then the listeners hear each."""
        changed = [e for e in events if self.state.apply(e)]
        # (an action's step another session recorded and this one only saw in its record is not written again)
        self.rd.append_events([e for e in changed if e.kind in PERSIST and not e.data.get("seen")])
        news = self.rd.news(self.state)  # the directory could not take them (or takes them again): said once
        if news is not None and self.state.apply(news):
            self.rd.append_events([news])
            changed.append(news)
        if changed:
            self._changed.set()
            for e in changed:
                for fn in list(self.listeners):
                    fn(e)

    def expected_exit(self, name: str, pid: int | None = None) -> Intent | None:
        """The action (of any session) stopping this process (`pid`: that one) on purpose now, if one is."""
        return expected_exit(self.rd.path, name, pid)

    def adopt_from_disk(self) -> builtins.list[str]:
        """What other sessions' actions changed, read from the run directory: a worker added (the recorded
        design now has it: the plan, its command, its state), a process started again (its handle file). Returns
        the processes this session did not know."""
        new: builtins.list[str] = []
        meta = self.rd.meta()
        if (self.rd.path / "recipe.yaml").exists():
            try:
                plan, processes = design_from_disk(self.rd, meta)
            except AtomdeckError:
                plan, processes = self.plan, list(self.processes.values())
            for spec in processes:
                if spec.name not in self.processes:
                    self.plan = plan
                    self.processes[spec.name] = spec
                    new.append(spec.name)
                    if spec.name not in self.state.procs:
                        self.emit(added_event(plan, spec.name, seen=True))
        for h in self.rd.handles():
            if h.name in self.processes and (self.handles.get(h.name) is None or self.handles[h.name].pid != h.pid):
                self.handles[h.name] = h
        return new

    def intents(self) -> dict[str, Intent]:
        """Every action's record (running, ended, or cut short), by process."""
        return read_intents(self.rd.path)

    def saved_handle(self, name: str) -> ProcHandle | None:
        """The process's handle as its file says now (a restart by any session writes a new one)."""
        return self.rd.handle(name)

    def torn_down_elsewhere(self) -> bool:
        """Another session (a console, `atomdeck down`) is tearing this run down, or has."""
        if self.rd.teardown_in_progress():
            return True
        try:
            return self.rd.meta().get("status") in ("stopping", "stopped", "dirty")
        except AtomdeckError:
            return False

    def _set_status(self, status: str, detail: str | None = None) -> None:
        if detail is None:
            detail = diagnose(self.state).headline
        self.emit(Event("run", value=status, detail=detail))
        if status in ("serving", "degraded", "failed", "stopped", "dirty"):
            try:
                self.rd.update_meta(status=status, diagnosis=detail)
            except AtomdeckError:
                pass

    def _fail(self, why: str | None = None) -> None:
        if self.stopping or self.state.status in ("failed", "stopping", "stopped", "dirty"):
            return
        self._set_status("failed", why or diagnose(self.state).headline)

    def save_offsets(self) -> None:
        if self.offsets:
            try:
                self.rd.write_json("offsets.json", self.offsets)
            except OSError:
                pass

    # ------------------------------------------------------------------------------------------ logs
    def local_log(self, name: str) -> str:
        """The log file on this machine (the node's own file for local/Slurm; the mirror for SSH)."""
        h = self.handles.get(name)
        if h is None:
            raise AtomdeckError(f"run {self.id} has no process {name}; it has: {', '.join(self.processes)}")
        return h.log_path if h.launcher != "ssh" else str(self.rd.log_path(name))

    async def log_lines(self, name: str, last: int | None = None) -> builtins.list[str]:  # Run.list shadows list
        """A process's whole log (or its last lines), read from where it lives, redacted."""
        return [line for _, line in await self.log_records(name, last)]

    async def log_records(self, name: str, last: int | None = None) -> builtins.list[tuple[int, str]]:
        """As log_lines, each line with the byte offset just after it (where to resume)."""
        h = self.handles.get(name)
        if h is None:
            raise AtomdeckError(f"run {self.id} has no process {name}; it has: {', '.join(self.processes)}")
        # to the end of the file, however long the connection takes (never "until quiet")
        lines = [item async for item in self.launcher.read_log(h, 0, partial=True)]
        lines = lines[-last:] if last else lines
        return [(off, redact_line(x, self._secrets)) for off, x in lines]

    async def follow_records(self, name: str, start: int | None = None):
        """(offset after the line, line) for every line from byte `start` on (None: from the current end)."""
        h = self.handles.get(name)
        if h is None:
            raise AtomdeckError(f"run {self.id} has no process {name}; it has: {', '.join(self.processes)}")
        if start is None:
            import os

            start = os.path.getsize(h.log_path) if h.launcher != "ssh" and os.path.exists(h.log_path) else 0
        async for off, line in self.launcher.tail(h, start):
            yield off, redact_line(line, self._secrets)

    async def follow_log(self, name: str, last: int = 0):
        """The last `last` lines, then every new line as it arrives (redacted)."""
        h = self.handles.get(name)
        if h is None:
            raise AtomdeckError(f"run {self.id} has no process {name}; it has: {', '.join(self.processes)}")
        start = 0
        if h.launcher != "ssh":
            import os

            for line in read_last_lines(h.log_path, last) if last else []:
                yield redact_line(line, self._secrets)
            start = os.path.getsize(h.log_path) if os.path.exists(h.log_path) else 0
        async for _, line in self.launcher.tail(h, start):
            yield redact_line(line, self._secrets)

    # ------------------------------------------------------------------------------------------ teardown
    async def teardown(self, grace: float | None = None) -> TeardownReport:
        """Stop every process (all at once), SIGKILL after the grace period, then verify: every process
        gone, every port closed. Idempotent; safe when part of the run already died (teardown.py)."""
        return await teardown_run(self, DEFAULT_GRACE if grace is None else grace)

    async def close(self) -> None:
        self.save_offsets()
        self.unsaved_words = self.rd.close()  # what still waits goes where the next session finds it
        await self.launcher.close()


async def _prepare(launcher: Launcher, rd: RunDir, meta: dict, plan: Plan, processes: list[ProcessSpec]) -> dict:
    """The launcher's preparation (pre-flight on the nodes, a Slurm allocation): its facts go into run.json; a
    preparation that fails or is cancelled marks the run failed, saying why, and closes the launcher."""
    try:
        facts = await launcher.prepare(plan, processes)
    except BaseException as e:
        rd.update_meta(status="failed", diagnosis=f"could not prepare the launch: {e}")
        await launcher.close()
        raise
    meta.update(facts)
    rd.write_json("run.json", meta)
    return facts
