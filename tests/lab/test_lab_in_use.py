"""A second launch onto nodes a live ssh run uses is refused naming that run (its processes polled on those
nodes); onto other nodes it goes ahead."""

from __future__ import annotations

import asyncio

import pytest
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.run.run import Run

from .runhelpers import launch, run_pids, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_a_launch_onto_nodes_of_a_live_ssh_run_is_refused_and_onto_others_goes_ahead(lab):
    ws = workspace("demo-1p1d", "lab-ssh")
    a = ws.assess(["mia1-p01-g01", "mia1-p01-g02"])
    started: list[Run] = []

    async def go() -> None:
        first = await launch(ws, a=a)
        started.append(first)
        await first.close()
        with pytest.raises(AtomdeckError) as refused:
            await Run.launch(ws, ws.assess(["mia1-p01-g02", "mia1-p01-g03"]))
        assert str(refused.value).startswith(
            f"node(s) in use, nothing was launched: mia1-p01-g02 by run {first.id} (starting: decode-0); stop it "
            f"first with `atomdeck down {first.id}`"), refused.value
        other = await launch(ws, ["mia1-p01-g03", "mia1-p01-g04"])
        started.append(other)
        await other.close()

    try:
        asyncio.run(go())
    finally:
        for run in started:
            report = teardown(run.id)
            assert report.clean, report.lines()
    assert len(started) == 2 and all(run_pids(lab, run.id) == {} for run in started)

