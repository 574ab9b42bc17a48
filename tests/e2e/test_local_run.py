"""The run engine on the local launcher: up, serving, status, reattach, teardown, faults."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from atomdeck.core.run.diagnose import diagnose
from atomdeck.core.run.run import Run

from tests.holds import hold_starts
from tests.leftovers import alive, gone

from .conftest import workspace

pytestmark = pytest.mark.slow


def launch_and_watch(ws, runs, until=("serving", "failed"), timeout=30, said=None, on_run=None):
    async def go():
        run = await Run.launch(ws, ws.assess(), progress=None if said is None else said.append, on_run=on_run)
        runs.append(run)
        state = await run.watch(until=lambda s: s.status in until, timeout=timeout)
        return run, state
    return asyncio.run(go())


@pytest.mark.parametrize("recipe,shape", [("demo-1p1d", "1/1P 1/1D router serving"),
                                          ("demo-2p1d", "2/2P 1/1D router serving")])
def test_reaches_serving_then_down_leaves_nothing(recipe, shape, runs):
    said: list[str] = []
    made: list[tuple] = []

    async def on_run(run):  # what a console is shown of the run before the first start
        made.append((list(said), run.state.status, {p.stage for p in run.state.procs.values()}, dict(run.handles),
                     (run.rd.path / "plan.json").is_file(), diagnose(run.state).headline))

    run, state = launch_and_watch(workspace(recipe), runs, said=said, on_run=on_run)
    assert state.status == "serving", state.diagnosis
    n = len(run.processes)
    assert made == [(said[:1], "launching", {"pending"}, {}, True, f"launching: starting {n} processes")], made
    # what the launch said it did: the ports, then a count that only goes up and ends with every process
    n, ports = len(run.processes), sum(len(p.ports) for p in run.processes.values())
    assert said[0] == f"checking that the {ports} ports are free on {len(run.plan.nodes)} nodes", said
    counts = [int(line.split()[0]) for line in said[1:]]
    assert said[1:] and all(line.endswith(f" of {n} processes started") for line in said[1:]), said
    assert counts[0] == 0 and counts[-1] == n and counts == sorted(counts) and len(counts) == n + 1, said
    assert state.readiness() == shape
    assert state.checks["smoke"].ok and state.checks["smoke"].data["tokens"] == 8
    assert state.checks["models"].ok
    assert all(c.state == "open" for c in state.cells.values()), \
        [(c.key, c.kind, c.owner, c.state) for c in state.cells.values() if c.state != "open"]
    assert any(p.stage == "transferred" for p in state.pairs.values())
    for p in state.procs.values():
        assert p.stages.keys() >= {"launching", "serving"}, (p.name, p.stages)
    # run directory: private, and holds what a later session needs
    rd = run.rd.path
    assert oct(rd.stat().st_mode & 0o777) == "0o700"
    for f in ("run.json", "recipe.yaml", "cluster.yaml", "plan.json", "commands.sh", "events.jsonl"):
        assert (rd / f).is_file() and oct((rd / f).stat().st_mode & 0o777) == "0o600", f
    report = asyncio.run(run.teardown(grace=5))
    assert report.clean, report.lines()
    assert gone(run) == []
    again = asyncio.run(Run.open(run.id).teardown(grace=1))  # idempotent
    assert again.clean and all(r.detail == "already gone" for r in again.processes)


def test_a_launch_writes_each_handle_off_the_loop_before_its_started_event_a_batch_at_a_time(runs, monkeypatch):
    """Each start is shown as it is heard (a node whose start hangs is the one left pending), and its handle file
    is written before the event that says it started (a teardown elsewhere finds it by the file). At 128 nodes the
    129 files and 129 appends, one by one, held the console's loop ~0.35 s (bench/busy_trace): the files are
    written in a thread, and the starts heard while a batch is written go together in the next (one append)."""
    import threading

    from atomdeck.core.launch.local import LocalLauncher
    from atomdeck.core.run.rundir import RunDir

    log: list[tuple] = []
    save, append, heard = RunDir.save_handle, RunDir.append_events, LocalLauncher._heard
    all_heard = threading.Event()
    count = [0]

    def saved(self, h):
        log.append(("file", h.name, threading.current_thread() is threading.main_thread()))
        if len([x for x in log if x[0] == "file"]) == 1:
            assert all_heard.wait(30)  # the first file is written while every other start is heard
        save(self, h)

    def appended(self, events):
        log.append(("append", [(e.kind, e.name) for e in events]))
        append(self, events)

    def heard_one(self, total, kind, h):
        heard(self, total, kind, h)
        count[0] += kind == "started"
        if count[0] == total:
            all_heard.set()

    monkeypatch.setattr(RunDir, "save_handle", saved)
    monkeypatch.setattr(RunDir, "append_events", appended)
    monkeypatch.setattr(LocalLauncher, "_heard", heard_one)
    run, state = launch_and_watch(workspace("demo-2p1d"), runs, until=("starting", "serving", "failed"))
    names = sorted(run.handles)
    files = [x for x in log if x[0] == "file"]
    assert sorted(x[1] for x in files) == names and not any(x[2] for x in files)  # all, none on the loop
    told = [(i, [n for k, n in x[1] if k == "proc.started"]) for i, x in enumerate(log) if x[0] == "append"]
    told = [(i, said) for i, said in told if said]
    # the first batch (the starts heard before its write began), then every start heard meanwhile, together
    assert len(told) == 2 and sorted(n for _, said in told for n in said) == names, told
    for i, said in told:  # each file before the event that says its process started
        assert all(max(j for j, x in enumerate(log) if x[:2] == ("file", n)) < i for n in said), log


def test_reattach_from_another_instance_sees_the_state_and_tears_down(runs):
    run, state = launch_and_watch(workspace(), runs)
    assert state.status == "serving"
    other = Run.open(run.id)
    assert other.state.status == "serving" and other.state.readiness() == "1/1P 1/1D router serving"
    fresh = asyncio.run(other.refresh())
    assert all(p.alive is not False for p in fresh.procs.values())
    assert all(c.state == "open" for c in fresh.cells.values())
    report = asyncio.run(other.teardown(grace=5))
    assert report.clean and gone(run) == []
    assert Run.open(run.id).state.status == "stopped"


def test_crash_while_loading_is_reported_at_its_exit_with_exit_code_and_last_lines(runs):
    """Noticed through the exit itself (its code from the exit file), not at a timeout; how soon is measured
    in bench/detect.py (process death -> reported)."""
    ws = workspace(decode__env={"ATOMSIM_CRASH_AT": "cudagraph:3", "ATOMSIM_SLOW_LOAD": "0.5"})
    run, state = launch_and_watch(ws, runs)
    assert state.status == "failed"
    d = state.procs["decode-0"]
    assert d.stage == "failed" and d.exit_code == 3 and d.alive is False
    assert "exited 3" in state.diagnosis and "decode-0 on demo-n02" in state.diagnosis
    assert any("cudagraph" in line or "Error" in line for line in d.last_lines), list(d.last_lines)


def test_a_listener_port_taken_by_a_mooncake_engine_is_named_with_what_can_take_it(runs):
    """Seen in CI: a prefill's handshake block inside 15000-17000 met a Mooncake engine's random port, and the
    prefill exited. Made certain here with the real transfer engine: the prefill's own engine is given two
    ports of its handshake block (6301-6308) to choose from. The plan warns first; the exit names the line."""
    ws = workspace(prefill__env={"MC_MIN_RPC_PORT": 6305, "MC_MAX_RPC_PORT": 6306})
    a = ws.assess()
    assert [(f.key, f.severity) for f in a.findings if f.rule == "mooncake-port-range"] == [
        ("ports.handshake", "warning")]
    run, state = launch_and_watch(ws, runs)
    assert state.status == "failed", state.diagnosis
    p = state.procs["prefill-0"]
    assert p.alive is False and p.exit_code == 1
    assert p.errors[-1].startswith("zmq.error.ZMQError: ") and "address already in use" in p.errors[-1]
    assert "prefill-0 on demo-n01 exited 1; last: zmq.error.ZMQError: " in state.diagnosis
    assert "or by a Mooncake engine's random port in 15000-17000" in state.diagnosis


def test_decode_that_never_binds_names_the_missing_cell(runs):
    ws = workspace(decode__env={"ATOMSIM_NEVER_BIND": "1"}, health__worker_timeout_s=4)
    run, state = launch_and_watch(ws, runs)
    assert state.status == "failed"
    assert state.diagnosis.startswith("timeout after 4s: barrier: 1 cell(s) not open")
    d = diagnose(state)
    assert [c.key for c in d.blocking] == ["demo-n02:8020"]
    assert "decode-0 on demo-n02 alive" in d.details[0]
    assert state.procs["decode-0"].alive is True  # it hangs; it did not die
    assert "fully initialized" in state.procs["decode-0"].last_lines[-1] or \
        any("fully initialized" in x for x in state.procs["decode-0"].last_lines)


def test_wrong_kv_role_makes_the_router_exit_and_says_why(runs):
    ws = workspace(prefill__env={"ATOMSIM_KV_ROLE": "kv_consumer"})
    run, state = launch_and_watch(ws, runs)
    assert state.status == "failed"
    assert "is not a prefill (kv_role=" in state.diagnosis
    assert any("is not a prefill" in e for e in state.procs["router"].errors)


def test_kv_role_is_checked_on_the_worker_itself(runs):
    """Even before AToMesh complains, atomdeck asks the prefill which role it runs."""
    ws = workspace(prefill__env={"ATOMSIM_KV_ROLE": "kv_consumer"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        return await run.watch(until=lambda s: "kv_role:prefill-0" in s.checks, timeout=20)

    state = asyncio.run(go())
    check = state.checks["kv_role:prefill-0"]
    assert check.ok is False
    assert check.detail.startswith("prefill-0 reports kv_role=kv_consumer, expected kv_producer")


def test_refused_handshake_fails_the_smoke_request_and_the_pair(runs):
    ws = workspace(prefill__env={"ATOMSIM_HANDSHAKE": "refuse"})
    run, state = launch_and_watch(ws, runs)
    assert state.status == "failed"
    assert state.pairs["prefill-0>decode-0"].stage == "failed"
    assert "smoke request through the router failed" in state.diagnosis or "handshake" in state.diagnosis


def _atomdeck(*args, **kw):
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=120, **kw)


def test_sigkill_of_up_then_down_from_a_new_process_cleans_everything():
    p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "up", "demo-2p1d", "--wait"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = p.stdout.readline().strip()
    assert run_id, p.stderr.read()
    time.sleep(0.5)  # mid-launch
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    run = Run.open(run_id)
    assert run.handles and all(h.pid for h in run.handles.values())
    down = _atomdeck("down", run_id)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "verified clean" in down.stdout
    assert gone(run) == []


def launch_cut_short(ws, monkeypatch, runs) -> Run:
    """A launch cancelled while its processes start (Ctrl-C in `atomdeck up`, a console quitting): the starter
    has reported one start when the task is cancelled, and the rest once the cancellation is in."""
    release = threading.Event()
    reached = hold_starts(monkeypatch, release)
    made: list[Run] = []

    async def keep(run: Run) -> None:
        made.append(run)
        runs.append(run)

    async def go() -> None:
        task = asyncio.create_task(Run.launch(ws, ws.assess(), on_run=keep))
        assert await asyncio.to_thread(reached.wait, 60), "the starter reported no start"
        task.cancel()
        await asyncio.sleep(0.1)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    (run,) = made
    return run


def test_a_launch_cancelled_while_its_processes_start_records_them_and_down_stops_them(runs, monkeypatch):
    """The cancellation came inside start_many: the processes ran on, no handle was written, and `atomdeck
    down` found nothing to stop (NOT clean, the ports open). What started is recorded, and the run says so."""
    run = launch_cut_short(workspace("demo-2p1d"), monkeypatch, runs)
    n = len(run.processes)
    assert sorted(h.name for h in run.rd.handles()) == sorted(run.processes)
    assert sorted(alive(run)) == sorted(run.processes)  # left running, as the message says
    meta = run.rd.meta()
    assert meta["status"] == "failed", meta
    assert meta["diagnosis"] == (f"the launch was interrupted while its processes started: {n} of {n} started and "
                                 f"left running; stop them with `atomdeck down {run.id}`"), meta
    from atomdeck.core.config.errors import AtomdeckError

    ws = workspace("demo-2p1d")  # launched again onto the same nodes: refused while they run (the run says failed)
    with pytest.raises(AtomdeckError, match=rf"^node\(s\) in use, nothing was launched: demo-n01–03 by run {run.id} "
                                           r"\(failed: decode-0, prefill-0, prefill-1, router\)"):
        asyncio.run(Run.launch(ws, ws.assess()))
    again = Run.open(run.id)  # another session (`atomdeck down`) finds every process by its handle
    assert again.state.status == "failed" and set(again.handles) == set(run.processes)
    assert {p.stage for p in again.state.procs.values()} == {"launching"}
    report = asyncio.run(again.teardown(grace=2))
    assert report.clean, report.lines()
    assert gone(run) == []


def test_down_sweeps_this_machine_for_processes_no_handle_knows(runs):
    """A launch killed before it wrote its handles (a second Ctrl-C) leaves processes that only their
    environment's marker ties to the run: the local launcher's release sweeps for them, as ssh's and Slurm's do."""
    async def go() -> Run:
        run = await Run.launch(workspace("demo-1p1d"), workspace("demo-1p1d").assess())
        runs.append(run)
        return run

    run = asyncio.run(go())
    assert sorted(alive(run)) == sorted(run.processes)
    for f in (run.rd.path / "procs").glob("*.json"):
        f.unlink()
    again = Run.open(run.id)
    assert again.handles == {}
    report = asyncio.run(again.teardown(grace=2))
    assert report.clean, report.lines()
    assert gone(run) == []
    (swept,) = report.released
    assert swept.startswith("this machine: swept ") and "decode-0, prefill-0, router" in swept, swept
    # and with every handle known, the sweep finds nothing and says nothing
    assert asyncio.run(Run.open(run.id).teardown(grace=1)).released == []


def test_a_handle_file_that_cannot_be_written_fails_the_launch_and_down_still_finds_the_processes(runs, monkeypatch):
    """The handle files are written in a task beside the launch: an error there (a full disk) must reach the
    launch, not be dropped with the task while the launch reports every process started."""
    from atomdeck.core.run.rundir import RunDir

    def full(self, handles):
        raise OSError(28, "No space left on device")

    ws = workspace("demo-1p1d")
    try:
        with monkeypatch.context() as patched, pytest.raises(OSError, match="No space left on device"):
            patched.setattr(RunDir, "save_handles", full)
            asyncio.run(Run.launch(ws, ws.assess()))
    finally:
        runs.extend(Run.open(m["id"]) for m in Run.list())  # torn down whatever happened (the sweep finds them)
    (meta,) = Run.list()
    run = Run.open(meta["id"])
    assert run.handles == {}
    report = asyncio.run(run.teardown(grace=1))  # the sweep finds them by their marker
    assert report.clean and report.released and "swept" in report.released[0], report.lines()


def test_ctrl_c_of_up_while_the_processes_start_says_what_runs_and_how_to_stop_it(runs, monkeypatch, capsys):
    import argparse

    from atomdeck.core.cli.run_verbs import _up

    release = threading.Event()
    reached = hold_starts(monkeypatch, release)
    ws = workspace("demo-1p1d")
    args = argparse.Namespace(json=False, job=None, wait=False, timeout=None)

    async def go() -> None:
        task = asyncio.create_task(_up(ws, ws.assess(), args))
        assert await asyncio.to_thread(reached.wait, 60), "the starter reported no start"
        task.cancel()  # what asyncio.run does with the main task on Ctrl-C
        await asyncio.sleep(0.1)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    (meta,) = Run.list()
    runs.append(Run.open(meta["id"]))
    err = capsys.readouterr().err
    assert (f"atomdeck: the launch was interrupted while its processes started: 3 of 3 started and left running; "
            f"stop them with `atomdeck down {meta['id']}`") in err, err


def test_ctrl_c_of_up_wait_stops_waiting_and_says_the_run_goes_on():
    p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "up", "demo-1p1d", "--wait"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=os.environ | {"ATOMDECK_SIM_SPEED": "1"})  # loads for seconds: waiting when hit
    run_id = p.stdout.readline().strip()
    assert run_id, p.stderr.read()
    try:
        os.kill(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 130, err
        run = Run.open(run_id)
        assert f"atomdeck: interrupted: stopped waiting for run {run_id} (" in err, err
        assert f"it goes on: `atomdeck watch {run_id}` follows it, `atomdeck down {run_id}` stops it" in err, err
        assert "Traceback" not in err, err
        assert sorted(alive(run)) == sorted(run.processes)
    finally:
        down = _atomdeck("down", run_id)
    assert down.returncode == 0 and "verified clean" in down.stdout, down.stdout + down.stderr
    assert gone(Run.open(run_id)) == []


def test_a_second_launch_onto_nodes_a_live_run_uses_is_refused_naming_that_run(runs):
    """A real worker binds its port only once its weights are loaded: the ports check let a second launch onto the
    same nodes go ahead meanwhile. The run directories say which run holds the nodes, and its processes are
    asked (by their marker) whether they live."""
    from atomdeck.core.config.errors import AtomdeckError

    ws = workspace("demo-1p1d")

    async def first() -> Run:
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        return run

    run = asyncio.run(first())
    with pytest.raises(AtomdeckError) as refused:
        asyncio.run(Run.launch(ws, ws.assess()))
    assert str(refused.value) == (
        f"node(s) in use, nothing was launched: demo-n01–02 by run {run.id} (starting: decode-0, prefill-0, "
        f"router); stop it first with `atomdeck down {run.id}`. Or pick other nodes"), refused.value
    assert [m["id"] for m in Run.list()] == [run.id]  # the refused launch left no run directory
    # a run whose processes are gone (nobody watched it: its run.json still says starting) holds nothing
    for h in run.handles.values():
        os.killpg(h.pid, signal.SIGKILL)
    assert Run.open(run.id).rd.meta()["status"] == "starting"
    second = asyncio.run(first())
    assert second.id != run.id and second.state.status == "starting"


def test_cli_up_wait_status_logs_down():
    up = _atomdeck("up", "demo-1p1d", "--wait")
    assert up.returncode == 0, up.stderr
    run_id = up.stdout.strip()
    try:
        st = _atomdeck("status", run_id, "--json")
        import json

        data = json.loads(st.stdout)
        assert data["status"] == "serving" and data["readiness"] == "1/1P 1/1D router serving"
        logs = _atomdeck("logs", run_id, "--process", "router")
        assert "Router ready" in logs.stdout
    finally:
        assert _atomdeck("down", run_id).returncode == 0
    assert "stopped" in _atomdeck("runs").stdout
    # what the launch did, on stderr before the events: the ports, then the count once it is complete
    launch = [line.split("launch", 1)[1].strip() for line in up.stderr.splitlines() if "] launch " in line]
    assert launch == ["checking that the 12 ports are free on 2 nodes", "0 of 3 processes started",
                      "3 of 3 processes started"], up.stderr


def test_up_without_wait_then_status_and_runs_say_serving_once_it_serves():
    """Nobody watches a run started without --wait: `status` does the router's checks itself once the
    router's port is open, and writes what it found, so `runs` says serving too (it stayed `starting`)."""
    import json

    up = _atomdeck("up", "demo-1p1d")
    assert up.returncode == 0, up.stderr
    run_id = up.stdout.strip().splitlines()[-1]
    try:
        deadline = time.monotonic() + 90  # a wait for a condition (the simulator loading), not a timing
        seen = []
        while time.monotonic() < deadline:
            st = _atomdeck("status", run_id, "--json")
            data = json.loads(st.stdout)
            seen.append(data["status"])
            if data["status"] not in ("launching", "starting"):
                break
            time.sleep(1)
        assert data["status"] == "serving", seen
        assert data["readiness"] == "1/1P 1/1D router serving"
        assert Run.open(run_id).state.status == "serving"  # written: a later reader sees it without a pass
        listing = [ln for ln in _atomdeck("runs").stdout.splitlines() if run_id in ln]
        assert listing and "serving" in listing[0], listing
    finally:
        assert _atomdeck("down", run_id).returncode == 0


