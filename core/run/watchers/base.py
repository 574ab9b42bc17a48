"""What a watcher may use of the run it watches, and the helpers every watcher shares.

A watcher is a small object that HAS a reference to its run (composition): it reads the run's state
and plan, talks to nodes through the run's launcher, and reports only by emitting events. Any object
with these attributes can host one, so each watcher is testable alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from ...remote.backoff import Backoff
from ..events import CellState, Event, RunState

if TYPE_CHECKING:
    from ...config.recipe import Recipe
    from ...design.commands import ProcessSpec
    from ...design.plan import Plan
    from ...launch.base import Launcher, ProcHandle
    from ..intents import Intent


class RunHost(Protocol):
    id: str
    state: RunState
    plan: Plan
    recipe: Recipe
    launcher: Launcher
    handles: dict[str, ProcHandle]
    processes: dict[str, ProcessSpec]
    offsets: dict[str, int]
    stopping: bool
    line_listeners: list[Callable[[str, str], None]]
    listeners: list[Callable[[Event], None]]

    def emit(self, e: Event) -> None: ...

    def emit_stage(self, name: str, stage: str, detail: str = "") -> bool: ...

    def _fail(self, why: str | None = None) -> None: ...

    def _set_status(self, status: str, detail: str | None = None) -> None: ...

    def save_offsets(self) -> None: ...

    def torn_down_elsewhere(self) -> bool: ...

    def expected_exit(self, name: str, pid: int | None = None) -> Intent | None: ...

    def saved_handle(self, name: str) -> ProcHandle | None: ...

    def intents(self) -> dict[str, Intent]: ...

    def adopt_from_disk(self) -> list[str]: ...

    def redact(self, line: str) -> str: ...


class WatcherGroup(Protocol):
    """The other watchers of the run, as one watcher sees them (`Watchers` in __init__.py is the group): what a
    watcher tells its neighbours. A watcher module imports this, never its package, so that the package can
    import every watcher without an import circle."""

    @property
    def barrier(self) -> _Barrier: ...

    @property
    def binding(self) -> _Binding: ...

    @property
    def pairs(self) -> _Pairs: ...

    @property
    def health(self) -> _Health: ...

    def settle(self) -> None: ...

    def adopt(self, names: list[str]) -> None: ...

    @property
    def policy(self) -> _Policy: ...


class _Policy(Protocol):  # policy.py's RestartPolicyWatcher
    def on_exit(self, name: str, code: int | None, why: str) -> bool: ...


class _Barrier(Protocol):  # ports.py's BarrierWatcher
    def wake(self, node: str | None) -> None: ...

    def hint(self, name: str, node: str) -> None: ...

    def look_again(self) -> None: ...

    def unconfirmed(self) -> list[CellState]: ...


class _Binding(Protocol):  # binding.py's BindWatcher
    def ready(self, name: str, line: str) -> None: ...


class _Pairs(Protocol):  # pairs.py's HandshakeWatcher
    def on_line(self, name: str, role: str, value: str, line: str) -> None: ...

    async def checks(self) -> None: ...

    def again(self, name: str) -> None: ...

    def parked(self, decode: str, count: float | None, now: float) -> dict: ...


class _Health(Protocol):  # health.py's ServingHealth
    def answered(self, name: str) -> None: ...


async def cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel tasks and wait for them; re-cancel any that swallowed the first cancellation."""
    pending = [t for t in tasks if not t.done()]
    for _ in range(10):
        if not pending:
            return
        for t in pending:
            t.cancel()
        _, still = await asyncio.wait(pending, timeout=0.5)
        pending = list(still)


# a watcher that failed runs again after 1 s (first_delay), ×2, at most 15 s apart, forever
WATCHER_RETRY = Backoff(first_s=1.0, factor=2.0, max_s=15.0, give_up_s=None)


async def keep_going(emit: Callable[[Event], None], what: str, factory: Callable[[], Awaitable[None]],
                     first_delay: float = 1.0) -> None:
    """Run a watcher; if it fails (an SSH connection to the login host dropped under a `cat` or a
    `squeue`), say so and run it again with back-off, instead of watching nothing from then on
    while the run still looks watched. Logs resume from the saved offsets: no line twice."""
    delays = replace(WATCHER_RETRY, first_s=first_delay).delays()
    while True:
        try:
            await factory()
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:
            delay = next(delays)
            emit(Event("note", what, detail=f"{what} failed ({e}); trying again in {delay:g}s"))
            await asyncio.sleep(delay)


def background(tasks: set[asyncio.Task], coro: Awaitable[None]) -> None:
    """Start a short job and keep a reference until it is done (the watch cancels what is left)."""
    task = asyncio.ensure_future(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
