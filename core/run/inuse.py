"""Before a launch: refuse nodes that another run launched from this machine still uses.

The ports check sees only ports already bound, and a real ATOM worker binds its server port only once its
weights are loaded, minutes after it started: a second launch onto the same nodes meanwhile passed the check and
its workers fought the first run's for the GPUs and ports. The run directories say which runs may be live and on
which nodes; whether they are is asked, not trusted (a run nobody watched keeps the last status it was given):
the marker every process of a run carries in its environment (ATOMDECK_RUN=RUN:NAME) is looked for, on this
machine in /proc, over SSH by one scan per wanted node (one command whatever the number of runs, and a process
whose launch was cut short before its handle was written is found too). Slurm runs are left to Slurm: a second
holding job waits until the nodes are free."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path

from ..config.errors import AtomdeckError
from ..config.text import listed
from ..design.plan import Plan
from ..launch.base import Launcher, script
from ..launch.procfs import alive, runs_marked
from .diagnose import name_ranges
from .rundir import RunDir

# every status but `stopped` (verified clean): a failed run leaves its processes for inspection, a launch cut short
# its started ones, a teardown that was not clean (`dirty`) what it could not stop
MAYBE_LIVE = ("launching", "starting", "serving", "degraded", "failed", "stopping", "dirty")
SCAN_TIMEOUT_S = 10.0
MARKED_SCRIPT = script("marked")


async def check_nodes_free(plan: Plan, launcher: Callable[[], Launcher]) -> None:
    """Raise naming the run, the nodes and how to stop it when a live run uses any node of `plan`. `launcher()`
    makes a launcher of the plan's cluster, to scan its nodes (made only when a run may be live there)."""
    kind = plan.cluster.launcher
    if kind == "slurm":
        return
    wanted = set(plan.selection.all())
    candidates = await asyncio.to_thread(_candidates, wanted, kind)
    if not candidates:
        return
    if kind == "local":
        marked = await asyncio.to_thread(runs_marked)
        alive_on = [sorted(marked.get(rd.id, ())) for rd, _, _, _ in candidates]
    else:
        scans = await _scan(launcher(), sorted(set().union(*(nodes for _, _, nodes, _ in candidates))))
        alive_on = [sorted({name for node in nodes for run_id, name in scans.get(node, ())
                            if run_id == rd.id and on.get(name, node) == node})
                    for rd, _, nodes, on in candidates]
    busy: list[str] = []
    for (rd, meta, nodes, _), names in zip(candidates, alive_on):
        names = names or _launching(meta)
        if names:
            busy.append(f"{name_ranges(sorted(nodes))} by run {rd.id} ({meta.get('status')}: {listed(names, 6)}); "
                        f"stop it first with `atomdeck down {rd.id}`")
    if busy:
        raise AtomdeckError(f"node(s) in use, nothing was launched: {'; '.join(busy)}. Or pick other nodes")


def _candidates(wanted: set[str], kind: str) -> list[tuple[RunDir, dict, set[str], dict[str, str]]]:
    """(run directory, its run.json, the wanted nodes it holds, its processes' nodes by name) of every run of
    this launcher that may be live on them."""
    out = []
    for rd in RunDir.all():
        try:
            meta = rd.meta()
            if meta.get("status") not in MAYBE_LIVE or meta.get("launcher") != kind:
                continue
            sel = rd.read_json("selection.json")
        except (AtomdeckError, OSError, ValueError):
            continue
        nodes = wanted & {*sel.get("prefill", ()), *sel.get("decode", ()), *sel.get("workers", ())}
        if nodes:
            try:  # (where each process runs: a scan of a node is told apart from its neighbours' when nodes
                # share one process table, as network namespaces on one host do)
                on = {p["name"]: p["node"] for p in rd.read_json("plan.json").get("processes", ())}
            except (AtomdeckError, KeyError, TypeError):
                on = {}
            out.append((rd, meta, nodes, on))
    return out


async def _scan(launcher: Launcher, nodes: list[str]) -> dict[str, set[tuple[str, str]]]:
    """node -> the (run id, process name) markers of its live processes, one command per node over the new
    launch's own connections; a node that does not answer within SCAN_TIMEOUT_S is left out (unknown, not busy:
    pre-flight reports a node it cannot reach)."""
    out: dict[str, set[tuple[str, str]]] = {}

    async def one(node: str) -> None:
        res = await launcher.node_run(node, ["sh", "-c", MARKED_SCRIPT, "marked"], timeout=SCAN_TIMEOUT_S)
        if res.ok:
            marks = (line.partition(":ATOMDECK_RUN=")[2] for line in res.stdout.splitlines())
            out[node] = {(run_id, name) for run_id, _, name in (m.partition(":") for m in marks if m)}

    try:
        async with asyncio.timeout(SCAN_TIMEOUT_S):
            await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True)
    except TimeoutError:
        pass
    finally:
        with contextlib.suppress(Exception):  # (closing connections must not hide the answer)
            await launcher.close()
    return out


def _launching(meta: dict) -> list[str]:
    """A run still launching from this machine: the atomdeck process that launches it is alive."""
    pid = meta.get("console_pid")
    if meta.get("status") != "launching" or meta.get("console_host") != socket.gethostname() or not pid:
        return []
    if pid == os.getpid() or not alive(pid):
        return []
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [f"being launched by atomdeck (pid {pid})"] if b"atomdeck" in cmdline else []
