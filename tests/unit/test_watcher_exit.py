"""The watcher process ends when its work ends, even if a task it leaves behind ignores cancellation:
asyncio.run waits for such a task forever (a watcher whose console had died stayed alive for good)."""

from __future__ import annotations

import subprocess
import sys

STUBBORN = """
import asyncio, sys
from atomdeck.core.cli.watcher import run_bounded

async def stubborn():
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue  # swallows every cancellation

async def polite():
    await asyncio.sleep(3600)

async def work():
    asyncio.create_task(stubborn(), name="stubborn")
    asyncio.create_task(polite(), name="polite")
    await asyncio.sleep(0)
    return 3

sys.exit(run_bounded(work(), grace_s=0.2))
"""

POLITE = """
import asyncio, sys
from atomdeck.core.cli.watcher import run_bounded

async def work():
    asyncio.create_task(asyncio.sleep(3600), name="polite")
    await asyncio.sleep(0)
    return 0

sys.exit(run_bounded(work()))
"""


def test_a_task_that_ignores_cancellation_does_not_keep_the_watcher_alive():
    # the timeout only guards against a hang (what asyncio.run does here); nothing is timed
    r = subprocess.run([sys.executable, "-c", STUBBORN], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert "1 task(s) still running" in r.stderr and "stubborn" in r.stderr and "polite" not in r.stderr


def test_tasks_that_end_when_cancelled_end_cleanly():
    r = subprocess.run([sys.executable, "-c", POLITE], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
