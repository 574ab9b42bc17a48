"""Drills (issue 16): `atomdeck drill NAME` launches the demo with one simulator fault on the right
process only, and says what to look for; clusters without the simulator are refused."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from atomdeck.core.run.run import Run

from tests.leftovers import gone

pytestmark = pytest.mark.slow


def cli(*args):
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env=os.environ | {"ATOMDECK_SIM_SPEED": "20"})


def watch(run_id: str, until, timeout: float = 60):
    async def go():
        run = Run.open(run_id)
        try:
            return await run.watch(until=until, timeout=timeout)
        finally:
            await run.close()
    return asyncio.run(go())


def down(run_id: str) -> None:
    p = cli("down", run_id)
    assert p.returncode == 0, p.stdout + p.stderr
    assert gone(Run.open(run_id)) == []


def test_crash_drill_on_one_of_two_prefills_hits_only_that_one():
    p = cli("drill", "crash-tokenizer", "--on", "prefill-1", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    try:
        assert out["process"] == "prefill-1" and out["key"] == "prefill.env"
        assert out["env"]["ATOMSIM_CRASH_AT"] == "tokenizer" and out["env"]["ATOMSIM_ONLY"].endswith(":8010")
        assert "OSError: Can't load tokenizer for '<model>'" in out["look_for"]
        state = watch(out["run"], lambda s: s.procs["prefill-1"].alive is False
                      and s.procs["prefill-0"].stage in ("ready", "serving"))
        assert state.procs["prefill-1"].exit_code == 1
        assert state.procs["prefill-0"].alive is not False and state.procs["decode-0"].alive is not False
        logs = cli("logs", out["run"], "--process", "prefill-1").stdout
        assert "Can't load tokenizer" in logs
        assert "Can't load tokenizer" not in cli("logs", out["run"], "--process", "prefill-0").stdout
    finally:
        down(out["run"])


def test_never_bind_drill_defaults_to_the_decode_and_says_what_to_look_for():
    p = cli("drill", "never-bind")
    assert p.returncode == 0, p.stderr
    run_id = p.stdout.strip()
    try:
        assert "drill never-bind: decode-0 on demo-n03" in p.stderr
        assert "set in decode.env: ATOMSIM_NEVER_BIND=1 ATOMSIM_ONLY=127.0.0.13:8020" in p.stderr
        assert "look for:" in p.stderr and f"atomdeck down {run_id}" in p.stderr
        # the prefills bind; the decode logs ready and never binds
        state = watch(run_id, lambda s: all(c.state == "open" for c in s.cells.values() if c.node != "demo-n03")
                      and any("fully initialized and ready" in x for x in s.procs["decode-0"].last_lines), 60)
        decode_cells = [c for c in state.cells.values() if c.node == "demo-n03" and c.owner == "decode-0"]
        assert any(c.kind == "http" for c in decode_cells)
        assert decode_cells and all(c.state != "open" for c in decode_cells if c.kind == "http")
        assert state.procs["decode-0"].alive is not False
    finally:
        down(run_id)


def test_drill_list_json_and_refusals():
    out = json.loads(cli("drill", "list", "--json").stdout)
    names = [d["name"] for d in out["drills"]]
    assert {"never-bind", "handshake-refuse", "crash-tokenizer", "router-crash"} <= set(names)
    assert all({"name", "what", "look_for"} <= set(d) for d in out["drills"])
    refused = cli("drill", "never-bind", "--cluster", "mia1", "--json")
    assert refused.returncode == 2
    assert "not atomdeck's simulator" in json.loads(refused.stdout)["error"]["message"]
    wrong = cli("drill", "wrong-kv-role", "--on", "decode-0")
    assert wrong.returncode == 2 and "prefill fault" in wrong.stderr
    typo = cli("drill", "never-bnd")
    assert typo.returncode == 2 and "did you mean never-bind?" in typo.stderr
