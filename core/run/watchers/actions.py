"""Actions on the live run by any session (core/run/intents.py): each step its record says is told as an event
(not written again: the acting session writes its own), an action whose session went away is told as cut short,
and the run's status follows (degraded while a worker is out)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..events import Event
from ..intents import how_to_finish
from .base import RunHost

if TYPE_CHECKING:
    from .base import WatcherGroup as Watchers  # (the package imports this module)

EVERY_S = 0.3  # the records are a few small files; an action's steps last seconds


class ActionWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group
        self.seen: dict[str, tuple[str, str, str, bool]] = {}

    async def watch(self) -> None:
        while True:
            self.look()
            await asyncio.sleep(EVERY_S)

    def look(self) -> None:
        """Tell each record's step once (and an action cut short as such); follow a worker another session's
        action added."""
        changed = False
        intents = self.run.intents()
        if any(it.kind == "add" and (it.target not in self.run.handles or it.target not in self.run.processes)
               for it in intents.values()):
            self.run.adopt_from_disk()
            self.group.adopt([n for n, it in intents.items() if it.kind == "add"])
        for name, it in intents.items():
            key = (it.id, it.step, it.detail, it.cut_short)
            if self.seen.get(name) == key:
                continue
            first = name not in self.seen
            self.seen[name] = key
            a = self.run.state.actions.get(it.id)
            if first and it.ended and (a is None or not a.running):
                continue  # an action that ended before this session began: its events told it already
            data = {"id": it.id, "kind": it.kind, "source": it.source, "seen": True}
            if it.cut_short:
                self.run.emit(Event("action", name, "interrupted", f"cut short at {it.step}: its session "
                                    f"({it.source}) is gone; {how_to_finish(self.run.id, it)}",
                                    data, t=it.since or it.started))
            else:
                self.run.emit(Event("action", name, it.step, it.detail, data, t=it.since or it.started))
            changed = True
        if changed:
            self.group.settle()
