"""`atomdeck bench` once on the lab: the demo 1P1D started through Slurm on the lab's nodes (network
namespaces, real slurmd), measured through its router from this machine, then torn down clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.lab.runhelpers import serve, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_bench_through_slurm_on_the_lab(lab):
    run, state = serve(workspace("demo-1p1d", "lab"))
    try:
        assert state.status == "serving", state.diagnosis
        res = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "bench", run.id, "--isl", "32", "--osl",
                              "8", "--concurrency", "1,4", "--num-prompts", "8", "--json"], capture_output=True,
                             text=True, timeout=300, env=os.environ.copy())
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["layout"] == "1P1D TP8" and out["router"].startswith("http://10.77.0.")
        assert [(s["max_concurrency"], s["completed"], s["failed"]) for s in out["results"]] == [(1, 8, 0), (4, 8, 0)]
        assert all(s["total_input_tokens"] == 8 * 32 and s["total_output_tokens"] == 8 * 8 for s in out["results"])
        assert out["results"][0]["total_gpus"] == 16
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
