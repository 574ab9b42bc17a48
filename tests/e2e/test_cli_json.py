"""The CLI contract on a real run (issue 16): `up --wait --json` is one full object, `logs --json` is
JSON lines, `runs --json` an object; nothing else on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.leftovers import gone

pytestmark = pytest.mark.slow


def cli(*args):
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env=os.environ | {"ATOMDECK_SIM_SPEED": "20"})


def test_up_wait_logs_runs_down_all_speak_json():
    up = cli("up", "demo-1p1d", "--wait", "--json")
    out = json.loads(up.stdout)
    run_id = out["run"]
    try:
        assert up.returncode == 0, up.stderr
        assert out["status"] == "serving" and out["readiness"] == "1/1P 1/1D router serving"
        assert out["router"].startswith("http://127.0.0.") and out["model"] == "atomdeck/demo-tiny-8b"
        assert set(out["processes"]) == {"prefill-0", "decode-0", "router"}

        logs = cli("logs", run_id, "--json")
        assert logs.returncode == 0, logs.stderr
        records = [json.loads(line) for line in logs.stdout.splitlines()]
        assert records and all(set(r) == {"process", "node", "text", "offset"} for r in records)
        assert {r["process"] for r in records} == {"prefill-0", "decode-0", "router"}
        router = [r for r in records if r["process"] == "router"]
        assert router[0]["node"] == out["processes"]["router"]["node"]
        offsets = [r["offset"] for r in router]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        # the offset is where the line ends in the file: resuming from it gives the rest exactly
        last = cli("logs", run_id, "--json", "--process", "router", "--lines", "2")
        assert [json.loads(x) for x in last.stdout.splitlines()] == router[-2:]

        listed = json.loads(cli("runs", "--json").stdout)
        assert [r["id"] for r in listed["runs"]] == [run_id]
    finally:
        down = cli("down", run_id, "--json")
    report = json.loads(down.stdout)
    assert down.returncode == 0 and report["run"] == run_id, down.stdout + down.stderr
    from atomdeck.core.run.run import Run

    assert gone(Run.open(run_id)) == []


def test_up_without_wait_json_is_an_object_too():
    up = cli("up", "demo-1p1d", "--json")
    out = json.loads(up.stdout)
    try:
        assert up.returncode == 0 and out["waited"] is False and out["run"]
    finally:
        assert cli("down", out["run"]).returncode == 0
