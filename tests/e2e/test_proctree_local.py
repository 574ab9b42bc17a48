"""The run engine meets ATOM's real process tree on the local launcher (issue 39): every worker is a server, an
EngineCore and a process per TP rank (sim/proctree.py). Teardown ends all of them, also the pin's orphans
(#1511: a SIGKILLed server leaves its EngineCore and ranks running) and a rank outside its process group; a rank
that dies fails its worker with the rank named; the orphans keep the nodes in use for a new launch."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.launch.procfs import alive, scan_trees, title
from atomdeck.core.run.run import Run

from tests.leftovers import gone

from .conftest import workspace

pytestmark = pytest.mark.slow


def _serve(ws, runs):
    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        return run
    return asyncio.run(go())


def _tree(run: Run, name: str) -> dict[int, str]:
    """pid -> title of every live process of the named process's tree (its supervisor's group and below)."""
    pgid = run.handles[name].pid
    return {p: title(p) for p in scan_trees([pgid])[pgid]}


def _wait(cond, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_every_rank_is_seen_and_ended_by_down(runs):
    run = _serve(workspace("demo-1p1d"), runs)
    trees = {n: _tree(run, n) for n in ("prefill-0", "decode-0")}
    for tree in trees.values():  # the supervisor (sh), the server, its EngineCore and 8 ranks
        assert sorted(t for t in tree.values() if t.startswith("ATOM::")) == \
            sorted(["ATOM::EngineCor", *(f"ATOM::TP{r}" for r in range(8))]), tree
    report = asyncio.run(run.teardown(grace=5))
    assert report.clean, report.lines()
    left = [(p, t) for tree in trees.values() for p, t in tree.items() if alive(p)]
    assert left == [] and gone(run) == []


def test_a_dead_rank_fails_its_worker_and_is_named(runs):
    ws = workspace(decode__env={"ATOMSIM_CRASH_AFTER_SERVED": "1", "ATOMSIM_CRASH_RANK": "TP3"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        return run, await run.watch(until=lambda s: s.status == "failed", timeout=20)

    run, state = asyncio.run(go())
    assert state.procs["decode-0"].exit_code == 1
    assert state.diagnosis.startswith("decode-0 on demo-n02 exited 1, its TP rank 3 of 8 (ModelRunner3/8) died: "
                                      "killed by SIGKILL; last: "), state.diagnosis
    assert asyncio.run(Run.open(run.id).teardown(grace=2)).clean
    assert gone(run) == []


def test_the_pins_orphans_and_a_rank_outside_its_group_keep_the_nodes_busy_and_down_ends_them(runs):
    """At the pin there is no orphan reaping: SIGKILL the decode's supervisor and server (an OOM kill of the
    server, say) and its EngineCore and 8 ranks run on, one of them (TP5) outside the process group."""
    ws = workspace(decode__env={"ATOMSIM_ATOM_REV": "pin", "ATOMSIM_RANK_SETSID": "TP5"})
    run = _serve(ws, runs)
    tree = _tree(run, "decode-0")
    assert len(tree) == 11, tree  # supervisor, server, EngineCore, 8 ranks (TP5 found below its EngineCore)
    sup = run.handles["decode-0"].pid
    server = next(p for p in tree if _parent(p) == sup)
    for pid in (sup, server):
        os.kill(pid, signal.SIGKILL)
    orphans = [p for p in tree if p not in (sup, server)]
    _wait(lambda: not alive(server), "the server to die")
    time.sleep(0.5)
    assert all(alive(p) for p in orphans), "the pin's EngineCore and ranks outlive their server"

    # a new launch onto the same nodes is refused while the orphans live (they hold the GPUs on a real node)
    with pytest.raises(AtomdeckError) as refused:
        asyncio.run(Run.launch(workspace(), workspace().assess()))
    assert "in use" in str(refused.value) and run.id in str(refused.value), str(refused.value)

    report = asyncio.run(Run.open(run.id).teardown(grace=2))
    assert report.clean, report.lines()
    assert [p for p in orphans if alive(p)] == [] and gone(run) == []


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    return int(data[data.rfind(")") + 2:].split()[1])
