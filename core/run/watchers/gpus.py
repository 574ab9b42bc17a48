"""The run's GPUs: every few seconds each node's VRAM, activity, power and temperature (core/remote/gpus.py, through
the launcher's command on the node), folded in as "gpus" events. A GPU that holds memory while no live process of
this run uses it is flagged ("another job, or an orphan"), and its holders are listed by PID (amd-smi process) once
per change. At teardown, `verify_released` says whether every GPU is back to its idle VRAM, naming what still holds
memory (ROCm/ATOM #1511, sglang #23627: processes that escaped the job kept 100-275 GB per GPU).

Cheap at 128 nodes: one short command per node per pass, at most FAN_OUT at once, and a pass every
max(EVERY_S, nodes / NODES_PER_S) seconds (16 s at 128 nodes); the process list only when a flag appears.
"""

from __future__ import annotations

import asyncio

from ...config.paths import sim_shim_dir
from ...remote.gpus import NodeGpus, read, read_flagged
from ...remote.shell import low_priority
from ..events import Event
from ..gpustate import expected_gpus, gb, gpus_data
from .base import RunHost

EVERY_S = 5.0
NODES_PER_S = 8.0
FAN_OUT = 8
RELEASE_TRIES = 4  # teardown: the driver frees a dead process's VRAM at once; a few reads 1 s apart cover a lag


