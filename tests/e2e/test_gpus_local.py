"""GPU telemetry on the local demo cluster (issue 42): the simulator's amd-smi follows the run's TP ranks, the run
shows each worker's GPUs while it serves, flags GPUs held by no live process of the run (the pin's orphans after a
SIGKILLed server, ROCm/ATOM #1511), and teardown ends with the VRAM back to baseline, naming the orphan's PID."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from atomdeck.core.launch.procfs import alive, scan_trees, title
from atomdeck.core.run.gpustate import process_gpus
from atomdeck.core.run.run import Run

from .conftest import workspace

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _gpu_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ATOMSIM_GPU_DIR", str(tmp_path / "gpus"))  # the workers and the stand-in share it


def _serve(ws, runs) -> Run:
    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        return run
    return asyncio.run(go())


def test_a_runs_gpus_hold_vram_while_serving_and_return_to_baseline_after_down(runs):
    run = _serve(workspace(), runs)
    asyncio.run(run.watchers.gpus.poll_once())
    s = run.state
    for name in ("prefill-0", "decode-0"):
        views = process_gpus(run.plan, s.gpus, name)
        assert len(views) == 8 and all(v.busy for v in views), (name, views)
        argv = run.processes[name].argv
        util = float(argv[argv.index("--gpu-memory-utilization") + 1])  # of 288 GiB per GPU
        assert all(v.used_mb == 282 + int(294912 * util) for v in views), views
    assert not any(ns.foreign for ns in s.gpus.values()), {n: ns.flag() for n, ns in s.gpus.items()}
    report = asyncio.run(Run.open(run.id).teardown(grace=2))
    assert report.clean, report.lines()
    assert report.gpus.startswith("VRAM back to baseline on every GPU"), report.gpus


def test_an_orphan_at_the_pin_is_flagged_while_it_holds_vram_and_named_with_its_pid_at_teardown(runs):
    """At the pin, SIGKILL the decode's supervisor, server and EngineCore: its TP5 rank, which left the process
    group (ATOMSIM_RANK_SETSID), runs on as an orphan of nobody and keeps its GPU."""
    ws = workspace(decode__env={"ATOMSIM_ATOM_REV": "pin", "ATOMSIM_RANK_SETSID": "TP5"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        pgid = run.handles["decode-0"].pid
        tree = {p: title(p) for p in scan_trees([pgid])[pgid]}
        assert len(tree) == 11, tree  # supervisor, server, EngineCore, 8 ranks (TP5 found below its EngineCore)
        tp5 = next(p for p in tree if _sid(p) == p)
        core = _parent(tp5)
        for pid in (pgid, _parent(core), core):  # supervisor, server, EngineCore: an OOM kill, say
            os.kill(pid, signal.SIGKILL)
        await run.watch(until=lambda s: s.procs["decode-0"].alive is False, timeout=30)
        await run.watchers.gpus.poll_once()
        return run, tp5
    run, tp5 = asyncio.run(go())
    node = run.plan.endpoint("decode-0").node
    ns = run.state.gpus[node]
    assert alive(tp5), "the pin's TP5 outlives its EngineCore"
    assert 5 in ns.foreign, ns.flag()
    assert ns.flag().startswith("8/8 GPUs hold 245 GB: another job, or an orphan (pid "), ns.flag()
    assert (5, tp5) in [(gpu, pid) for gpu, pid, _, _ in ns.holders], ns.holders  # amd-smi process, by PID

    report = asyncio.run(Run.open(run.id).teardown(grace=2))
    assert not alive(tp5)
    assert report.gpus.startswith("VRAM back to baseline on every GPU"), report.gpus
    assert f"GPU 5 of {node}" in report.gpus and f"pid {tp5} " in report.gpus, report.gpus


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    return int(data[data.rfind(")") + 2:].split()[1])


def _sid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    return int(data[data.rfind(")") + 2:].split()[3])
