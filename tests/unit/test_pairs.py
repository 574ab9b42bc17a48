"""Handshake pairs are credited from the log lines that name them: with one prefill and two decodes, a
producer's line that does not say which consumer it served must not mark both pairs."""

from __future__ import annotations

from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.events import new_state
from atomdeck.core.run.run import Run
from atomdeck.core.run.rundir import RunDir


def one_prefill_two_decodes() -> Run:
    ws = load_workspace("demo-1p1d", "local")
    ws.inventory = ws.cluster.static_inventory()
    ws.recipe = set_field(ws.recipe, "decode.workers", 2)
    a = ws.assess()
    plan = a.plan
    rd = RunDir.create("20261129-000000-pairs-0001")
    pairs = [(p.name, d.name) for p in plan.role_endpoints("prefill") for d in plan.role_endpoints("decode")]
    state = new_state(rd.id, [(p.name, p.role, p.node) for p in a.processes], [], pairs)
    return Run(rd, plan.recipe, plan.cluster, plan, a.processes, None, state)  # type: ignore[arg-type]


def stages(run: Run) -> dict[str, str]:
    return {k: pr.stage for k, pr in run.state.pairs.items()}


def test_a_producer_line_without_its_consumer_credits_no_pair_of_several():
    run = one_prefill_two_decodes()
    assert len(run.state.pairs) == 2
    before = stages(run)
    run._on_line("prefill-0", "[atom 12:00:00] [PRODUCER] write-done sent for req 0")
    assert stages(run) == before  # could be about either decode: left to the decode-side lines


def test_the_consumer_named_in_a_producer_line_or_the_decodes_own_line_credits_only_its_pair():
    run = one_prefill_two_decodes()
    d0, d1 = (ep for ep in run.plan.role_endpoints("decode"))
    run._on_line("prefill-0", f"[atom 12:00:00] [PRODUCER] Consumer {d1.host}:15571 has NO registered buffers.")
    got = stages(run)
    assert [k for k, v in got.items() if v == "failed"] == [k for k in got if d1.name in k]
    run._on_line(d0.name, "[atom 12:00:01] [CONSUMER] Write-done received for req 3, done_recving now: {3}")
    got = stages(run)
    assert [k for k, v in got.items() if v == "transferred"] == [k for k in got if d0.name in k]


def test_at_most_runs_n_jobs_at_a_time_and_raises_only_after_all_ended():
    """The handshake probes of several consumers run side by side, a few at a time (one after another,
    64P64D's 64 decodes took 30 s after serving to fill the matrix); one that fails leaves none running."""
    import asyncio

    import pytest
    from atomdeck.core.run.watchers.pairs import at_most

    running, most, ended = 0, 0, []

    async def job(i: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        ended.append(i)
        if i == 2:
            raise RuntimeError("probe failed")

    with pytest.raises(RuntimeError, match="probe failed"):
        asyncio.run(at_most(3, [job(i) for i in range(10)]))
    assert most == 3 and sorted(ended) == list(range(10))


def test_at_most_cancelled_leaves_no_job_unawaited():
    """A teardown cancels the probes while some still wait for their turn: those are closed, not left for the
    garbage collector to warn about ("coroutine ... was never awaited", seen once in a lab run's teardown)."""
    import asyncio
    import gc
    import warnings

    from atomdeck.core.run.watchers.pairs import at_most

    async def probe() -> None:
        await asyncio.sleep(10)

    async def cancelled(after: float) -> None:
        task = asyncio.ensure_future(at_most(1, [probe() for _ in range(3)]))  # noqa: RUF006
        await asyncio.sleep(after)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        asyncio.run(cancelled(0.05))  # one job running, two waiting for the gate
        asyncio.run(cancelled(0))  # before any job's task first ran (seen again in a lab run, 2026-12-04)
        gc.collect()
    assert not [w for w in seen if "never awaited" in str(w.message)]
