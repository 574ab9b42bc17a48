"""A watcher's loops end when cancelled, even when what they wait for happens in the same turn of the
event loop as the cancellation (issue 19: a watcher whose console had died stayed alive for good).

On Python 3.11, asyncio.wait_for runs its awaitable in a task of its own; when that task finishes in the
turn the caller is cancelled (an Event set and a cancel together), wait_for returns normally and the
cancellation is lost. A loop around such a wait then runs on: the log follower under a stream of
writes, the barrier's node loop when it is woken. These tests make the two happen together on purpose
(the event is set as the inotify reader or a hint sets it), then wait for the task to end; without the
fix it never does. Real files, real inotify, real sockets; no timing is asserted (WAIT only bounds a
wait that, without the fix, would never end)."""

from __future__ import annotations

import asyncio

from atomdeck.core.remote import inotify
from atomdeck.core.remote.filetail import follow
from atomdeck.core.run.events import CellState

from .test_barrier_floors import bound_port, hourly, run_prober  # noqa: F401 (hourly is a fixture)

HOUR = 3600.0
WAIT = 10.0


async def parked(event: asyncio.Event) -> None:
    """Until a task waits on `event` (the wait under test has begun)."""
    while not event._waiters:  # type: ignore[attr-defined]
        await asyncio.sleep(0)


async def ended_cancelled(task: asyncio.Task) -> bool:
    done, _ = await asyncio.wait({task}, timeout=WAIT)
    return task in done and task.cancelled()


def test_a_log_follower_ends_when_cancelled_as_a_write_is_noticed(tmp_path):
    path = tmp_path / "p.log"
    path.write_text("one\n")

    async def main() -> bool:
        got: list[str] = []

        async def consume() -> None:
            async for _, line in follow(str(path), max_interval=HOUR):  # file events only: no poll comes round
                got.append(line)

        task = asyncio.create_task(consume())
        while not got:
            await asyncio.sleep(0.01)
        watcher = inotify._watchers[asyncio.get_running_loop()]
        (sub,) = [s for names in watcher.subs.values() for subs in names.values() for s in subs]
        await parked(sub.event)  # the follower read the file and waits for the next write
        sub.event.set()  # a write, as the inotify reader reports it ...
        task.cancel()  # ... in the same turn as the follower's cancellation
        return await ended_cancelled(task)

    assert asyncio.run(main())


def test_a_barrier_node_loop_ends_when_cancelled_as_it_is_woken(hourly):  # noqa: F811
    sock = bound_port()
    cell = CellState("n1", "127.0.0.1", sock.getsockname()[1], "decode", "http", "decode-0")

    async def main() -> bool:
        prober, task, results, until = await run_prober(cell, set())
        await until(1)  # refused; the next probe is an hour away: the loop waits for a wake
        await parked(prober._wake["n1"])
        prober.wake("n1")  # a hint, or a process's death ...
        task.cancel()  # ... in the same turn as the loop's cancellation
        return await ended_cancelled(task)

    try:
        assert asyncio.run(main())
    finally:
        sock.close()


def test_core_waits_with_asyncio_timeout_not_wait_for():
    """Every bounded wait in core is `async with asyncio.timeout(...)`, which runs in the caller's own
    task and so cannot lose a cancellation the way 3.11's wait_for can (the races above). Read from
    the code, like the layer rules."""
    import ast

    from tests.conftest import ROOT

    found = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "wait_for" \
                    and isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], "use `async with asyncio.timeout(s):` instead of asyncio.wait_for at " + ", ".join(found)