def test_a_watching_session_records_a_teardown_done_elsewhere_as_stopped(runs):
    """A console watching while `atomdeck down` runs in another process must not call it a crash."""
    ws = workspace()

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=30)
        assert s.status == "serving"
        watcher = asyncio.create_task(run.watch(until=lambda s: all(p.alive is False for p in s.procs.values()),
                                                timeout=20))
        down = await asyncio.create_subprocess_exec(sys.executable, "-m", "atomdeck.core.cli.main", "down", run.id,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert await down.wait() == 0
        return run, await watcher

    run, state = asyncio.run(go())
    assert {p.stage for p in state.procs.values()} == {"stopped"}, {n: p.stage for n, p in state.procs.items()}
    assert state.status != "failed"
    lines = list(state.procs["decode-0"].last_lines)
    assert len(lines) == len(set(lines)) or lines[-10:] != lines[-20:-10]  # no block of lines repeated
    assert Run.open(run.id).state.status == "stopped"


def test_an_open_port_is_rechecked_by_connect_only_not_by_http_every_time(runs):
    """Open cells are re-probed every second to see them close; the barrier asks /health once, when a cell
    opens. Once serving, the health watcher (issue 14) asks /health at most once a second (since issue 19 only
    when no scrape of the worker's /metrics answered in the last 2 s): every later GET /health is one of its
    checks.

    One watch runs throughout (a watch that ends cancels the barrier's checks, and the next one re-checks
    what it had not seen open yet). d = GET /health lines in the prefill's log minus the watcher's checks:
    a check in flight (counted, not yet answered) lowers d by one for a moment; any other GET raises it for
    good. So the highest d of each second of the window must be the same."""
    ws = workspace()

    def health_gets(run) -> int:
        log = Path(run.handles["prefill-0"].log_path).read_text()
        return sum('"GET /health' in ln for ln in log.splitlines())

    async def until(pred, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, "condition not reached"
            await asyncio.sleep(0.02)

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        watching = asyncio.create_task(run.watch())
        try:
            await until(lambda: run.state.status in ("serving", "failed"), 30)
            assert run.state.status == "serving", run.state.diagnosis
            # the barrier's one-time checks are over: every HTTP cell was seen open, its /health check done
            await until(lambda: all(c.state == "open" for c in run.state.cells.values() if c.kind == "http")
                        and not run.watchers.barrier.background, 30)
            health = run.watchers.health
            scraped = run.watchers.metrics.requests.get("prefill-0", 0)
            samples = []  # (watcher checks so far, d)
            for second in range(4):
                t1 = time.monotonic() + 1.0
                while time.monotonic() < t1:
                    checks = health.requests.get("prefill-0", 0)
                    samples.append((second, checks, health_gets(run) - checks))
                    await asyncio.sleep(0.02)
            return samples, run.watchers.metrics.requests.get("prefill-0", 0) - scraped
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)

    samples, scrapes = asyncio.run(go())
    top = [max(d for sec, _, d in samples if sec == i) for i in range(4)]
    assert top[0] <= 2  # before the window: atomdeck's one check and AToMesh's own start-up probe
    assert top == [top[0]] * 4, samples  # no GET /health but the watcher's
    first, last = samples[0][1], samples[-1][1]
    # issue 19: the watcher asks a worker whose /metrics scrapes answer (every 2 s) no /health on top of them
    # (before: 2-5 checks in these 4 s, one a second); so it asked, by a scrape, and checked at most every 2 s
    assert scrapes >= 1 and 0 <= last - first <= 3, (scrapes, first, last)


def test_past_the_scrape_budget_each_endpoint_is_scraped_less_often_and_not_asked_in_between(runs, monkeypatch):
    """issue 19: at most metrics.MAX_SCRAPES_S scrapes a second over all endpoints (64P64D + router: each
    every 3.2 s, not 2), and the health checks' window follows the scrape period, so a worker whose scrapes
    answer still gets no /health on top. Here the budget is set to 0.5 a second: 2P1D + router's 4
    endpoints are each scraped every 8 s."""
    from atomdeck.core.run.watchers import metrics

    monkeypatch.setattr(metrics, "MAX_SCRAPES_S", 0.5)
    ws = workspace("demo-2p1d")

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        watching = asyncio.create_task(run.watch())
        try:
            deadline = time.monotonic() + 60
            while run.state.status not in ("serving", "failed"):
                assert time.monotonic() < deadline, "not serving"
                await asyncio.sleep(0.05)
            assert run.state.status == "serving", run.state.diagnosis
            mw, health = run.watchers.metrics, run.watchers.health
            while not mw.requests.get("prefill-0"):  # its first scrape
                await asyncio.sleep(0.05)
            s0, h0 = mw.requests["prefill-0"], health.requests.get("prefill-0", 0)
            await asyncio.sleep(12.0)
            return mw.period(), mw.requests["prefill-0"] - s0, health.requests.get("prefill-0", 0) - h0
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)

    period, scrapes, checks = asyncio.run(go())
    assert period == 8.0
    assert 1 <= scrapes <= 2, scrapes  # every 8 s (at the 2 s default: 6)
    assert checks <= 1, checks  # its scrapes answered: /health not asked on top (at a 2 s window: ~3)
