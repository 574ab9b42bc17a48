"""The GPUs of a cluster's nodes before a run holds them (issue 42: "Nodes shows free VRAM per node", flagging memory
held by no process of this console's runs): read through the simulator's amd-smi on the local demo cluster as the
operator's `atomdeck nodes --gpus` and the Nodes view read them, with another job standing in by a process that
holds VRAM (sim/gpus.py hold)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from atomdeck.core.config.clusters import load
from atomdeck.core.config.paths import sim_shim_dir
from atomdeck.core.run import nodegpus
from atomdeck.core.run.nodegpus import SLURM_NOTE, read_nodes

from .test_cli import atomdeck


@pytest.fixture
def gpu_dir(tmp_path, monkeypatch):
    d = tmp_path / "gpus"
    monkeypatch.setenv("ATOMSIM_GPU_DIR", str(d))  # the stand-in and the holder share it
    return d


@pytest.fixture
def other_job(gpu_dir):
    """Another job on demo-n02 (127.0.0.12): 100 GiB on each of GPUs 0 and 1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATOMSIM_")}
    env.update(ATOMSIM_GPU_DIR=str(gpu_dir), ATOMSIM_NODE_IP="127.0.0.12",
               PYTHONPATH=str(sim_shim_dir()))
    p = subprocess.Popen([sys.executable, "-c", "import atomsim_boot; atomsim_boot.ensure(); import sys; "
                          "from atomdeck.sim.gpus import hold_main; sys.exit(hold_main(sys.argv[1:]))",
                          "--gpus", "0-1", "--gb", "100"], env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "holding"
    yield p
    p.kill()
    p.wait()


def demo_nodes(cluster):
    return [(n.name, n.addr) for n in cluster.static_inventory()]


def test_every_demo_node_reads_free_and_another_jobs_memory_is_flagged_with_its_pid(other_job):
    cluster = load("local")[0]
    found, note = asyncio.run(read_nodes(cluster, demo_nodes(cluster)))
    assert note == "" and sorted(found) == [n for n, _ in demo_nodes(cluster)]
    for name, ns in found.items():
        assert (ns.tool, ns.error, len(ns.gpus)) == ("amd-smi", "", 8), (name, ns)
    n02 = found["demo-n02"]
    assert n02.foreign == [0, 1]
    assert n02.flag().startswith(f"2/8 GPUs hold 100 GB: another job, or an orphan (pid {other_job.pid} "), n02.flag()
    free, total = n02.free_mb()
    free01, total01 = found["demo-n01"].free_mb()
    assert total == total01 and free01 - free == 2 * 100 * 1024  # the two GPUs' 100 GiB, nothing else
    assert [ns.flag() for n, ns in found.items() if n != "demo-n02"] == [""] * (len(found) - 1)


def test_the_cli_prints_free_vram_and_the_held_memory(other_job):
    out = atomdeck("nodes", "--cluster", "local", "--gpus", check=True).stdout
    head = next(line for line in out.splitlines() if "NODE" in line)
    assert "VRAM" in head
    n01 = next(line for line in out.splitlines() if "demo-n01 " in line)
    assert " free " in n01
    assert f"demo-n02: 2/8 GPUs hold 100 GB: another job, or an orphan (pid {other_job.pid}" in out
    rows = {r["name"]: r for r in json.loads(atomdeck("nodes", "--cluster", "local", "--gpus", "--json",
                                                      check=True).stdout)["nodes"]}
    assert rows["demo-n02"]["vram"]["held"].startswith("2/8 GPUs hold 100 GB")
    assert rows["demo-n01"]["vram"]["free_mb"] == rows["demo-n02"]["vram"]["free_mb"] + 2 * 100 * 1024
    assert "vram" not in json.loads(atomdeck("nodes", "--cluster", "local", "--json", check=True).stdout)["nodes"][0]


def test_a_slurm_cluster_says_its_nodes_are_read_in_a_job_and_runs_nothing(monkeypatch):
    ran = []

    async def no_read(*a, **k):
        ran.append(a)
        raise AssertionError("a Slurm node was read outside a job")

    monkeypatch.setattr(nodegpus, "read_node", no_read)
    slurm = load("mia1")[0]
    assert slurm.launcher == "slurm"
    found, note = asyncio.run(read_nodes(slurm, [("n1", "10.0.0.1")]))
    assert (found, note, ran) == ({}, SLURM_NOTE, [])

