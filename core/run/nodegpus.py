"""The GPUs of a cluster's nodes while no run of this console holds them: what an operator reads before picking nodes
(the Nodes view's VRAM column, `atomdeck nodes --gpus`). Each node is read as a run's GPU watcher reads it
(core/remote/gpus.py: amd-smi, rocm-smi as the fallback), through what reaches a node without a job: this machine
for the local launcher (the simulator's amd-smi on a simulated cluster), SSH for the ssh launcher. A Slurm cluster's
nodes are reached only inside a job: their GPUs are read by a run's pre-flight and its watcher, and this says so.

With no run here, every GPU that holds memory is flagged ("8/8 GPUs hold 275 GB: another job, or an orphan") and
its holders are listed by PID (amd-smi process), as the watcher does for memory no process of its run holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from ..config.cluster import Cluster
from ..config.errors import AtomdeckError
from ..config.paths import sim_shim_dir
from ..remote.gpus import NodeGpus, read, read_flagged
from ..remote.shell import LocalRunner, Result, Runner, low_priority
from .gpustate import NodeGpuState, gpus_data

FAN_OUT = 8  # nodes read at once (as the watcher: one short command per node)
TIMEOUT_S = 20.0
SLURM_NOTE = "GPUs not read: Slurm's nodes are reached only inside a job (a launch's pre-flight reads them)"


def readable(cluster: Cluster) -> str:
    """'' when this cluster's nodes can be read without a run, else why not (the note to show)."""
    return SLURM_NOTE if cluster.launcher == "slurm" else ""


async def read_node(cluster: Cluster, node: str, addr: str = "") -> NodeGpuState:
    """One node's GPUs, with every GPU holding memory flagged; never raises (an unreachable node is an answer)."""
    sim = cluster.simulator.enabled
    if cluster.launcher == "local":
        runner: Runner = LocalRunner()
    else:
        from ..remote.ssh.runner import ssh_runner_for_node

        try:
            runner = ssh_runner_for_node(cluster, node)
        except AtomdeckError as e:
            return NodeGpuState(node, error=f"could not reach {node}: {e}", since=time.time())

    async def node_run(argv: list[str], timeout: float) -> Result:  # below the engines and the console
        return await runner.run([*low_priority(cluster.launcher), *argv], timeout=timeout)

    extra = str(sim_shim_dir() / "bin") if sim else ""
    ip = (addr or node) if sim else ""
    async def read_fn(procs: bool) -> NodeGpus:
        return await read(node, node_run, extra_path=extra, procs=procs, node_ip=ip, timeout=TIMEOUT_S)

    try:  # (no run here: every GPU holding memory is flagged)
        ng, held, _ = await read_flagged(read_fn, lambda ng: [g.index for g in ng.gpus if g.busy])
    finally:
        await runner.close()
    holders = [(p.gpu, p.pid, p.name, p.vram_mb) for p in ng.procs or []]
    return NodeGpuState.from_event(node, ng.tool, ng.error, gpus_data(ng, held, holders, {}), time.time())


async def read_nodes(cluster: Cluster, nodes: Iterable[tuple[str, str]], fan_out: int = FAN_OUT
                     ) -> tuple[dict[str, NodeGpuState], str]:
    """(node -> its GPUs, a note) for (name, address) pairs, at most `fan_out` at once; on Slurm nothing and why."""
    note = readable(cluster)
    if note:
        return {}, note
    gate = asyncio.Semaphore(fan_out)

    async def one(name: str, addr: str) -> NodeGpuState:
        async with gate:
            return await read_node(cluster, name, addr)

    found = await asyncio.gather(*(one(n, a) for n, a in nodes))
    return {s.node: s for s in found}, ""
