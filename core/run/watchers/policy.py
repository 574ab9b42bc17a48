"""The recipe's restart policy and criticality per role (issue 38; srt-slurm's roles.<role>.restart of its PR #451
and roles.<role>.critical of its PR #450), applied by whichever session watches the run: a worker that dies (or,
with `unresponsive_seconds`, stays unresponsive) is relaunched in place by a restart action, after its backoff, at
most `max_restarts` times over the run; then the policy stops and says why. A role with `critical: false` makes
the run degraded, not failed, when a worker of it is down for good. It never loops: each relaunch is counted in
the run's own record of actions, which every session reads."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ..events import LIVE, TERMINAL, Event
from .base import RunHost, background

if TYPE_CHECKING:
    from ...config.recipe import RestartPolicy, RoleSpec
    from .base import WatcherGroup as Watchers  # (the package imports this module)

SOURCE = "restart policy"
EVERY_S = 1.0


class RestartPolicyWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group
        self.pending: set[str] = set()  # workers whose relaunch is waiting for its backoff or running
        self.tasks: set[asyncio.Task] = set()

    def role(self, name: str) -> RoleSpec | None:
        p = self.run.state.procs.get(name)
        return None if p is None else next((sp for r, sp in self.run.recipe.roles() if r == p.role), None)

    def policy(self, name: str) -> RestartPolicy | None:
        spec = self.role(name)
        return None if spec is None or spec.restart is None or spec.restart.policy == "never" else spec.restart

    def relaunches(self, name: str) -> int:
        """Relaunches of this worker the policy made (any session's), from the run's actions."""
        return sum(1 for a in self.run.state.actions.values() if a.target == name and a.kind == "restart"
                   and a.source.startswith(SOURCE))

    def on_exit(self, name: str, code: int | None, why: str) -> bool:
        """A worker ended on its own (not stopped): True when the policy takes it (a relaunch is scheduled, or the
        role is not critical: the run is degraded); False: the run fails, as without a policy."""
        spec = self.role(name)
        if spec is None:
            return False
        pol = self.policy(name)
        if pol is not None and (pol.policy == "always" or code != 0):
            return self.relaunch(name, f"it ended ({why})", spec.critical)
        if not spec.critical:
            self.degrade(f"{name} ended ({why}); its role is not critical: the run goes on without it")
            return True
        return False

    def relaunch(self, name: str, why: str, critical: bool) -> bool:
        pol = self.policy(name)
        assert pol is not None
        done = self.relaunches(name)
        if done >= pol.max_restarts:
            words = (f"restart policy of {name}: not relaunched again: {why}, and it was relaunched {done} time(s) "
                     f"already (max_restarts {pol.max_restarts})")
            self.run.emit(Event("note", name, detail=words))
            if critical:
                self.run._fail(words)
                return True
            self.degrade(f"{words}; its role is not critical: the run goes on without it")
            return True
        if name in self.pending:
            return True
        self.pending.add(name)
        wait = pol.backoff(done + 1)
        words = f"restart policy of {name}: {why}; relaunch {done + 1} of at most {pol.max_restarts} in {wait:g}s"
        self.run.emit(Event("note", name, detail=words))
        self.degrade(words)
        background(self.tasks, self._relaunch(name, wait, done + 1, pol.max_restarts))
        return True

    async def _relaunch(self, name: str, wait: float, attempt: int, most: int) -> None:
        from ..actions import restart  # (the actions use the watchers; this runs only while one watches)

        try:
            await asyncio.sleep(wait)
            if self.run.stopping or self.run.state.status not in (*LIVE, "starting"):
                return
            await restart(self.run, name, drain=False,  # type: ignore[arg-type]  # (the Run that hosts us)
                          who=f"{SOURCE} (relaunch {attempt} of at most {most})")
        finally:
            self.pending.discard(name)

    def degrade(self, words: str) -> None:
        self.run.emit(Event("note", "run", detail=words))
        if self.run.state.status in LIVE:
            self.run._set_status("degraded", words)

    async def watch(self) -> None:
        """Workers unresponsive longer than their role's `unresponsive_seconds`: relaunched."""
        while True:
            await asyncio.sleep(EVERY_S)
            if self.run.stopping or self.run.state.status not in LIVE:
                continue
            now = time.time()
            for name, p in list(self.run.state.procs.items()):
                pol = self.policy(name)
                if pol is None or pol.unresponsive_seconds is None or p.stage != "unresponsive" or p.action:
                    continue
                if p.stage in TERMINAL or now - p.since < pol.unresponsive_seconds:
                    continue
                spec = self.role(name)
                self.relaunch(name, f"it was unresponsive for {now - p.since:.0f}s "
                                    f"(unresponsive_seconds {pol.unresponsive_seconds:g})",
                              spec.critical if spec is not None else True)