class GpuWatcher:
    def __init__(self, run: RunHost, group=None):
        self.run = run
        self._named: dict[str, tuple[int, ...]] = {}  # node -> the flagged GPUs whose holders were listed
        self._holders: dict[str, list[tuple[int, int, str, int]]] = {}

    # -- what to run where ---------------------------------------------------------------------------------------
    def nodes(self) -> list[str]:
        return list(self.run.plan.selection.all())

    def _host(self, node: str) -> str:
        plan = self.run.plan
        for e in plan.endpoints:
            if e.node == node:
                return e.host
        if plan.router.node == node:
            return plan.router.host
        try:
            return plan.node(node).addr or node
        except KeyError:
            return node

    async def read(self, node: str, procs: bool = False, low: bool = True) -> NodeGpus:
        """One node's GPUs. On a simulated cluster the simulator's amd-smi comes first on the path and learns the
        node's address (the local demo's nodes share one network namespace). `low`: below the engines and the
        console (low_priority: the periodic readings, 8 a second at 128 nodes, had each a session's share of the
        console's machine on the local launcher); the teardown's reads, which the operator waits for, are not: at
        SCHED_IDLE behind 1,290 exiting simulator processes they made a 128-node teardown 58 s instead of 23."""
        sim = self.run.plan.cluster.simulator.enabled
        launcher = self.run.launcher
        prefix = low_priority(launcher.kind) if low else []

        async def node_run(argv: list[str], timeout: float):
            return await launcher.node_run(node, [*prefix, *argv], timeout)

        return await read(node, node_run, extra_path=str(sim_shim_dir() / "bin") if sim else "", procs=procs,
                          node_ip=self._host(node) if sim else "")

    def foreign(self, ng: NodeGpus) -> list[int]:
        """GPUs that hold memory with no live process of this run on them."""
        procs = self.run.state.procs
        mine = {i for name, (node, idx) in expected_gpus(self.run.plan).items()
                if node == ng.node and procs.get(name) is not None and procs[name].alive is True for i in idx}
        return [g.index for g in ng.gpus if g.busy and g.index not in mine]

    def report(self, ng: NodeGpus, foreign: list[int]) -> None:
        holders = self._holders.get(ng.node, []) if foreign else []
        if ng.procs is not None:
            holders = [(p.gpu, p.pid, p.name, p.vram_mb) for p in ng.procs]
            self._holders[ng.node] = holders
        owners = {name: idx for name, (node, idx) in expected_gpus(self.run.plan).items() if node == ng.node}
        self.run.emit(Event("gpus", ng.node, ng.tool, ng.error, gpus_data(ng, foreign, holders, owners)))

    async def check(self, node: str) -> NodeGpus:
        """Read a node, list its holders when a GPU is newly flagged, and report."""
        named = self._named.get(node)

        async def read_fn(procs: bool) -> NodeGpus:
            return await self.read(node, procs=procs)

        ng, foreign, listed = await read_flagged(read_fn, self.foreign, lambda flags: tuple(flags) != named)
        if listed:
            self._named[node] = tuple(foreign)
        elif not foreign:
            self._named.pop(node, None)
        self.report(ng, foreign)
        return ng

    async def poll_once(self, nodes: list[str] | None = None) -> None:
        sem = asyncio.Semaphore(FAN_OUT)

        async def one(node: str) -> None:
            async with sem:
                await self.check(node)

        await asyncio.gather(*(one(n) for n in (nodes or self.nodes())))

    async def poll(self) -> None:
        nodes = self.nodes()
        every = max(EVERY_S, len(nodes) / NODES_PER_S)
        while True:
            await self.poll_once(nodes)
            await asyncio.sleep(every)

    # -- teardown ------------------------------------------------------------------------------------------------
    async def verify_released(self, tries: int = RELEASE_TRIES) -> tuple[bool, bool, str]:
        """After every process of the run was stopped: is every GPU of its nodes back to idle VRAM? Returns (ok,
        whether any node could be read, the line to show). A GPU that still holds memory is named with what holds it
        (PID and name, from amd-smi); a node whose GPUs cannot be read is said, and does not make the teardown
        unclean."""
        nodes = self.nodes()
        readings: dict[str, NodeGpus] = {}
        todo = list(nodes)
        sem = asyncio.Semaphore(FAN_OUT)

        async def one(node: str, procs: bool) -> NodeGpus:
            async with sem:
                return await self.read(node, procs=procs, low=False)

        for attempt in range(tries):
            last = attempt == tries - 1  # the last read lists the holders by PID
            got = await asyncio.gather(*(one(n, last) for n in todo))
            readings.update({g.node: g for g in got})
            todo = [g.node for g in got if any(x.busy for x in g.gpus)]
            if not todo:
                break
            if not last:
                await asyncio.sleep(1.0)
        for ng in readings.values():
            self.report(ng, [g.index for g in ng.gpus if g.busy])
        held, unread = [], []
        for node in nodes:
            ng = readings[node]
            if ng.error and not ng.gpus:
                unread.append(f"{node} ({ng.error})")
                continue
            for g in ng.gpus:
                if not g.busy:
                    continue
                who = [p for p in (ng.procs or []) if p.gpu == g.index]
                named = ", ".join(f"pid {p.pid} {p.name}".rstrip() for p in who) or "no process listed"
                held.append(f"GPU {g.index} of {node} holds {gb(g.used_mb)} ({named})")
        count = sum(len(ng.gpus) for ng in readings.values())
        read_any = len(unread) < len(nodes)
        if held:
            return False, read_any, f"VRAM not back to baseline: {'; '.join(held[:8])}" + \
                (f"; and {len(held) - 8} more" if len(held) > 8 else "")
        if not read_any:
            return True, False, f"GPU memory not checked: {unread[0]}" + (f" (and {len(unread) - 1} more nodes)"
                                                                   if len(unread) > 1 else "")
        line = f"VRAM back to baseline on every GPU ({count} GPUs on {len(nodes) - len(unread)} nodes)"
        return True, True, line + (f"; not read on {', '.join(unread[:3])}" if unread else "")

    async def check_released(self, tries: int = RELEASE_TRIES) -> tuple[bool, bool, str]:
        """verify_released that never raises: the GPU check must never stop a teardown."""
        try:
            return await self.verify_released(tries)
        except Exception as e:
            return True, False, f"GPU memory not checked: {e}"

    async def read_again(self, before: tuple[bool, bool, str]) -> tuple[bool, bool, str]:
        """Memory held in `before`, read again after a sweep ended the run's leftovers: the new reading, or the old
        one where the nodes cannot be read any more."""
        again = await self.check_released(tries=2)
        if not again[1]:
            return before
        if again[0]:  # the orphans the sweep found by their marker: named, since nothing else ended them
            held = before[2].removeprefix("VRAM not back to baseline: ")
            return True, True, again[2] + f", once the sweep ended what held it: {held}"
        return again

    async def after_release(self, before: tuple[bool, bool, str]) -> tuple[bool, str]:
        """The teardown's GPU line (also a "teardown" event). Memory still held before the release is read again
        after it (the release sweeps the run's marked leftovers); where the nodes cannot be reached any more (a
        cancelled Slurm job), the reading from before stands."""
        ok, _, line = before
        if not ok:
            ok, _, line = await self.read_again(before)
        self.run.emit(Event("teardown", "gpus", "baseline" if ok else "held", line))
        return ok, line
