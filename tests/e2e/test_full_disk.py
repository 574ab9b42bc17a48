"""The run directory on a filesystem that fills up (issue 44, part 1): a real tmpfs, filled until the kernel says
ENOSPC, under a real demo run on the local launcher; the verbs run as the operator runs them (subprocesses).
Every verb works and says so once (which directory, which filesystem, since when, what waits, the fix); `down`
tears down and verifies; nothing is lost: once there is room the event log is complete and ends with a whole
line."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from atomdeck.core.run.events import Event
from atomdeck.core.run.run import Run
from atomdeck.core.run.rundir import RunDir

from tests.fullfs import fill, small_tmpfs
from tests.leftovers import gone

from .conftest import SPEED

pytestmark = pytest.mark.slow


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """A 16 MiB tmpfs holding XDG_STATE_HOME, for this test and its subprocesses; TMPDIR (where atomdeck keeps
    what a full run directory could not take) on the test's own directory, another filesystem. Any run left
    serving is torn down (with room made first) before the tmpfs goes."""
    spill = tmp_path / "tmp"
    spill.mkdir()
    with small_tmpfs(tmp_path / "fs") as fs:
        monkeypatch.setenv("XDG_STATE_HOME", str(fs / "state"))
        monkeypatch.setenv("TMPDIR", str(spill))
        monkeypatch.setattr(tempfile, "tempdir", str(spill))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"} | {"ATOMDECK_SIM_SPEED": SPEED}
        try:
            yield fs, env
        finally:
            (fs / "filler").unlink(missing_ok=True)
            for rd in RunDir.all():
                run = Run.open(rd.id)
                if any(p.alive for p in run.state.procs.values()) or gone(run):
                    asyncio.run(run.teardown(grace=1))


# Ports of their own (other sessions on this machine bring the demo up on its default ports), none inside
# 15000-17000 where Mooncake engines bind at random (as tests/measure/test_bench_local.py)
PORTS = {"prefill_http": 18210, "decode_http": 18220, "router": 31310, "router_prometheus": 31410, "handshake": 14501}


def recipe(where: Path) -> str:
    """demo-1p1d on PORTS, as a recipe file (outside the tmpfs: it is read, not written)."""
    import yaml
    from atomdeck.core.config.paths import recipes_dir

    doc = yaml.safe_load((recipes_dir() / "demo-1p1d.yaml").read_text()) | {"ports": PORTS}
    path = where / "demo-1p1d.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def atomdeck(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def whole_lines(path: Path) -> list[dict]:
    """Every line of an events file, parsed; the file ends with a newline (no half-written last line)."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path} ends with a torn line: {data[-120:]!r}"
    return [json.loads(line) for line in data.decode().splitlines()]


def test_status_bench_and_down_on_a_full_run_directory_then_everything_is_written_when_room_returns(disk, tmp_path):
    fs, env = disk
    up = atomdeck(env, "up", recipe(tmp_path), "--wait")
    assert up.returncode == 0, up.stderr
    run_id = up.stdout.strip()
    rd = RunDir.find(run_id)
    fill(fs)
    spill = Path(env["TMPDIR"]) / f"atomdeck-{os.getuid()}" / "unsaved" / run_id

    status = atomdeck(env, "status", run_id)
    assert status.returncode == 0, status.stderr
    assert "Traceback" not in status.stderr + status.stdout
    said = status.stdout.split("storage:", 1)[1]
    assert f"the run directory {rd.path} on the filesystem {fs} (tmpfs, 0 bytes free) cannot be written since " in said
    assert "(No space left on device)" in said and "kept in memory" in said
    assert f"Fix: free space on {fs} (`df -h {fs}`), or point XDG_STATE_HOME at a filesystem with room" in said

    js = json.loads(atomdeck(env, "status", run_id, "--json").stdout)
    assert "No space left on device" in js["storage"]["problems"]["run directory"]

    # the bench: each step ends, nothing traced back, its results kept where `compare` finds them
    bench = atomdeck(env, "bench", run_id, "--concurrency", "1", "--num-prompts", "2", "--isl", "32", "--osl", "4",
                     "--warmup", "0", "--request-timeout", "5")
    assert "Traceback" not in bench.stderr, bench.stderr
    assert "step 1/1 concurrency    1:" in bench.stderr, bench.stderr
    assert f"the bench could not be saved in {rd.path}" in bench.stderr and str(spill / "files" / "bench") in \
        bench.stderr
    assert atomdeck(env, "compare", run_id).returncode == 0

    down = atomdeck(env, "down", run_id, "--grace", "2")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "verified clean: every process gone, every port closed" in down.stdout
    assert "Traceback" not in down.stderr
    assert down.stderr.count("cannot be written") == 1, down.stderr  # said once
    assert f"kept in {spill}" in down.stderr
    assert gone(Run.open(run_id)) == []
    runs = json.loads(atomdeck(env, "runs", "--json").stdout)["runs"]
    assert [r["status"] for r in runs if r["id"] == run_id] == ["stopped"]  # read from what waits
    before = len(whole_lines(rd.path / "events.jsonl"))  # whole (a line may still fit in the file's last page)

    (fs / "filler").unlink()  # room again: the next session writes everything that waited
    again = atomdeck(env, "status", run_id)
    assert again.returncode == 0 and "storage:" not in again.stdout, again.stdout
    events = whole_lines(rd.path / "events.jsonl")
    kinds = [(e["kind"], e["value"]) for e in events[before:]]
    assert ("run", "stopping") in kinds and ("run", "stopped") in kinds
    assert ("storage", "unwritable") in [(e["kind"], e["value"]) for e in events]
    assert kinds[-1] == ("storage", "ok")
    assert sum(k == ("teardown", "gone") for k in kinds) == 3
    assert json.loads((rd.path / "run.json").read_text())["status"] == "stopped"
    assert list((rd.path / "bench").glob("*.json")) and not spill.exists()


