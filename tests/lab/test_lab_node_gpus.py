"""The nodes' GPUs before any run, on the lab over SSH through its login host (core/run/nodegpus.py: the Nodes view's
VRAM column, `atomdeck nodes --gpus`): each node's amd-smi (the simulator's stand-in, on the node's own address) read
over the node's SSH connection; the Slurm lab's nodes are reached only inside a job and are not read."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from atomdeck.core.config.clusters import load
from atomdeck.core.run.nodegpus import SLURM_NOTE, read_nodes

pytestmark = pytest.mark.lab


def test_each_lab_node_reads_its_gpus_over_ssh(lab):
    cluster = load("lab-ssh")[0]
    nodes = [(n.name, n.addr) for n in cluster.nodes]
    found, note = asyncio.run(read_nodes(cluster, nodes))
    assert note == "" and sorted(found) == sorted(n for n, _ in nodes)
    for name, ns in found.items():
        assert (ns.tool, ns.error, len(ns.gpus)) == ("amd-smi", "", 8), (name, ns.error)
        free, total = ns.free_mb()
        assert total > 0 and free > 0.8 * total, (name, free, total)


def test_the_cli_on_the_slurm_lab_says_the_nodes_are_read_in_a_job(lab):
    out = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "nodes", "--cluster", "lab", "--gpus",
                          "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["gpus_note"] == SLURM_NOTE and all("vram" not in r for r in got["nodes"])
