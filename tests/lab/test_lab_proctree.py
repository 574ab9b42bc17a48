"""ATOM's process tree on the lab, over Slurm and over ssh (issue 39): a worker is a server, an EngineCore and a
process per TP rank (sim/proctree.py). At the pin a SIGKILLed server leaves its EngineCore and ranks running
(ROCm/ATOM #1511), one of them here outside its process group: teardown ends every one of them; a rank that dies
fails its worker with the rank named."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.launch.procfs import alive
from atomdeck.core.run.run import Run

from tests.leftovers import open_ports

from .runhelpers import engine_pid, run_pids, serve, teardown, up, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _descendants(root: int) -> dict[int, str]:
    """pid -> comm of `root`'s live descendants (the lab's nodes share this machine's process table)."""
    kids: dict[int, list[int]] = {}
    comm: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                comm[int(entry.name)] = (entry / "comm").read_text().strip()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if fields[0] not in "ZX":
                kids.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = {}, list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        out[pid] = comm.get(pid, "")
        todo += kids.get(pid, [])
    return out


@pytest.mark.parametrize("cluster", ["lab", "lab-ssh"])
def test_the_pins_orphans_outside_their_group_are_ended_by_down(lab, cluster):
    ws = workspace("demo-1p1d", cluster, decode__env={"ATOMSIM_ATOM_REV": "pin", "ATOMSIM_RANK_SETSID": "TP5"})
    run, state = serve(ws)
    try:
        assert state.status == "serving", state.diagnosis
        node = run.plan.endpoint("decode-0").node
        server = engine_pid(lab, node, run.id, "decode-0")
        tree = _descendants(server)
        assert len(tree) == 9, tree  # the EngineCore and its 8 ranks, TP5 among them in a group of its own
        assert sum(os.getpgid(p) != os.getpgid(server) for p in tree) == 1
        os.kill(server, signal.SIGKILL)  # the server dies (an OOM kill, say); the pin leaves its tree running
        time.sleep(1.0)
        assert all(alive(p) for p in tree), "the pin's EngineCore and ranks outlive their server"
        if cluster == "lab-ssh":  # (on Slurm a second launch's holding job waits for the nodes: Slurm's rule)
            ws2 = workspace("demo-1p1d", cluster)
            with pytest.raises(AtomdeckError) as refused:
                asyncio.run(Run.launch(ws2, ws2.assess([n.name for n in run.plan.nodes])))
            assert "in use" in str(refused.value) and run.id in str(refused.value), str(refused.value)
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert [p for p in tree if alive(p)] == [], {p: c for p, c in tree.items() if alive(p)}
    assert run_pids(lab, run.id) == {} and open_ports(run) == []


@pytest.mark.parametrize("cluster", ["lab", "lab-ssh"])
def test_a_dead_rank_fails_its_worker_and_is_named(lab, cluster):
    ws = workspace("demo-1p1d", cluster, decode__env={"ATOMSIM_CRASH_AFTER_SERVED": "1", "ATOMSIM_CRASH_RANK": "TP3"})

    async def go():
        run, state = await up(ws)
        try:
            assert state.status == "serving", state.diagnosis
            return run, await run.watch(until=lambda s: s.status == "failed", timeout=30)
        finally:
            await run.close()

    run, state = asyncio.run(go())
    try:
        assert state.procs["decode-0"].exit_code == 1, state.procs["decode-0"]
        assert ", its TP rank 3 of 8 (ModelRunner3/8) died: killed by SIGKILL; last: " in state.diagnosis, \
            state.diagnosis
    finally:
        assert teardown(run.id).clean
    assert run_pids(lab, run.id) == {}
