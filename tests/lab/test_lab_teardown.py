"""Teardown of processes in any state (issue 17.7): a frozen worker (state T) with a request to it in flight."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from atomdeck.core.run.run import Run

from tests.frozen import request_in_flight, stop
from tests.leftovers import open_ports

from .runhelpers import node_pids, run_pids, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]

GRACE = 3.0


def _freeze(lab, node: str, run_id: str, name: str) -> list[int]:
    """SIGSTOP every process of `name` inside its node (supervisor and engine alike), as a debugger or a
    frozen container leaves them; returns their pids once the kernel shows them stopped."""
    pids = node_pids(lab, node, f'tr "\\0" "\\n" < "$f" 2>/dev/null | grep -qx "ATOMDECK_RUN={run_id}:{name}"')
    assert pids, f"no {name} process of {run_id} on {node}"
    stop(pids)  # (the lab's nodes share this machine's process table)
    return pids


@pytest.mark.parametrize("cluster", ["lab", "lab-ssh"])
def test_frozen_decode_with_a_request_in_flight_tears_down_on_sigterm(lab, cluster, record_property):
    ws = workspace("demo-1p1d", cluster)

    async def go():
        run = await Run.launch(ws, ws.assess())
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert state.status == "serving", state.diagnosis
        await run.close()
        return run

    run = asyncio.run(go())
    decode = run.plan.endpoint("decode-0")
    _freeze(lab, decode.node, run.id, "decode-0")
    done = threading.Event()
    threading.Thread(target=request_in_flight, args=(run.plan.router.url, ws.recipe.model.client_name, done), daemon=True).start()
    # the router has relayed it: the frozen decode's socket holds the request (the router cannot finish it)
    assert not done.wait(1.0)
    t0 = time.monotonic()
    report = asyncio.run(Run.open(run.id).teardown(grace=GRACE))
    took = time.monotonic() - t0
    record_property("teardown_s", round(took, 2))
    print(f"teardown of a frozen decode on {cluster}: {took:.2f}s with grace {GRACE:g}s", report.lines())
    assert report.clean, report.lines()
    by_name = {r.name: r for r in report.processes}
    # SIGCONT went with SIGTERM: the frozen decode and the router waiting on it both left on SIGTERM,
    # nobody waited out the grace period for a SIGKILL
    for name in ("decode-0", "router"):
        assert "KILL" not in by_name[name].detail and "killed" not in by_name[name].detail, by_name[name].detail
    assert run_pids(lab, run.id) == {} and open_ports(run) == []
