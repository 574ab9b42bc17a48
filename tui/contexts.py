"""The console's contexts, as k9s's `:ctx`: one per cluster the console has been switched to, each keeping its
design and its run controller (run_control.py), so that switching clusters leaves every cluster's attached run
watched by its own watcher process (core/cli/watcher.py); the App shows one context at a time.

Whether each cluster answers is asked in the background (core/run/reach.py), one worker per cluster, so a
cluster that does not answer is marked and never holds up the others or the keys. Used by app.py only.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

    from ..core.config.cluster import Cluster
    from ..core.design.draft import Design
    from ..core.design.lint import Assessment
    from ..core.design.workspace import Workspace
    from ..core.run.reach import Reach
    from .run_control import RunController

REACH_S = 15.0  # how often each cluster in view is asked whether it answers
ReachCheck = Callable[["Cluster"], Awaitable["Reach"]]


@dataclass
class Parked:
    """A context not shown: what the App holds for the shown one."""

    workspace: Workspace
    design: Design
    assessment: Assessment | None
    runs: RunController
    named_nodes: list[str]
    inventory_at: datetime | None


class ContextBook:
    """The contexts of one console. `app` is the ConsoleApp (its design attributes are swapped on a switch)."""

    def __init__(self, app: Any, check: ReachCheck | None) -> None:
        self.app = app
        self.parked: dict[str, Parked] = {}
        self.reach: dict[str, Reach] = {}
        self.asking: set[str] = set()
        self.check = check  # None: clusters are not asked (offline, or tests with a made-up inventory)
        self.also: dict[str, Cluster] = {}  # clusters of runs listed (Runs view) that are no context here
        self.on_change: Callable[[], None] = lambda: None
        self.left: list[Any] = []  # what quitting said of the runs of the contexts not shown

    @property
    def current(self) -> str:
        return str(self.app.workspace.cluster.name)

    def names(self) -> list[str]:
        """The contexts of this console: the shown one, then the others in the order they were left."""
        return [self.current, *self.parked]

    def controllers(self) -> list[RunController]:
        return [self.app.runs, *(p.runs for p in self.parked.values())]

    def watched(self) -> dict[str, str]:
        """run id -> the context whose controller has it attached (watched unless it is over)."""
        out = {}
        for name in self.names():
            runs = self.app.runs if name == self.current else self.parked[name].runs
            if runs.live is not None:
                out[runs.live.id] = name
        return out

    # -- switching -------------------------------------------------------------------------------
    def switch(self, name: str, run_dir: Path | None = None, workspace: Workspace | None = None) -> None:
        """Show context `name`: the one left keeps its design, its run and its watcher. A context shown for
        the first time is loaded: the cluster by name (the clusters file, then the cluster files), with the
        recipe being designed (or, for a run's cluster, the run's recipe; a cluster known only from a run
        directory is read from there). `workspace`: show this one (the Open screen's) on that cluster, its run
        controller kept when the context is open already. Raises AtomdeckError, leaving the current context as
        it was."""
        from ..core.config.errors import AtomdeckError
        from ..core.design.draft import Design

        if name == self.current:
            return
        if any(c.launching for c in self.controllers()):
            raise AtomdeckError("a launch is in progress; switch clusters when it has started (4 Run shows it)")
        target = self.parked.get(name)
        if target is None:
            from .run_control import RunController

            target = (Parked(workspace, Design(workspace.recipe), None, RunController(self.app, name), [], None)
                      if workspace is not None else self._load(name, run_dir))
        elif workspace is not None:
            target = Parked(workspace, Design(workspace.recipe), None, target.runs, [], None)
        app = self.app
        self.parked.pop(name, None)
        self.parked[self.current] = Parked(app.workspace, app.design, app.assessment, app.runs,
                                           app.named_nodes, app.inventory_at)
        app.workspace, app.design, app.runs = target.workspace, target.design, target.runs
        app.named_nodes, app.inventory_at = target.named_nodes, target.inventory_at
        app.assessment = target.assessment if target.assessment is not None else app.design.assess(app.workspace)
        self.ask(name)

    def _load(self, name: str, run_dir: Path | None) -> Parked:
        from ..core.config.errors import AtomdeckError
        from ..core.design.draft import Design
        from ..core.design.workspace import load_workspace
        from .run_control import RunController

        recipe = str(run_dir / "recipe.yaml") if run_dir else str(self.app.workspace.recipe_path or "demo-1p1d")
        try:
            ws = load_workspace(recipe, name)
        except AtomdeckError:
            if run_dir is None:
                raise
            ws = load_workspace(recipe, str(run_dir / "cluster.yaml"))  # a cluster no file defines any more
        return Parked(ws, Design(ws.recipe), None, RunController(self.app, name), [], None)

    # -- does each cluster answer? -----------------------------------------------------------------
    def cluster_of(self, name: str) -> Cluster | None:
        if name == self.current:
            return self.app.workspace.cluster  # type: ignore[no-any-return]
        if name in self.parked:
            return self.parked[name].workspace.cluster
        return self.also.get(name)

    def ask_all(self) -> None:
        for name in [*self.names(), *self.also]:
            self.ask(name)

    def ask(self, name: str) -> None:
        """Ask one cluster in a worker of its own (unless one is asking it already)."""
        cluster = self.cluster_of(name)
        if self.check is None or cluster is None or name in self.asking:
            return
        self.asking.add(name)
        self.app.run_worker(self._ask(name, cluster), group=f"reach-{name}", exit_on_error=False)

    async def _ask(self, name: str, cluster: Cluster) -> None:
        assert self.check is not None
        try:
            r = await self.check(cluster)
        except Exception as e:  # asking must never take the console down
            from ..core.run.reach import Reach

            r = Reach(name, False, f"could not be asked: {e}", 0.0, time.time())
        finally:
            self.asking.discard(name)
        before = self.reach.get(name)
        self.reach[name] = r
        if before is None or (before.answers, before.detail) != (r.answers, r.detail):
            self.on_change()

    def want(self, runs: list[dict]) -> None:
        """The Runs view lists these runs: the clusters of those not stopped are asked too (as each recorded
        its cluster in its directory)."""
        from ..core.config.cluster import parse_cluster
        from ..core.config.errors import AtomdeckError

        for m in runs:
            name = m.get("cluster")
            if not name or m.get("status") == "stopped" or m.get("fake") or self.cluster_of(name) is not None:
                continue
            path = Path(str(m.get("dir", ""))) / "cluster.yaml"
            try:
                self.also[name] = parse_cluster(path.read_text(), str(path))
            except (AtomdeckError, OSError):
                continue
            self.ask(name)

    async def leave_parked(self) -> list[Any]:
        """The console quits: stop watching the runs of the contexts not shown (they keep running); what each
        left running, as quitting says it."""
        said = []
        for p in self.parked.values():
            text = p.runs.left_running()
            if text is not None:
                said.append(text)
            await p.runs.detach()
        self.left = said
        return said

    async def close(self) -> None:
        for p in self.parked.values():
            await p.runs.close()

