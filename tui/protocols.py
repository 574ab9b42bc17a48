"""What the layers of tui/ see of the ones above them: narrow protocols, so that nothing imports upward.

tui/ is layered top-down: app.py (ConsoleApp), with the helpers only it uses (run_control.py, drills.py) ->
screens/ -> widgets/ -> pure helpers (formatting, logtext, palette, live, messages, this module). The App hands
itself down: a screen reads it as `Console` (`cast("Console", self.app)`: Textual gives every screen its App),
the run controller and the drills as the protocol they are built with. The App satisfies them all; none of them
imports tui.app, not even for type checking, so new keys and views land without an import circle. What goes up
without a reference to call goes as a Textual message (messages.py).

Light on purpose: nothing at run time but typing (the modules below import it for type checking only).
tests/tui/test_protocols.py checks that the App and its run controller have every member named here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import RenderableType
    from textual.await_complete import AwaitComplete
    from textual.dom import DOMNode
    from textual.message import Message
    from textual.notifications import SeverityLevel
    from textual.screen import Screen
    from textual.widget import AwaitMount
    from textual.worker import Worker

    from ..core.config.cluster import Cluster
    from ..core.design.draft import Design
    from ..core.design.lint import Assessment
    from ..core.design.workspace import Workspace
    from ..core.run.gpustate import NodeGpuState
    from ..core.run.reach import Reach
    from .gc_steward import GcSteward
    from .live import LiveRun


class RunSide(Protocol):
    """The console's run controller (run_control.RunController, `app.runs`) as the run views use it."""

    launch_step: str  # what the launch in progress does now (core's progress)

    @property
    def launch_elapsed(self) -> int: ...

    def open_logs(self, names: list[str], node: str | None = None) -> None: ...

    def request_teardown(self, run_id: str | None = None) -> None: ...

    def request_action(self, kind: str, target: str | None = None, role: str | None = None) -> None: ...

    def open_run(self, run_id: str) -> None: ...


class ContextSide(Protocol):
    """The console's contexts (contexts.ContextBook, `app.contexts`) as the views read them."""

    reach: dict[str, Reach]  # cluster -> its latest answer

    @property
    def current(self) -> str: ...

    def names(self) -> list[str]: ...

    def watched(self) -> dict[str, str]: ...

    def cluster_of(self, name: str) -> Cluster | None: ...

    def want(self, runs: list[dict]) -> None: ...


class GpuSide(Protocol):
    """The nodes' GPUs read while no run reads them (node_gpus.py)."""

    version: int
    on_change: Callable[[], None] | None

    def want(self, force: bool = False) -> bool: ...

    def shown(self, cluster_name: str) -> dict[str, NodeGpuState]: ...

    def status(self, cluster_name: str) -> str: ...


class Console(Protocol):
    """The App as a screen sees it: the design state it draws, the attached run, and the operations a key on a
    view asks for (each a core operation the App performs)."""

    views: list[tuple[str, str]]  # (mode, title) of the views 1-6
    readonly: bool
    workspace: Workspace
    design: Design
    assessment: Assessment

    @property
    def runs(self) -> RunSide: ...

    @property
    def contexts(self) -> ContextSide: ...

    @property
    def node_gpus(self) -> GpuSide: ...

    @property
    def context_line(self) -> str: ...

    def switch_context(self, name: str) -> bool: ...

    def open_run_anywhere(self, run_id: str, teardown: bool = False) -> None: ...

    @property
    def live(self) -> LiveRun | None: ...

    @property
    def launching(self) -> str: ...

    @property
    def design_screen(self) -> Screen | None: ...

    @property
    def can_add_names(self) -> bool: ...

    def now(self) -> float: ...

    def end_switch_hold(self) -> None: ...

    def set_design(self, design: Design) -> None: ...

    def add_named_nodes(self, names: list[str]) -> None: ...

    def inventory_status(self) -> str: ...

    def open_workspace(self, recipe: str, cluster: str) -> None: ...


class DrillHost(Console, Protocol):
    """The App as drills.py arms a drill on it: the design, a notice, then the launch key's path."""

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def action_launch(self) -> None: ...


class ControllerHost(Protocol):
    """The App as the run controller (run_control.py) uses it: Textual's own screens, workers, notices,
    messages and exit, and the console's clock, workspace, GC steward and stylesheet warm-up."""

    readonly: bool
    workspace: Workspace
    gc_steward: GcSteward

    @property
    def screen(self) -> Screen: ...

    @property
    def screen_stack(self) -> list[Screen]: ...

    def now(self) -> float: ...

    def warm_css(self, *classes: type[DOMNode]) -> None: ...

    def switch_mode(self, mode: str) -> AwaitMount: ...

    def push_screen(self, screen: Screen, callback: Callable[[Any], None] | None = None) -> Any: ...

    def pop_screen(self) -> AwaitComplete: ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def run_worker(self, work: Any, name: str | None = "", group: str = "default", description: str = "",
                   exit_on_error: bool = True, start: bool = True, exclusive: bool = False,
                   thread: bool = False) -> Worker: ...

    def post_message(self, message: Message) -> bool: ...

    def exit(self, result: Any = None, return_code: int = 0, message: RenderableType | None = None) -> None: ...
