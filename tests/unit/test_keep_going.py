"""A watcher that fails (an SSH drop under a `cat` or `squeue` through the login host) is said and run
again; it does not leave the run looking watched while nothing watches it."""

from __future__ import annotations

import asyncio

import pytest

from .test_pairs import one_prefill_two_decodes


def test_a_failing_watcher_is_reported_and_run_again_until_it_succeeds():
    run = one_prefill_two_decodes()
    attempts = []

    async def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionResetError("Connection lost to mia1-login")

    asyncio.run(run._keep_going("watching decode-0", flaky, first_delay=0.01))
    assert len(attempts) == 3
    notes = [text for _, text in run.state.notes]
    assert notes == ["watching decode-0 failed (Connection lost to mia1-login); trying again in 0.01s",
                     "watching decode-0 failed (Connection lost to mia1-login); trying again in 0.02s"]


def test_cancelling_stops_it_at_once():
    run = one_prefill_two_decodes()

    async def main():
        async def forever():
            raise OSError("down")

        task = asyncio.create_task(run._keep_going("probing g01", forever, first_delay=10))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
