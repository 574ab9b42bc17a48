"""Fault matrix rows that need the real Slurm lab."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
import yaml
from atomdeck.core.config.paths import find_cluster
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.core.run.run import Run

from tests.leftovers import open_ports

from .runhelpers import jobs, refused, run_pids, squeue_job, squeue_steps, teardown, up, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]
G = "mia1-p01-g0"


def test_model_path_missing_on_one_node_is_refused_before_launch(lab, tmp_path, monkeypatch):
    present = tmp_path / "models-a"
    (present / "DeepSeek-V4-Pro").mkdir(parents=True)
    cluster = yaml.safe_load(find_cluster("lab").read_text())
    cluster.update(name="lab-docker", simulator={"enabled": False}, container={"runtime": "docker"},
                   model_dirs=[{"pattern": f"{G}1", "path": str(present)},
                               {"pattern": f"{G}2", "path": str(tmp_path / "models-b")}])
    (tmp_path / "recipes" / "clusters").mkdir(parents=True)
    (tmp_path / "recipes" / "clusters" / "lab-docker.yaml").write_text(yaml.safe_dump(cluster))
    monkeypatch.chdir(tmp_path)
    ws = load_workspace("dsv4-fp4-mi355x-1p1d-tp8", "lab-docker")
    ws.inventory, _ = asyncio.run(fetch_inventory(ws.cluster))
    e = refused(ws, ws.assess([f"{G}1", f"{G}2"]), "launched although the model path is missing on a node")
    model = [f for f in e.findings if f.rule == "preflight-model"]
    assert [f.node for f in model] == [f"{G}2"]
    assert model[0].message == f"model path {tmp_path}/models-b/DeepSeek-V4-Pro is missing on {G}2"
    assert {f.node for f in e.findings if f.rule == "preflight-runtime"} == {f"{G}1", f"{G}2"}
    # the allocation was given back and nothing runs
    run = Run.list()[-1]
    assert run["status"] == "failed" and "pre-flight failed" in run["diagnosis"]
    assert jobs() == ""


def test_scancel_from_outside_is_reported_and_down_is_clean(lab):
    ws = workspace("demo-1p1d", "lab")

    async def go():
        run, s = await up(ws)
        assert s.status == "serving", s.diagnosis
        job = run.rd.meta()["job_id"]
        subprocess.run(["scancel", str(job)], check=True)
        s = await run.watch(until=lambda s: all(p.alive is False for p in s.procs.values()), timeout=20)
        await run.close()
        return run, s, job

    run, state, job = asyncio.run(go())
    assert state.status == "failed"
    assert all(p.stage == "failed" for p in state.procs.values())
    report = teardown(run.id)
    assert report.clean, report.lines()
    assert squeue_job(str(job)) == "" and squeue_steps(str(job)) == ""
    # the cancelled steps' processes get SIGTERM from slurmstepd and SIGKILL KillWait (5 s) later: a worker still
    # shutting down its ranks (1 s) may outlive the step's end by that much, never longer
    deadline = time.monotonic() + 10
    while (left := run_pids(lab, run.id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == {} and open_ports(run) == []


@pytest.mark.parametrize("cluster", ["lab", "lab-ssh"])
def test_a_flag_the_engine_rejects_is_refused_before_launch_with_its_spelling(lab, cluster):
    """Issue 17.3: the worker's own parser (its --help on a chosen node) refuses `--kv-cache-dtype` before
    anything starts, where the launch would otherwise fail minutes into the allocation."""
    ws = workspace("demo-1p1d", cluster, decode__args={"kv-cache-dtype": "fp8"})
    # offline lint cannot know what this engine version accepts (refused() asserts the assessment is fine)
    (f,) = refused(ws, why="launched with a flag the engine rejects").findings
    assert (f.rule, f.key, f.fix) == ("preflight-flag", "decode.args.kv-cache-dtype", "spell it --kv_cache_dtype")
    assert "--kv-cache-dtype is not a flag of `python3 -m atom.entrypoints.openai_server`" in f.message
    run = Run.list()[-1]
    assert run["status"] == "failed" and "pre-flight failed" in run["diagnosis"]
    assert jobs() == ""
    assert run_pids(lab, run["id"]) == {}


def test_rdma_without_devices_and_a_missing_mooncake_dir_are_refused_before_launch(lab):
    """Issue 17.10: what the DeepSeek recipes assume where the engine runs: /dev/infiniband for an RDMA
    KV transfer (the lab's nodes have none) and the Mooncake directory LD_LIBRARY_PATH names."""
    ws = workspace("demo-1p1d", "lab", mooncake__protocol="rdma",
                   env={"LD_LIBRARY_PATH": "/opt/venv/lib/python3.10/site-packages/mooncake:/usr/lib"})
    e = refused(ws, why="launched an RDMA transfer on nodes without /dev/infiniband")
    got = sorted((f.rule, f.node, f.key) for f in e.findings)
    assert got == [(rule, f"{G}{i}", key) for rule, key in (("preflight-mooncake", "env.LD_LIBRARY_PATH"),
                                                            ("preflight-rdma", "mooncake.protocol"))
                   for i in (1, 2)]
    assert jobs() == ""
