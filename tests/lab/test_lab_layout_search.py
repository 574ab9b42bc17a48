"""The layout search on the lab through Slurm (issue 40.4): every layout's run is a step set in ONE holding job the
search asked for, each run leaves the job running at its teardown, and the search gives the job back at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from atomdeck.core.run.run import Run

from tests.leftovers import alive

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_a_layout_search_runs_in_one_allocation_and_gives_it_back(lab):
    env = {**os.environ, "ATOMDECK_SIM_SPEED": "20"}
    res = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "sweep", "demo-1p1d", "--cluster", "lab",
                          "--nodes", "mia1-p01-g01,mia1-p01-g02,mia1-p01-g03", "--layouts", "1p1d,2p1d",
                          "--concurrency", "4", "--isl", "32", "--osl", "8", "--num-prompts", "8", "--warmup", "0",
                          "--fresh", "--json"], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert [(e["layout"], e["status"]) for e in out["entries"]] == [("1p1d", "done"), ("2p1d", "done")], out
    jobs = set()
    for e in out["entries"]:
        run = Run.open(e["run"])
        meta = run.rd.meta()
        jobs.add(meta.get("job_id"))
        assert not meta.get("job_owned"), meta  # given the search's job, as `up --job` is
        assert not alive(run)
        assert all(r["valid"] for r in e["results"]), e["results"]
    (job,) = jobs  # one allocation for the whole search
    assert job
    assert f"holding job {job} cancelled" in res.stderr, res.stderr
    q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
    assert q.stdout.strip() in ("", "COMPLETING"), q.stdout