def test_up_on_a_full_state_directory_launches_nothing_and_says_why(disk, tmp_path):
    fs, env = disk
    (fs / "state" / "atomdeck" / "runs").mkdir(parents=True)
    fill(fs)
    up = atomdeck(env, "up", recipe(tmp_path), "--wait")
    assert up.returncode == 2, up.stdout + up.stderr
    assert "Traceback" not in up.stderr
    assert f"cannot make a run directory in {fs}/state/atomdeck/runs on the filesystem {fs} (tmpfs" in up.stderr
    assert "nothing was launched" in up.stderr and f"free space on {fs}" in up.stderr
    assert RunDir.all() == [] and not list((fs / "state" / "atomdeck" / "runs").iterdir())
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.11", PORTS["prefill_http"])) != 0  # no prefill started


def test_the_event_log_never_ends_with_a_half_line_and_waits_in_order(disk, monkeypatch):
    """A write the disk cuts part-way is cut back to the last whole line; a torn line an older build left is cut
    before the next append; past the bound the oldest waiting events are dropped and counted, and that count
    is written with the rest."""
    from atomdeck.core.run import unsaved

    fs, _ = disk
    rd = RunDir(fs / "run")
    rd.path.mkdir()
    rd.append_events([Event("note", detail="first")])
    fill(fs, leave=8192)  # two pages: the batch below starts, then meets ENOSPC
    big = [Event("note", detail=f"{i:04d} " + "x" * 1000) for i in range(40)]
    rd.append_events(big)
    assert rd.trouble is not None and rd.trouble.code_name == "ENOSPC"
    assert [e["detail"] for e in whole_lines(rd.path / "events.jsonl")] == ["first"]  # cut back, whole
    monkeypatch.setattr(unsaved, "MAX_HELD", 45)
    rd.unsaved.last_try = 0.0
    rd.append_events([Event("note", detail=f"late {i}") for i in range(10)])  # 50 wait: 5 dropped
    assert rd.unsaved.dropped == 5 and "5 event(s) dropped" in rd.waiting_words()
    assert (rd.path / "events.jsonl").read_bytes().endswith(b"\n")

    (fs / "filler").unlink()
    assert rd.flush(force=True) and rd.trouble is None
    details = [e["detail"] for e in whole_lines(rd.path / "events.jsonl")]
    assert details[0] == "first" and details[1].startswith("0005 ") and details[36:46] == [f"late {i}" for i in
                                                                                           range(10)]
    assert "5 event(s) were dropped" in details[-1]

    with open(rd.path / "events.jsonl", "ab") as f:  # an older build (or a crash) left half a line
        f.write(b'{"kind":"note","name":"","val')
    rd.append_events([Event("note", detail="after the torn line")])
    assert [e["detail"] for e in whole_lines(rd.path / "events.jsonl")][-2:] == [details[-1], "after the torn line"]
