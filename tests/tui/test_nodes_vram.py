"""The Nodes view's VRAM column before any run (issue 42, tui/node_gpus.py): the nodes' GPUs are read in the
background when the view is shown and again on `g`, through the simulator's amd-smi on the local demo cluster; memory
held by another job is flagged on its node's row and named with its PID above the table. A Slurm cluster's nodes are
reached only inside a job, and the view says so instead of reading."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest
from atomdeck.core.config.paths import sim_shim_dir
from atomdeck.core.run.nodegpus import SLURM_NOTE
from atomdeck.tui.widgets.node_table import NodeTable

from .conftest import SIZE, make_app, ready

MIA1 = ["mia1-p01-g01", "mia1-p01-g02"]


@contextlib.contextmanager
def _holder(tmp_path, monkeypatch, ip: str, gb: int):
    """Another job on the demo node at `ip`: `gb` GiB on each of its 8 GPUs, until the block ends (or killed)."""
    monkeypatch.setenv("ATOMSIM_GPU_DIR", str(tmp_path / "gpus"))
    env = {**os.environ, "ATOMSIM_NODE_IP": ip, "PYTHONPATH": str(sim_shim_dir())}
    p = subprocess.Popen([sys.executable, "-c", "import atomsim_boot; atomsim_boot.ensure(); import sys; "
                          "from atomdeck.sim.gpus import hold_main; sys.exit(hold_main(sys.argv[1:]))",
                          "--gb", str(gb)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "holding"
        yield p
    finally:
        p.kill()
        p.wait()


@pytest.fixture
def other_job(tmp_path, monkeypatch):
    """Another job on demo-n03 (127.0.0.13): 240 GiB on each of its 8 GPUs."""
    with _holder(tmp_path, monkeypatch, "127.0.0.13", 240) as p:
        yield p


def _vram(app) -> dict[str, str]:
    table = app.screen.query_one(NodeTable)
    return {name: cells[5].plain for name, cells in table._node_rows}


async def _read(pilot) -> None:
    await ready(pilot)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()  # (the view redraws as a reading ends)


async def test_the_view_reads_the_nodes_gpus_when_shown_and_flags_another_jobs_memory(other_job):
    app = make_app(read_gpus=True)
    async with app.run_test(size=SIZE) as pilot:
        await _read(pilot)
        vram = _vram(app)
        assert vram.pop("demo-n03") == "▲ 8/8 held"
        assert set(vram.values()) == {"2.2T free"}, vram
        summary = str(app.screen.query_one("#nodes-summary").render())
        assert f"demo-n03: 8/8 GPUs hold 240 GB: another job, or an orphan (pid {other_job.pid} " in summary
        assert "GPUs read 12:00:00 (g reads again) · 1 node holds memory" in summary


async def test_g_reads_them_again_when_the_console_does_not_on_its_own(other_job):
    app = make_app()  # (read_gpus off: the tests' default, as a console given a made-up inventory)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert set(_vram(app).values()) == {""}
        assert "GPUs: not read (g reads them)" in str(app.screen.query_one("#nodes-summary").render())
        await pilot.press("g")
        assert "GPUs: reading 6 nodes (amd-smi) …" in str(app.screen.query_one("#nodes-summary").render())
        await _read(pilot)
        assert _vram(app)["demo-n03"] == "▲ 8/8 held" and _vram(app)["demo-n01"] == "2.2T free"
        other_job.kill()
        other_job.wait()
        await pilot.press("g")
        await _read(pilot)
        assert _vram(app)["demo-n03"] == "2.2T free"  # its memory is free once the other job ended
        assert "hold memory" not in str(app.screen.query_one("#nodes-summary").render())


@pytest.fixture
def first_node_held(tmp_path, monkeypatch):
    """Another job on demo-n01 (127.0.0.11), the node auto-pick takes first."""
    with _holder(tmp_path, monkeypatch, "127.0.0.11", 200) as p:
        yield p


async def test_auto_pick_leaves_a_node_whose_gpus_another_job_holds(first_node_held):
    """A node read holding memory no run of ours holds is not chosen (the pre-flight check would refuse it at
    launch); picked by hand it is an error naming the memory, and an override makes it a warning."""
    from atomdeck.core.design.plan import node_verdict

    unread = make_app()  # (its GPUs not read: demo-n01 is the first choice)
    async with unread.run_test(size=SIZE) as pilot:
        await ready(pilot)
        before = unread.assessment.selection
        assert before is not None and "demo-n01" in before.all()
    app = make_app(read_gpus=True)
    async with app.run_test(size=SIZE) as pilot:
        await _read(pilot)
        chosen = app.assessment.selection
        assert chosen is not None and "demo-n01" not in chosen.all() and len(chosen.all()) == len(before.all())
        node = next(n for n in app.workspace.inventory if n.name == "demo-n01")
        assert node_verdict(node, app.workspace.cluster).startswith("GPUs in use: 8/8 GPUs hold 200 GB: another "
                                                                  f"job, or an orphan (pid {first_node_held.pid} ")
        app.set_design(app.design.toggle("demo-n01").toggle("demo-n02"))
        errors = [f for f in app.assessment.findings if f.rule == "node-unhealthy" and f.node == "demo-n01"]
        assert errors and errors[0].severity == "error" and "GPUs in use" in errors[0].message
        app.set_design(app.design.override("demo-n01"))
        found = [f for f in app.assessment.findings if f.rule == "node-unhealthy" and f.node == "demo-n01"]
        assert found and found[0].severity == "warning"
        first_node_held.kill()
        first_node_held.wait()
        await pilot.press("g")
        await _read(pilot)
        node = next(n for n in app.workspace.inventory if n.name == "demo-n01")
        assert node.held == "" and node.healthy  # the other job ended: usable again


async def test_a_cluster_larger_than_auto_read_max_is_read_on_the_key_only(other_job, monkeypatch):
    """Every visit of the view after STALE_S would read every node: at 2,000 SSH nodes, 2,000 commands. Past
    AUTO_READ_MAX nodes (here made 5, under the demo's 6) the view says so and reads on `g`."""
    from atomdeck.tui import node_gpus

    monkeypatch.setattr(node_gpus, "AUTO_READ_MAX", 5)
    app = make_app(read_gpus=True)
    async with app.run_test(size=SIZE) as pilot:
        await _read(pilot)
        assert set(_vram(app).values()) == {""}
        assert "GPUs: not read (6 nodes: g reads them all)" in str(app.screen.query_one("#nodes-summary").render())
        await pilot.press("g")
        await _read(pilot)
        assert _vram(app)["demo-n03"] == "▲ 8/8 held" and _vram(app)["demo-n01"] == "2.2T free"


async def test_a_slurm_cluster_says_its_nodes_are_read_in_a_job():
    async def offline(cluster, _offline):
        from atomdeck.core.design.workspace import offline_nodes

        return offline_nodes(MIA1), "offline"

    app = make_app(recipe="dsv4-fp4-mi355x-2p1d-dpa", cluster="mia1", offline=True, named_nodes=MIA1,
                   fetch=offline)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("g")
        await _read(pilot)
        assert SLURM_NOTE in str(app.screen.query_one("#nodes-summary").render())
        assert set(_vram(app).values()) == {""}
