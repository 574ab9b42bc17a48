"""Acting on a live run on the local launcher (issue 38): restart one process in place and remove a worker while a
steady load flows through the router, with zero failed requests; the run's records (status, reattach, teardown)
know what happened; bad input and faults each get a clear answer and leave nothing unknown."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.run import actions
from atomdeck.core.run.intents import ActionBusy, read
from atomdeck.core.run.run import Run

from tests.acting import act
from tests.leftovers import gone
from tests.load import Load

from .conftest import serving, workspace

pytestmark = pytest.mark.slow


def serve(ws, runs) -> Run:
    return serving(ws, runs)


def two_by_two():
    return workspace("demo-2p1d", decode__workers=2)


@pytest.mark.parametrize("target", ["prefill-1", "decode-0"])
def test_a_restart_under_load_loses_no_request(runs, target):
    run = serve(two_by_two(), runs)
    old = run.handles[target].pid
    with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=8) as load:
        load.wait_for(20)
        result, state = act(run.id, lambda r: actions.restart(r, target, drain_timeout=30))
        before = load.ok
        load.wait_for(before + 20)  # and it keeps serving afterwards
    assert result.outcome == "done", result.detail
    assert load.failed == [], load.failed[:5]
    steps = [s for _, s, _ in result.steps]
    for step in ("draining", "drained", "stopping", "stopped", "starting", "loading", "ready", "registering",
                 "registered", "smoke", "done"):
        assert step in steps, steps
    p = state.procs[target]
    assert p.stage == "serving" and p.restarts == 1 and p.pid != old and p.alive
    assert state.status == "serving", state.diagnosis
    # a later session knows it: the action, the new process, the restart count
    again = Run.open(run.id)
    assert again.handles[target].pid == p.pid and again.state.procs[target].restarts == 1
    a = next(a for a in again.state.actions.values() if a.target == target)
    assert a.outcome == "done" and a.kind == "restart" and "CLI" in a.source
    assert read(again.rd.path, target).step == "done"
    report = asyncio.run(again.teardown(grace=3))
    assert report.clean, report.lines()
    assert gone(run) == []


def test_remove_a_decode_under_load_then_status_reattach_and_down_know_it(runs):
    run = serve(two_by_two(), runs)
    with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=8) as load:
        load.wait_for(20)
        result, state = act(run.id, lambda r: actions.remove(r, "decode-1", drain_timeout=30))
        before = load.ok
        load.wait_for(before + 20)
    assert result.outcome == "done", result.detail
    assert load.failed == [], load.failed[:5]
    assert state.procs["decode-1"].removed and state.procs["decode-1"].stage == "stopped"
    assert state.status == "serving" and state.readiness() == "2/2P 1/1D router serving", state.readiness()
    assert not any(c.owner == "decode-1" for c in state.cells.values())
    again = Run.open(run.id)
    assert again.state.procs["decode-1"].removed and again.state.status == "serving"
    out = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "status", run.id], capture_output=True,
                         text=True, timeout=60, env=os.environ)
    assert "decode-1" in out.stdout and "(removed)" in out.stdout and "remove   decode-1" in out.stdout, out.stdout
    # the only decode left cannot be removed: the router would have none
    with pytest.raises(AtomdeckError, match="only decode"):
        act(run.id, lambda r: actions.remove(r, "decode-0"))
    report = asyncio.run(Run.open(run.id).teardown(grace=3))
    assert report.clean, report.lines()


def test_bad_input_is_refused_naming_what_to_change(runs):
    run = serve(workspace("demo-1p1d"), runs)
    with pytest.raises(AtomdeckError, match="has no process decode-7; its processes: prefill-0, decode-0, router"):
        act(run.id, lambda r: actions.restart(r, "decode-7"))
    with pytest.raises(AtomdeckError, match="nothing to resume"):
        act(run.id, lambda r: actions.restart(r, "decode-0", resume=True))
    with pytest.raises(AtomdeckError, match="router cannot be removed"):
        act(run.id, lambda r: actions.remove(r, "router"))
    assert asyncio.run(Run.open(run.id).teardown(grace=3)).clean
    with pytest.raises(AtomdeckError, match="is stopped: there is nothing to act on"):
        act(run.id, lambda r: actions.restart(r, "decode-0"))


def test_a_second_action_on_the_same_process_is_refused_naming_the_first(runs):
    run = serve(workspace("demo-2p1d", prefill__env={"ATOMSIM_SLOW_LOAD": "0"}), runs)

    async def both(r: Run):
        first = asyncio.create_task(actions.restart(r, "prefill-1", drain_timeout=5))
        while (intent := read(r.rd.path, "prefill-1")) is None or intent.step == "requested":
            await asyncio.sleep(0.01)
        try:
            await actions.restart(Run.open(r.id), "prefill-1")
        except ActionBusy as e:
            refused = str(e)
        else:
            refused = ""
        return refused, await first

    (refused, result), _ = act(run.id, both)
    assert result.outcome == "done", result.detail
    assert refused.startswith("prefill-1 is busy: restart of prefill-1 by CLI on ") and "step:" in refused, refused


def test_a_restart_cut_short_is_shown_and_can_be_finished(runs):
    """The acting session is killed while the new process loads (its model takes 3 s more): the record says
    where it stopped; a later session sees it cut short and finishes it."""
    ws = workspace("demo-2p1d")
    run = serve(ws, runs)
    code = ("import asyncio, sys\nfrom atomdeck.core.run.run import Run\nfrom atomdeck.core.run import actions\n"
            "async def go():\n    r = Run.open(sys.argv[1])\n    w = asyncio.create_task(r.watch())\n"
            "    await actions.restart(r, 'prefill-1', spec=None)\nasyncio.run(go())\n")
    env = {**os.environ, "ATOMSIM_SLOW_LOAD": "3"}  # (the new prefill-1 loads 3 s longer)
    p = subprocess.Popen([sys.executable, "-c", code, run.id], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while (i := read(run.rd.path, "prefill-1")) is None or i.step != "loading":
            assert time.monotonic() < deadline and p.poll() is None, "never reached loading"
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    intent = read(run.rd.path, "prefill-1")
    assert intent.cut_short and intent.step in ("loading", "ready", "handshake"), intent
    seen = Run.open(run.id)
    asyncio.run(seen.refresh())
    a = next(a for a in seen.state.actions.values() if a.target == "prefill-1")
    assert a.outcome == "interrupted" and "--resume" in a.detail, (a.outcome, a.detail)
    with pytest.raises(ActionBusy, match="cut short at step"):
        act(run.id, lambda r: actions.restart(r, "prefill-1"))
    result, state = act(run.id, lambda r: actions.restart(r, "prefill-1", resume=True))
    assert result.outcome == "done", result.detail
    assert state.procs["prefill-1"].stage == "serving" and state.status == "serving"


def test_the_restart_policy_relaunches_a_dead_worker_and_never_loops(runs):
    """decode: restart {max_restarts: 1, backoff_seconds: 0.2}; after every start the fault kills it a second after
    its first request: it is relaunched once, then the policy stops, says why, and the run fails (it is critical)."""
    ws = workspace("demo-1p1d", decode__env={"ATOMSIM_CRASH_AFTER_SERVED": "1"},
                   decode__restart={"max_restarts": 1, "backoff_seconds": 0.2})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        # one watch throughout: the policy's relaunch is this session's action (a watch that ends cuts it short)
        return run, await run.watch(until=lambda s: s.status == "failed" and not any(
            a.running for a in s.actions.values()), timeout=90)

    run, state = asyncio.run(go())
    relaunches = [a for a in state.actions.values() if a.target == "decode-0" and a.source.startswith("restart policy")]
    # (the relaunched worker dies 1 s after it serves: its relaunch ends done, or failed naming that, by timing)
    assert len(relaunches) == 1 and relaunches[0].outcome in ("done", "failed"), [(a.outcome, a.detail)
                                                                                   for a in relaunches]
    assert "not relaunched again" in state.diagnosis and "max_restarts 1" in state.diagnosis, state.diagnosis
    assert state.procs["decode-0"].restarts == (1 if relaunches[0].outcome == "done" else 0)


def test_a_role_that_is_not_critical_leaves_the_run_degraded_not_failed(runs):
    ws = workspace("demo-2p1d", decode__workers=2, decode__critical=False,
                   decode__env={"ATOMSIM_CRASH_AFTER_SERVED": "1", "ATOMSIM_ONLY": "127.0.0.14"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        # requests until the router has sent decode-1 one (its rank dies a second after its first)
        with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=2):
            return run, await run.watch(until=lambda s: s.procs["decode-1"].alive is False, timeout=30)

    run, state = asyncio.run(go())
    assert state.status == "degraded", (state.status, state.diagnosis)
    assert "not critical" in state.diagnosis, state.diagnosis
    with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=2) as load:
        load.wait_for(4)  # the other decode serves


def test_a_restarted_worker_that_cannot_come_up_is_named_and_a_resume_brings_it_back(runs):
    """While decode-0 is stopped for its restart, something else takes its HTTP port (a stray server on the node):
    the new process cannot bind and exits 1; the action fails naming that, with the command that finishes it. With
    the port free again, --resume starts it and the run serves as before."""
    run = serve(workspace("demo-1p1d"), runs)
    ep = run.plan.endpoint("decode-0")
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (the old process's connections in TIME_WAIT)

    async def go(r: Run):
        def hear(e) -> None:
            if e.kind == "action" and e.name == "decode-0" and e.value == "stopped" and squatter.fileno() >= 0:
                squatter.bind((ep.host, ep.http_port))
                squatter.listen()
        r.listeners.append(hear)
        return await actions.restart(r, "decode-0", drain_timeout=10)

    try:
        result, state = act(run.id, go)
        assert squatter.getsockname()[1] == ep.http_port, "the port was never taken: the test proves nothing"
    finally:
        squatter.close()
    assert result.outcome == "failed", (result.outcome, result.detail)
    assert "the new decode-0 (pid" in result.detail and "address already in use" in result.detail, result.detail
    assert f"atomdeck restart {run.id} decode-0 --resume" in result.detail, result.detail
    assert state.procs["decode-0"].alive is False
    assert state.status == "failed" and "address already in use" in state.diagnosis, state.diagnosis
    result, state = act(run.id, lambda r: actions.restart(r, "decode-0", resume=True))
    assert result.outcome == "done", result.detail
    assert state.procs["decode-0"].stage == "serving" and state.status == "serving", state.diagnosis
    with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=2) as load:
        load.wait_for(6)
    assert load.failed == [], load.failed[:3]
    assert asyncio.run(Run.open(run.id).teardown(grace=3)).clean


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *argv], capture_output=True, text=True,
                          timeout=120, env=os.environ)


def interrupt_at(argv: list[str], run_dir, target: str, steps: tuple[str, ...], saying: str = "") -> str:
    """The CLI acting, interrupted (Ctrl-C) once its record reaches one of `steps` (its detail `saying`): its
    stderr."""
    p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", *argv], stderr=subprocess.PIPE, text=True,
                         env=os.environ, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while (i := read(run_dir, target)) is None or i.step not in steps or saying not in i.detail:
            assert time.monotonic() < deadline and p.poll() is None, f"never reached {steps}: {i}"
            time.sleep(0.02)
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, (p.returncode, err)
    return err


def test_actions_cut_short_by_ctrl_c_are_undone_by_rollback(runs):
    """Ctrl-C while a removal drains (decode-1 is out of the router, still running): the CLI names both ways on;
    --rollback registers it again and it serves. Ctrl-C while an added decode loads: --rollback stops it and takes
    it out of the run. A restart cut short after its stop cannot be rolled back, and says what finishes it."""
    run = serve(two_by_two(), runs)
    # long requests: the drain waits for them (as its worker's own metrics count them), so it is interrupted there
    with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=8, max_tokens=1500) as load:
        load.wait_for(2)
        err = interrupt_at(["remove", run.id, "decode-1"], run.rd.path, "decode-1", ("draining",), "in flight")
        assert f"atomdeck remove {run.id} decode-1 --rollback" in err and "--resume" in err, err
        out = cli("remove", run.id, "decode-1", "--rollback", "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        got = json.loads(out.stdout)
        assert got["action"]["outcome"] == "rolled back", got
        assert "registering" in [st["step"] for st in got["action"]["steps"]], got  # (it was out of the router)
        load.wait_for(load.ok + 4)
    assert load.failed == [], load.failed[:3]
    again = Run.open(run.id)
    assert not again.state.procs["decode-1"].removed
    listed = asyncio.run(_router_lists(again, "decode-1"))
    assert listed, "decode-1 was not registered with the router again"

    out = cli("remove", run.id, "decode-1")  # a decode's slot for the add below
    assert out.returncode == 0, out.stdout + out.stderr
    err = interrupt_at(["add", run.id, "--role", "decode"], run.rd.path, "decode-1", ("loading",))
    assert f"atomdeck remove {run.id} decode-1 --rollback" in err, err
    out = cli("remove", run.id, "decode-1", "--rollback")
    assert out.returncode == 0 and "rolled back" in out.stdout, out.stdout + out.stderr
    again = Run.open(run.id)
    assert again.state.procs["decode-1"].removed and again.state.procs["decode-1"].alive is False
    assert not asyncio.run(_router_lists(again, "decode-1"))

    err = interrupt_at(["restart", run.id, "decode-0"], run.rd.path, "decode-0", ("loading",))
    out = cli("restart", run.id, "decode-0", "--rollback")
    assert out.returncode == 2 and "nothing to put back" in out.stderr and "--resume" in out.stderr, out.stderr
    out = cli("restart", run.id, "decode-0", "--resume")
    assert out.returncode == 0, out.stdout + out.stderr
    assert asyncio.run(Run.open(run.id).teardown(grace=3)).clean


async def _router_lists(run: Run, name: str) -> bool:
    from atomdeck.core.run.drain import RouterSide

    side = RouterSide(run)
    try:
        return await side.listed(name)
    finally:
        await side.close()
