"""Acting on a live run on the local launcher (issue 38): restart one process in place and remove a worker while a
steady load flows through the router, with zero failed requests; the run's records (status, reattach, teardown)
know what happened; bad input and faults each get a clear answer and leave nothing unknown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.run import actions
from atomdeck.core.run.intents import ActionBusy, read
from atomdeck.core.run.run import Run

from tests.leftovers import gone
from tests.load import Load

from .conftest import workspace

pytestmark = pytest.mark.slow


def serve(ws, runs) -> Run:
    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        await run.close()
        return run
    return asyncio.run(go())


def act(run_id: str, coro_fn):
    """A new session acts on the run while it watches it (as the CLI verbs do): (result, its final state)."""
    async def go():
        run = Run.open(run_id)
        watch = asyncio.create_task(run.watch())
        try:
            return await coro_fn(run), run.state
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            await run.close()
    return asyncio.run(go())


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
    """decode: restart {max_restarts: 1, backoff_seconds: 0.2}; the fault kills it again after every start: it is
    relaunched once, then the policy stops, says why, and the run fails (the role is critical)."""
    ws = workspace("demo-1p1d", decode__env={"ATOMSIM_CRASH_AFTER": "1"},
                   decode__restart={"max_restarts": 1, "backoff_seconds": 0.2})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        return run, await run.watch(until=lambda s: s.status == "failed", timeout=60)

    run, state = asyncio.run(go())
    relaunches = [a for a in state.actions.values() if a.target == "decode-0" and a.source.startswith("restart policy")]
    assert len(relaunches) == 1 and relaunches[0].outcome == "done", [(a.outcome, a.detail) for a in relaunches]
    assert "not relaunched again" in state.diagnosis and "max_restarts 1" in state.diagnosis, state.diagnosis
    assert state.procs["decode-0"].restarts == 1


def test_a_role_that_is_not_critical_leaves_the_run_degraded_not_failed(runs):
    ws = workspace("demo-2p1d", decode__workers=2, decode__critical=False,
                   decode__env={"ATOMSIM_CRASH_AFTER": "1", "ATOMSIM_ONLY": "127.0.0.14"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        return run, await run.watch(until=lambda s: s.procs["decode-1"].alive is False, timeout=30)

    run, state = asyncio.run(go())
    assert state.status == "degraded", (state.status, state.diagnosis)
    assert "not critical" in state.diagnosis, state.diagnosis
    with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=2) as load:
        load.wait_for(4)  # the other decode serves
