"""Tearing a run down: every process at once, SIGTERM then SIGKILL after the grace period, then verified: every
process gone (its whole tree), every port closed, the allocation released. `Run.teardown` calls it."""

from __future__ import annotations

import asyncio
import builtins
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..launch.base import ProcHandle, StopReport
from ..remote.probes import tcp_probe
from .events import Event

if TYPE_CHECKING:
    from ..design.commands import ProcessSpec
    from ..design.plan import Plan
    from ..launch.base import Launcher
    from .events import RunState
    from .rundir import RunDir


class Run(Protocol):
    """What a teardown uses of its run (run.py's Run)."""

    id: str
    rd: RunDir
    plan: Plan
    state: RunState
    launcher: Launcher
    handles: dict[str, ProcHandle]
    processes: dict[str, ProcessSpec]
    stopping: bool
    watchers: Any  # (its GPU watcher reads the GPUs before and after the release)

    def emit(self, e: Event) -> None: ...

    def _set_status(self, status: str, detail: str | None = None) -> None: ...

    def adopt_from_disk(self) -> builtins.list[str]: ...


@dataclass
class TeardownReport:
    clean: bool
    processes: list[StopReport] = field(default_factory=list)
    open_ports: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    gpus: str = ""  # "VRAM back to baseline on every GPU (...)", or what still holds memory (watchers/gpus.py)

    def lines(self) -> list[str]:
        out = [f"{r.node:16} {r.name:12} {'gone' if r.ok else 'STILL RUNNING'}: {r.detail}" for r in self.processes]
        out += [f"released: {x}" for x in self.released]
        out += [f"port still open: {p}" for p in self.open_ports]
        out += [self.gpus] if self.gpus else []
        out.append("verified clean: every process gone, every port closed" if self.clean else "NOT clean")
        return out

    def to_json(self) -> dict:
        return {"clean": self.clean, "processes": [asdict(r) for r in self.processes], "open_ports": self.open_ports,
                "released": self.released, "gpus": self.gpus}



async def teardown_run(self: Run, grace: float) -> TeardownReport:
    """Stop every process (all at once), SIGKILL after the grace period, then verify: every process
    gone, every port closed. Idempotent; safe when part of the run already died."""
    with self.rd.lock():
        self.stopping = True
        self.adopt_from_disk()  # a process another session restarted or added is stopped too
        self.emit(Event("run", value="stopping", detail=f"grace {grace:g}s"))
        self.rd.update_meta(status="stopping")

        async def stop_one(h: ProcHandle) -> StopReport:
            self.emit(Event("teardown", h.name, "stopping", f"on {h.node}"))
            try:
                (rep,) = await self.launcher.stop([h], grace)
            except Exception as e:  # one unreachable node must not stop the teardown of the others
                rep = StopReport(h.name, h.node, False, f"not verified: could not stop it on {h.node}: {e}; "
                                 f"run `atomdeck down {self.id}` again once {h.node} answers")
            self.emit(Event("teardown", h.name, "gone" if rep.ok else "left", rep.detail))
            if rep.ok and self.state.procs.get(h.name) and self.state.procs[h.name].alive is not False:
                self.emit(Event("proc.exit", h.name, "stopped", rep.detail))
            return rep

        try:
            reports = list(await asyncio.gather(*(stop_one(h) for h in self.handles.values())))
            problems: list[str] = []
            containers: dict[str, list[str]] = {}
            for p in self.processes.values():
                if p.container:
                    containers.setdefault(p.node, []).append(p.container)
            if containers:  # before the allocation goes: Slurm reaches the nodes through it
                for done, line in await self.launcher.remove_containers(containers):
                    self.emit(Event("teardown", "containers", "removed" if done else "left", line))
                    if not done:
                        problems.append(line)
            before = await self.watchers.gpus.check_released()  # while the allocation still reaches the nodes
            early: builtins.list[str] = []
            if not before[0]:  # held: by leftovers no handle knew (a launch cut short)? swept while still readable
                swept = await self.launcher.sweep_leftovers(sorted({n.name for n in self.plan.nodes}))
                if swept:
                    early.append(f"swept leftovers: {', '.join(swept)}")
                    before = await self.watchers.gpus.read_again(before)
            try:
                released = await self.launcher.release(list(self.plan.selection.all()))
            except Exception as e:
                released = []
                problems.append(f"the allocation was not released: {e}")
                self.emit(Event("teardown", "allocation", "left", problems[-1]))
            gpus_ok, gpus_line = await self.watchers.gpus.after_release(before)
            if not gpus_ok:
                problems.append(gpus_line)
            report = await _verify_stopped(self, reports, early + released, "; ".join(problems))
            report.gpus = gpus_line
            return report
        except BaseException:  # interrupted or failed half-way: never leave the run "stopping"
            self._set_status("dirty", "teardown interrupted; run `atomdeck down` again")
            raise

async def _verify_stopped(self: Run, reports: builtins.list[StopReport], released: builtins.list[str],
                          problems: str) -> TeardownReport:
    for r in released:
        self.emit(Event("teardown", "allocation", "released", r))
    ports = sorted({(p.node, p.host, port) for p in self.processes.values() for port in p.ports})
    results = await asyncio.gather(*(tcp_probe(host, port, 1.0, self.launcher.probe_runner(node))
                                     for node, host, port in ports))
    still_open = [f"{node}:{port}" for (node, _, port), res in zip(ports, results) if res == "open"]
    seen = {(node, port): res for (node, _, port), res in zip(ports, results)}
    for c in self.state.cells.values():  # the barrier grid shows the ports closing
        if (c.node, c.port) in seen:
            self.emit(Event("cell", c.key, seen[(c.node, c.port)], data={"node": c.node, "port": c.port}))
    for key in still_open:
        self.emit(Event("teardown", key, "open", "port still accepting connections"))
    clean = all(r.ok for r in reports) and not still_open and not problems
    self._set_status("stopped" if clean else "dirty",
                     "verified clean" if clean else f"not clean: {len(still_open)} port(s) open, "
                     f"{sum(not r.ok for r in reports)} process(es) not verified gone"
                     + (f"; {problems}" if problems else ""))
    self.rd.update_meta(stopped=time.time())
    return TeardownReport(clean, reports, still_open, released)

