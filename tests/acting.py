"""A session that acts on a live run while it watches it, as the CLI's action verbs do (tests of issue 38 and
bench/actions.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from atomdeck.core.run.run import Run


async def acting(run_id: str, coro_fn: Callable[[Run], Awaitable[Any]]) -> tuple[Any, Any]:
    """(what `coro_fn(run)` returned, the run's state when it returned), the run opened and watched meanwhile."""
    run = Run.open(run_id)
    watch = asyncio.create_task(run.watch())
    try:
        return await coro_fn(run), run.state
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await run.close()


def act(run_id: str, coro_fn: Callable[[Run], Awaitable[Any]]) -> tuple[Any, Any]:
    """`acting` from a test's thread."""
    return asyncio.run(acting(run_id, coro_fn))
