# Long file: the App wires the screens, the design state, settings and the run controller together;
# screens and widgets live in their own modules.
"""The atomdeck console: design a P/D deployment (nodes, layout, every command), launch it, watch
it come up, read its logs, tear it down.

The App holds the working state (workspace, design, assessment; the attached run) and re-assesses
through core on every change; the views only draw it. Views are App modes, reached with 1-6 like
k9s: Nodes, Layout, Preview (design), Run (the attached run), Runs (every run on this machine),
Bench (measure the attached run, compare layouts).
core's Run does the work (run_control.py: launch, watch in a watcher process, teardown, quit);
the App pulses the run views at most ten times a second with what changed (see live.py).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.dom import DOMNode
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer

from ..core.run.schedgroup import short_slice
from . import bindings
from .gc_steward import TICK_S, GcSteward
from .node_gpus import NodeGpuBook

# Only Textual and light modules above: the console's first frame (screens/loading.py) is drawn before
# pydantic, YAML and the design modules are imported (ConsoleApp.defer). Imported where used below.
if TYPE_CHECKING:
    from ..core.config.cluster import Cluster
    from ..core.config.recipe import Recipe
    from ..core.design.draft import Design
    from ..core.design.inventory import Node
    from ..core.design.lint import Assessment
    from ..core.design.workspace import Workspace
    from ..core.run.run import Run
    from .contexts import ContextBook
    from .live import LiveRun
    from .messages import InventoryUpdated, LaunchRequested, RunUpdated
    from .run_control import RunController
    from .screens.base import DesignScreen

DEMO_CLUSTER = "local"
DEMO_RECIPE = "demo-1p1d"

LaunchHandler = Callable[["Assessment"], Awaitable[None]]
InventoryFetch = Callable[["Cluster", bool], Awaitable[tuple[list["Node"], str]]]


def _shown_first(module: str, name: str) -> Callable[[], Screen]:
    """A view, imported when it is first shown (the Bench view's chart library, the run view's widgets:
    none of it is needed to draw the Nodes view; the Nodes view itself: not for the first frame)."""
    def make() -> Screen:
        return getattr(importlib.import_module(f"{__package__}.screens.{module}"), name)()

    return make


class ConsoleApp(App[int]):
    TITLE = "atomdeck"
    CSS_PATH = "atomdeck.tcss"
    # alt+q: in a real terminal, Escape then q typed fast (or read late) arrive together as alt+q, which no one
    # types on purpose; it is taken as those two keys (not in help's keys on screen: not a key of its own).
    # priority: a dialog (modal) hides the App's other keys, and Escape-then-q there is the common case.
    BINDINGS = [*bindings.APP, Binding("alt+q", "escape_then_q", "Quit", show=False, priority=True)]
    MODES: ClassVar[dict[str, str | Callable[[], Screen]]] = {
        "nodes": _shown_first("nodes", "NodesScreen"), "layout": _shown_first("layout", "LayoutScreen"),
        "preview": _shown_first("preview", "PreviewScreen"), "run": _shown_first("run", "RunScreen"),
        "runs": _shown_first("runs", "RunsScreen"), "bench": _shown_first("bench", "BenchScreen"),
        "sweep": _shown_first("sweep", "SweepScreen")}
    PULSE_S = 0.1  # the run views redraw at most this often, however fast events and lines arrive
    # Bumped whenever core re-assessed the design (or the theme changed): the design views watch it.
    version: reactive[int] = reactive(0, init=False)

    def __init__(self, recipe: str = DEMO_RECIPE, cluster: str | None = DEMO_CLUSTER, *, readonly: bool = False,
                 offline: bool = False, refresh_s: float | None = 10.0, ask: bool = False,
                 nodes: Iterable[str] = (), overrides: Iterable[str] = (), named_nodes: Iterable[str] = (),
                 clock: Callable[[], datetime] | None = None, keymap_file: Path | None = None,
                 launch_handler: LaunchHandler | None = None, fetch: InventoryFetch | None = None,
                 theme: str | None = None, run_id: str | None = None, defer: bool = False,
                 ask_clusters: bool | None = None, read_gpus: bool | None = None) -> None:
        """Loads the recipe and cluster (and the run to reattach to) now: errors reach the caller
        before the screen opens. defer (the command line's console, not with run_id): only checks
        that the recipe and the cluster exist now; they are read and validated (pydantic, YAML, the
        design modules: ~0.3 s) once the first frame (screens/loading.py) is on the screen, then the
        Nodes view replaces it. An invalid file then ends the console with the error in `load_error`
        (run_console raises it). Reading `workspace`, `design`, `assessment` or `runs` before that
        loads them at once.

        offline: never ask Slurm (node states from the cluster file); refresh_s: seconds between
        inventory refreshes (None: only on ctrl+r); ask: open on the Open screen; named_nodes:
        plan on these node names when no inventory can be read; run_id: open on this run (reattach
        and watch); launch_handler: what a confirmed launch does (default: core's Run.launch, then
        the run view); clock, fetch: for tests; ask_clusters: ask each cluster shown whether it answers
        (contexts.py; default: unless offline or given a made-up inventory `fetch`); read_gpus: read the nodes'
        GPUs when the Nodes view is shown (node_gpus.py; the same default; its `g` key reads them anyway).
        """
        super().__init__()
        self.readonly = readonly
        self.offline = offline
        self.refresh_s = refresh_s
        self.clock = clock or datetime.now
        self.fetch: InventoryFetch | None = fetch  # None: core's fetch_inventory (imported when first used)
        self._ask_clusters = (not offline and fetch is None) if ask_clusters is None else ask_clusters
        self.node_gpus = NodeGpuBook(self, (not offline and fetch is None) if read_gpus is None else read_gpus)
        self.keymap_file = keymap_file
        self.keymap: dict[str, str] = {}
        self.named_nodes: list[str] = list(named_nodes)
        self.views: list[tuple[str, str]] = [("nodes", "Nodes"), ("layout", "Layout"), ("preview", "Preview"),
                                             ("run", "Run"), ("runs", "Runs"), ("bench", "Bench")]
        self.inventory_at: datetime | None = None
        self._ask = ask
        self._theme_choice = theme
        self._css_refreshed = 0  # the CSS count (Textual's _css_update_count) the stylesheet was last refreshed for
        self._refresh_timer: Timer | None = None
        self._launch_handler = launch_handler
        self._to_load: tuple[str, str | None, tuple[str, ...], frozenset[str], str | None] | None = (
            recipe, cluster, tuple(nodes), frozenset(overrides), run_id)
        self.load_error: Exception | None = None  # why a deferred load failed (the console then ends)
        self._switch_hold: Callable[[], None] | None = None  # ends switch_mode's repaint hold (delay_update)
        self.gc_steward = GcSteward()  # the cyclic GC's full passes off the key path (gc_steward.py)
        self.defer = defer and not run_id
        if self.defer:
            from ..core.config.clusters import find as find_cluster
            from ..core.config.paths import find_recipe

            find_recipe(recipe)  # an unknown name is still reported before the screen opens
            if cluster is not None:  # (None: the current context, read with the rest)
                find_cluster(cluster)
        else:
            self._load()

    # Set by _load (right away, or after the first frame with defer).
    workspace: Workspace
    design: Design
    assessment: Assessment
    runs: RunController
    contexts: ContextBook
    launch_handler: LaunchHandler
    _initial_run: Run | None
    _LOADED = frozenset({"workspace", "design", "assessment", "runs", "contexts", "launch_handler", "_initial_run"})

    def __getattr__(self, name: str) -> Any:
        # Only for the names _load sets, only while they are not set yet (a deferred load not done).
        if name in ConsoleApp._LOADED and self.__dict__.get("_to_load") is not None:
            self._load()
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def loaded(self) -> bool:
        return self._to_load is None

    def _load(self) -> None:
        """Read and validate the recipe and cluster, assess the design, open the run to reattach to."""
        from ..core.design.draft import Design
        from ..core.design.workspace import load_workspace
        from .run_control import RunController

        assert self._to_load is not None
        recipe, cluster, nodes, overrides, run_id = self._to_load
        self.workspace = load_workspace(recipe, cluster)
        self.design = Design(self.workspace.recipe, nodes, overrides)
        self.assessment = self.design.assess(self.workspace)
        self.runs = RunController(self)  # the attached run (one at a time): see run_control.py
        self._load_contexts()
        self.launch_handler = self._launch_handler or self.launch_shown
        self._initial_run = None
        if run_id:
            from ..core.run.run import Run

            self._initial_run = Run.open(run_id)
        self._to_load = None

    @property
    def live(self) -> LiveRun | None:
        """The attached run (the run controller's)."""
        return self.runs.live

    @property
    def launching(self) -> str:
        """What the run view says while a launch works ('' when none does)."""
        return self.runs.launching

    def on_run_updated(self, message: RunUpdated) -> None:
        self.runs.redraw()

    async def action_quit(self) -> None:
        """Quit the console, never the deployment (see RunController.quit)."""
        if not self.loaded:  # the first frame, nothing read yet: nothing to keep or to ask about
            self.exit(0)
            return
        await self.runs.quit()
        if getattr(self, "_exit", False):  # quitting: the other clusters' runs are left running too
            for said in await self.contexts.leave_parked():
                self.exit(0, message=said)

    def action_escape_then_q(self) -> None:
        """alt+q is what the terminal sends for Escape then q arriving together (the operator closing a dialog
        and quitting, say): both keys, in order, each where it would have gone alone."""
        self.run_worker(self._escape_then_q(), group="keys")

    async def _escape_then_q(self) -> None:
        top = self.screen
        self.simulate_key("escape")
        for _ in range(10):  # the q once the Escape is handled: its dialog taken down, or 0.2 s gone by
            await asyncio.sleep(0.02)
            if self.screen is not top:
                break
        self.simulate_key("q")

    async def on_unmount(self) -> None:
        if self.loaded:
            await self.runs.close()
            await self.contexts.close()
        self.gc_steward.close()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):  # the steward's full GC pass waits for a quiet moment (gc_steward.py)
            self.gc_steward.key()
        await super().on_event(event)

    # -- start-up ---------------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        if not self.defer:
            return super().get_default_screen()
        from .screens.loading import LoadingScreen

        recipe, cluster = self._to_load[:2] if self._to_load else ("", "")
        cluster = cluster or "the current context"
        return LoadingScreen(self.views, Path(recipe).stem if recipe.endswith((".yaml", ".yml")) else recipe,
                             Path(cluster).stem if cluster.endswith((".yaml", ".yml")) else cluster)

    def on_mount(self) -> None:
        self.set_interval(TICK_S, self.gc_steward.tick, name="gc-steward")
        self.gc_steward.own_full_passes()
        if not self.is_headless:  # on a terminal: the loop's thread and Textual's input and writer threads
            short_slice()
        keymap, problems = bindings.load_keymap(self.keymap_file)
        self.keymap = keymap
        if keymap:
            self.set_keymap(keymap)
        for p in problems:
            self.notify(p, title="keymap", severity="warning", timeout=8)
        self._load_theme()
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        if self.loaded:
            self._start()
        else:  # the first frame (screens/loading.py) first, then read the recipe and cluster
            self.call_after_refresh(self._load_then_start)

    def _load_then_start(self) -> None:
        from ..core.config.errors import AtomdeckError

        if getattr(self, "_exit", False):  # q on the first frame: closing; no view may be added now
            return
        try:
            self._load()
        except AtomdeckError as e:  # run_console raises it once the terminal is restored
            self.load_error = e
            self.exit(return_code=2)
            return
        self._start()

    def _start(self) -> None:
        self.set_interval(self.PULSE_S, lambda: self.runs.pulse())  # (the shown context's controller)
        self._start_contexts()
        if self._initial_run is not None:
            from .live import LiveRun

            run, self._initial_run = self._initial_run, None
            self.runs.attach(run, watch=run.state.status not in LiveRun.OVER)
            self.switch_mode("run")
        else:
            self.switch_mode("nodes")
        if self._ask:
            self.action_open()
        self.refresh_inventory()

    def now(self) -> float:
        """Seconds since the epoch by the console's clock (frozen in tests and screenshots)."""
        return self.clock().timestamp()

    def delay_update(self, delay: float = 0.05) -> None:
        """Textual's switch_mode holds every repaint for `delay` (50 ms), so that a view is not shown half
        drawn: 50 ms of every view switch's ~65 ms on screen, with the CPU idle. A view shown before
        (tui/screens/base.py ViewScreen) has drawn itself once its resume was handled and ends the hold then
        (`end_switch_hold`); the timer stays for everything else (a view shown the first time composes)."""
        self._begin_batch()
        ended = False

        def end() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            if self._switch_hold is end:
                self._switch_hold = None
            self._end_batch()
            if not self._batch_count:
                self.screen.refresh()

        self._switch_hold = end
        self.set_timer(delay, end, name="delay_update")

    def end_switch_hold(self) -> None:
        """(ViewScreen, once a view shown again has handled its resume) end switch_mode's repaint hold now."""
        if self._switch_hold is not None:
            self._switch_hold()

    def action_view(self, mode: str) -> None:
        if (mode in dict(self.views) or mode == "sweep") and self.current_mode != mode:
            self.switch_mode(mode)

    # -- the design: every change goes through core -------------------------------------------
    def set_design(self, design: Design) -> None:
        self.design = design
        self._reassess()

    def _reassess(self) -> None:
        self.assessment = self.design.assess(self.workspace)
        self._redraw()

    def _redraw(self) -> None:
        self.version += 1  # the design views watch it (screens/base.py)

    @property
    def design_screen(self) -> DesignScreen | None:
        """The design view when it is on top; None under a dialog, on the run views, and while the
        app is closing (timers and messages can still fire once the screen stack is empty)."""
        if not self.loaded:
            return None
        from .screens.base import DesignScreen, can_draw

        stack = self.screen_stack
        top = stack[-1] if stack else None
        # not before it is loaded, nor while the app takes its screens apart (the same check as a pulse's)
        return top if isinstance(top, DesignScreen) and can_draw(top) else None

    def watch_version(self) -> None:
        if self.screen_stack:  # (not while closing)
            self.refresh_bindings()

    def open_workspace(self, recipe: str, cluster: str) -> None:
        """Load another recipe/cluster (raises AtomdeckError/ConfigError, leaving the current one)."""
        from ..core.design.draft import Design
        from ..core.design.workspace import load_workspace

        ws = load_workspace(recipe, cluster)
        if ws.cluster.name != self.contexts.current:  # another cluster: its context (this one's run stays watched)
            self.contexts.switch(ws.cluster.name, workspace=ws)
            self.named_nodes, self.inventory_at = [], None
            self._redraw()
            self.refresh_inventory()
            self.runs.poke()
            self.contexts_changed()
            return
        same_cluster = ws.cluster == self.workspace.cluster
        if same_cluster:  # keep the inventory we have; the refresh below updates it
            ws.inventory, ws.inventory_note = self.workspace.inventory, self.workspace.inventory_note
        else:
            self.named_nodes = []
            self.inventory_at = None
        self.workspace = ws
        self.set_design(Design(ws.recipe))
        self.refresh_inventory()

    # -- inventory: a worker, re-armed only after the previous refresh finished ---------------
    @work(exclusive=True, group="inventory")
    async def refresh_inventory(self) -> None:
        ws = self.workspace
        if self.fetch is None:
            from ..core.run.inventory import fetch_inventory

            self.fetch = fetch_inventory
        try:
            nodes, note = await self.fetch(ws.cluster, self.offline)
        except Exception as e:  # a refresh must never take the console down
            nodes, note = ws.inventory, f"inventory refresh failed: {e}; showing the last nodes read"
        if ws is self.workspace:
            self._apply_inventory(nodes, note)
        self._arm_refresh()

    def _apply_inventory(self, nodes: list[Node], note: str) -> None:
        from ..core.design.workspace import offline_nodes
        from .messages import InventoryUpdated

        ws = self.workspace
        if not nodes and self.named_nodes:
            nodes, note = offline_nodes(self.named_nodes), "offline: planned by node name; states not checked"
        elif self.named_nodes:  # nodes added by name (n) that the inventory does not list
            listed = {n.name for n in nodes}
            extra = [n for n in self.named_nodes if n not in listed]
            if extra:
                nodes = [*nodes, *offline_nodes(extra)]
                note = "; ".join(x for x in (note, f"added by name, not checked: {', '.join(extra)}") if x)
        nodes = self._held_marked(nodes)
        changed = nodes != ws.inventory or note != ws.inventory_note
        ws.inventory, ws.inventory_note = nodes, note
        self.inventory_at = self.clock()
        if changed:
            self._reassess()
        self.post_message(InventoryUpdated(changed, note))

    def _held_marked(self, nodes: list[Node]) -> list[Node]:
        """The nodes with the GPU memory others hold as last read (core's mark_held): not auto-picked."""
        from ..core.run.gpustate import mark_held  # (not nodegpus: the first frame loads no remote/)

        return mark_held(nodes, self.node_gpus.shown(self.workspace.cluster.name))

    def node_gpus_read(self) -> None:
        """A reading of the nodes' GPUs ended (node_gpus.py): the nodes whose memory others hold change."""
        ws = self.workspace
        marked = self._held_marked(ws.inventory)
        if marked != ws.inventory:
            ws.inventory = marked
            self._reassess()

    def on_inventory_updated(self, message: InventoryUpdated) -> None:
        if (screen := self.design_screen) is not None:
            screen.inventory_refreshed()

    def _arm_refresh(self) -> None:
        if self._refresh_timer is not None:
            self._refresh_timer.stop()
            self._refresh_timer = None
        if self.refresh_s:
            self._refresh_timer = self.set_timer(self.refresh_s, self._refresh_tick)

    def _refresh_tick(self) -> None:
        self._refresh_timer = None
        if not self.screen_stack:  # closing
            return
        if self.paused:  # a dialog is open: do not change what it was opened about; look again later
            self._arm_refresh()
        else:
            self.refresh_inventory()

    @property
    def paused(self) -> bool:
        return self.design_screen is None

    def action_refresh_inventory(self) -> None:
        self.refresh_inventory()

    def add_named_nodes(self, names: list[str]) -> None:
        self.named_nodes = list(dict.fromkeys([*self.named_nodes, *names]))
        self.refresh_inventory()

    @property
    def can_add_names(self) -> bool:
        return True  # with no inventory: plan by name; with one: add a node it does not list (warned)

    def inventory_status(self) -> str:
        ws = self.workspace
        live = ws.cluster.launcher == "slurm" and not self.offline
        src = "Slurm" if live else "the cluster file" if ws.cluster.nodes else "node names"
        if self.inventory_at is None:
            text = f"inventory: reading from {src} …"
        else:
            text = f"inventory from {src}, read {self.inventory_at.strftime('%H:%M:%S')}"
            if self.refresh_s:
                text += f", every {self.refresh_s:g}s"
        return text + (f" · {ws.inventory_note}" if ws.inventory_note else "")

    # -- contexts: several clusters, one shown (k9s's :ctx; contexts.py) ---------------------------
    def _load_contexts(self) -> None:
        from .contexts import ContextBook

        check = None
        if self._ask_clusters:
            from ..core.run.reach import check

        self.contexts = ContextBook(self, check)
        self.contexts.on_change = self.contexts_changed

    def _start_contexts(self) -> None:
        from .contexts import REACH_S

        self.contexts.ask_all()
        self.set_interval(REACH_S, self.contexts.ask_all, name="reach")

    @property
    def context_line(self) -> str:
        """The header's context (markup): the cluster shown, whether it answers, how many others are open."""
        from textual.markup import escape

        if not self.loaded:
            return ""
        book = self.contexts
        r = book.reach.get(book.current)
        mark = "" if r is None else " [$text-success]●[/]" if r.answers else " [$text-error]× no answer[/]"
        others = book.names()[1:]
        down = [n for n in others if (o := book.reach.get(n)) is not None and not o.answers]
        more = (f" [$text-muted]+{len(others)}[/]" if others else "") + (f" [$text-error]×{len(down)}[/]" if down
                                                                         else "")
        return f"[@click=app.contexts][$text-muted]ctx[/] [b]{escape(book.current)}[/b]{mark}{more}[/]"

    def contexts_changed(self) -> None:
        """A cluster's answer changed, or the context did: every header, and the Runs view's marks."""
        from .widgets.context_bar import ContextBar

        for screen in self.screen_stack:
            for bar in screen.query(ContextBar):
                bar.show_context()
            redraw = getattr(screen, "contexts_changed", None)
            if redraw is not None:
                redraw()

    def switch_context(self, name: str, run_dir: Path | None = None) -> bool:
        """Show another cluster: its design and its run; the one left keeps its run watched. False (and said)
        when it cannot be: a launch in progress, a cluster that cannot be read."""
        from ..core.config.errors import AtomdeckError

        before = self.contexts.current
        try:
            self.contexts.switch(name, run_dir)
        except AtomdeckError as e:
            self.notify(str(e), title=f"Context {name}", severity="error", timeout=10)
            return False
        if self.contexts.current == before:
            return True
        self._redraw()
        self.refresh_inventory()
        self.runs.poke()
        self.contexts_changed()
        live = self.runs.live
        self.notify(f"{before} keeps being watched" + (f"; here: run {live.id}" if live else ""),
                    title=f"Context {name}", timeout=4)
        return True

    def open_run_anywhere(self, run_id: str, teardown: bool = False) -> None:
        """Open (or tear down) a run of any cluster: its cluster's context is shown first."""
        from ..core.run.run import Run

        meta = next((m for m in Run.list() if m.get("id") == run_id), {})
        cluster = meta.get("cluster")
        if cluster and cluster != self.contexts.current:
            if not self.switch_context(str(cluster), Path(str(meta.get("dir")))):
                return
        if teardown:
            self.runs.request_teardown(run_id)
        else:
            self.runs.open_run(run_id)

    def launch_shown(self, a: Assessment) -> Awaitable[None]:
        """The default launch handler: the shown context's run controller launches (whichever context is shown
        when the launch is asked for)."""
        return self.runs.launch_run(a)

    def action_contexts(self) -> None:
        from .screens.contexts import ContextScreen

        if not isinstance(self.screen, ContextScreen):
            self.push_screen(ContextScreen())

    def action_command(self) -> None:
        from .screens.contexts import CommandPrompt

        if not isinstance(self.screen, CommandPrompt):
            self.push_screen(CommandPrompt())

    # -- launch: handed to the run engine ----------------------------------------------------
    def action_launch(self) -> None:
        from .screens.dialogs import ConfirmDialog, MessageDialog

        if self.readonly:
            self.notify("read-only console: launching is disabled", severity="warning")
            return
        if self.design_screen is None:
            return  # launching starts from the design, and happens from 3 Preview only
        if self.runs.refuse_while_launching("launch again"):
            return
        a = self.assessment
        if not a.ok:
            self.push_screen(MessageDialog("Launch blocked", _blocked_text(a)))
            return
        if self.current_mode != "preview":  # nothing runs before its commands were on screen
            self.action_view("preview")
            self.notify("Every command that will run, per node. Press L again to launch.", title="Launch",
                        timeout=6)
            return
        plan = a.plan
        assert plan is not None
        text = Text.assemble(
            (f"{a.recipe.name}", "bold"), f" ({plan.shape}) on {a.cluster.name}: {len(a.processes)} processes on ",
            f"{len(plan.nodes)} nodes ({', '.join(n.name for n in plan.nodes)}); router {plan.router.url}.")
        warnings = [f for f in a.findings if f.severity == "warning"]
        if warnings:
            text.append(f"\n\n{len(warnings)} warning(s):\n" + "\n".join(f"  ▲ {f.message}" for f in warnings))

        def done(yes: bool | None) -> None:
            if yes:
                from .messages import LaunchRequested

                self.post_message(LaunchRequested(a))

        self.push_screen(ConfirmDialog("Launch this deployment?", text, yes="Launch", danger=False), done)

    async def on_launch_requested(self, message: LaunchRequested) -> None:
        if self.runs.refuse_while_launching("launch again"):
            return
        # not exclusive: a second launch must never cancel the first half-way (it is refused instead)
        self.run_worker(self.launch_handler(message.assessment), group="launch", exit_on_error=False)

    # App keys that change what is underneath: refused while a dialog or the Open screen is up, so
    # typing there ("demo-2p1d") never switches views or edits the design behind it.
    _UNDERNEATH = frozenset({"view", "launch", "refresh_inventory", "save_recipe", "export", "change_theme",
                             "quit", "help", "command", "contexts"})

    @property
    def overlay_open(self) -> bool:
        from textual.screen import ModalScreen

        return isinstance(self.screen, ModalScreen) or getattr(self.screen, "OVERLAY", False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.loaded and action in self._UNDERNEATH:  # the first frame: only q
            return action in ("quit", "escape_then_q")
        if action in self._UNDERNEATH and self.overlay_open:
            return False
        if action == "view":
            return bool(parameters) and (parameters[0] in dict(self.views) or parameters[0] == "sweep")
        if action == "launch":
            return not self.readonly and self.design_screen is not None
        return True

    def start_drill(self, drill: Any) -> None:
        from .drills import start_drill

        start_drill(self, drill)

    # -- files: export the launch, save the recipe -------------------------------------------
    def action_export(self) -> None:
        from .screens.dialogs import InputDialog

        a = self.assessment
        if a.plan is None:
            self.notify("no plan to export yet: the findings say what to change", severity="error")
            return

        def done(path: str | None) -> None:
            if path:
                from ..core.design.export import export_script

                errors = len(a.errors())
                self.write_file(Path(path), export_script(a), executable=True, what="launch script",
                                note=f"; {errors} error(s) are listed at its top" if errors else "")

        self.push_screen(InputDialog(
            "Export launch script", "Write the whole launch as a bash script (secrets are read from the "
            "environment when it runs, never written).", f"./atomdeck-{design_name(a.recipe)}.sh"), done)

    def action_save_recipe(self) -> None:
        from ..core.config.roundtrip import recipe_yaml
        from .screens.dialogs import InputDialog

        recipe = self.design.recipe
        current = self.workspace.recipe_path
        default = str(current) if current and not _is_shipped(current) else f"./{recipe.name}.yaml"

        def done(path: str | None) -> None:
            if path:
                try:  # the file the recipe came from: its comments, order and quoting are kept
                    original = current.read_text() if current else None
                except OSError:
                    original = None
                self.write_file(Path(path), recipe_yaml(recipe, original), what="recipe", saved_recipe=True)

        self.push_screen(InputDialog("Save recipe", "Write the edited recipe as YAML (only what you changed "
                                     "is rewritten; comments and order are kept).", default), done)

    def write_file(self, path: Path, text: str, *, what: str, executable: bool = False, note: str = "",
                   saved_recipe: bool = False, confirmed: bool = False) -> None:
        """Write a file; an existing file (above all a shipped recipe) is replaced only when confirmed."""
        from .screens.dialogs import ConfirmDialog

        path = path.expanduser()
        if path.exists() and not confirmed:
            shipped = _is_shipped(path)
            msg = (f"{path} is a recipe shipped with atomdeck. Overwriting it changes the demo for everyone "
                   "using this installation; saving under another name is usually better."
                   if shipped else f"{path} exists. Replace it?")
            self.push_screen(ConfirmDialog("Overwrite a shipped recipe?" if shipped else "Overwrite?", msg,
                                           yes="Overwrite"),
                             lambda yes: yes and self.write_file(path, text, what=what, executable=executable,
                                                                 note=note, saved_recipe=saved_recipe,
                                                                 confirmed=True))
            return
        try:
            path.write_text(text)
            if executable:
                path.chmod(0o755)
        except OSError as e:
            self.notify(f"cannot write {path}: {e}", title=f"Save {what}", severity="error")
            return
        if saved_recipe:
            self.workspace.recipe_path = path
        self.notify(f"wrote {path}{note}", title=f"Saved {what}")

    # -- conventions: help, open, themes, palette --------------------------------------------
    def action_help(self) -> None:
        from .screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_open(self) -> None:
        from .screens.start import StartScreen

        if isinstance(self.screen, StartScreen):
            return
        path = self.workspace.recipe_path
        recipe = path.stem if path and _is_shipped(path) else str(path or self.design.recipe.name)
        self.push_screen(StartScreen(self.workspace.cluster.name, recipe))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for i, (mode, title) in enumerate(self.views, 1):
            yield SystemCommand(f"View: {title}", f"go to the {title} view (key {i})", partial(self.action_view, mode))
        yield SystemCommand("View: Sweep", "the layout search (key 7)", partial(self.action_view, "sweep"))
        yield SystemCommand("Open recipe or cluster…", "choose another cluster or recipe", self.action_open)
        yield SystemCommand("Switch context (cluster)…", "show another cluster; every cluster's runs stay watched "
                            "(:ctx)", self.action_contexts)
        yield SystemCommand("Refresh nodes", "read the node inventory again", self.action_refresh_inventory)
        yield SystemCommand("Auto-pick nodes", "let core choose usable nodes for the layout",
                            lambda: self.set_design(self.design.auto_pick()))
        yield SystemCommand("Export launch script…", "the whole launch as a bash script", self.action_export)
        yield SystemCommand("Save recipe…", "write the edited recipe as YAML", self.action_save_recipe)
        from .screens.base import DesignScreen

        if not self.readonly and isinstance(screen, DesignScreen):
            yield SystemCommand("Launch", "launch this deployment (asks first)", self.action_launch)
            if self.workspace.cluster.simulator.enabled:  # drills are the simulator's faults
                from ..core.config.drills import load_drills

                for d in load_drills():
                    yield SystemCommand(f"Drill: {d.name}", f"{d.what} (launches with this fault; asks first)",
                                        partial(self.start_drill, d))
        if self.live is not None:
            from .screens.snapshot import open_snapshot

            yield SystemCommand("Snapshot: where every rank is", f"stacks, kernel state and connections of every "
                                f"rank of run {self.live.id}, the odd ones first", partial(open_snapshot, self))
        if not self.readonly and self.live is not None:
            yield SystemCommand("Tear down the run…", f"stop every process of run {self.live.id} (asks first)",
                                self.runs.request_teardown)
            for name, p in self.live.state.procs.items():
                if p.removed:
                    continue
                yield SystemCommand(f"Restart {name}…", f"drain, stop, start, ready, re-register {name} (asks first)",
                                    partial(self.runs.request_action, "restart", name))
                if p.role in ("prefill", "decode"):
                    yield SystemCommand(f"Remove {name}…", f"drain {name}, stop it, take it out of the run (asks "
                                        f"first)", partial(self.runs.request_action, "remove", name))
            yield SystemCommand("Add a decode…", "a decode worker on a free node or per_node slot (asks first)",
                                partial(self.runs.request_action, "add", None, "decode"))
            yield SystemCommand("Add a prefill (restarts the router)…", "AToMesh learns a prefill only at its start: "
                                "the router restarts with it (asks first)",
                                partial(self.runs.request_action, "add", None, "prefill"))

    @property
    def css_current(self) -> bool:
        """Whether the stylesheet was refreshed since the CSS last changed (a theme): a view made now is
        styled as it mounts and needs no refresh of its own (screens/base.py ViewScreen)."""
        return self._css_update_count == self._css_refreshed

    def refresh_css(self, animate: bool = True) -> None:
        super().refresh_css(animate)
        self._css_refreshed = self._css_update_count

    def warm_css(self, *classes: type[DOMNode]) -> None:
        """Add the default CSS of widget classes not shown yet, and parse the stylesheet now. The first mount of
        a class with CSS of its own makes Textual parse every source again (10-25 ms at 128 nodes on a busy
        machine): the first notice of a launch, and the footer's key groups, did so as the run attached, keys
        waiting. Added now it is found unchanged then, as Widget._post_register adds it at a mount. (Textual's
        private `_get_default_css`, asked of an instance never initialised: it reads only the class.)"""
        for cls in classes:
            for read_from, css, tie_breaker, scope in cls.__new__(cls)._get_default_css():
                self.stylesheet.add_source(css, read_from=read_from, is_default_css=True, tie_breaker=tie_breaker,
                                           scope=scope)
        self.stylesheet.rules_map  # noqa: B018 (the parse, and the map of rules by selector)

    def _load_theme(self) -> None:
        name = self._theme_choice or _read_settings().get("theme")
        if name and name in self.available_themes:
            self.theme = name

    def _on_theme_changed(self, theme: Any) -> None:
        self._redraw()  # role colours come from the theme
        if self._theme_choice is None:
            _write_settings({"theme": self.theme})


def design_name(recipe: Recipe) -> str:
    """A file name for the design as edited: a shape in the recipe's name follows the worker counts
    (demo-1p1d edited to two prefills is demo-2p1d)."""
    import re

    if recipe.mode != "disagg":
        return recipe.name
    shape = f"{recipe.prefill.workers}p{recipe.decode.workers}d"
    name, n = re.subn(r"(?<![0-9])[0-9]+p[0-9]+d(?![a-z0-9])", shape, recipe.name, flags=re.I)
    return name if n else f"{recipe.name}-{shape}"


def _blocked_text(a: Assessment) -> Text:
    from .hints import in_console

    errors = a.errors()
    out = Text(f"{len(errors)} error(s) must be fixed first:" if errors else "no plan could be made", style="bold")
    for f in errors:
        out.append(f"\n\n× {f.rule}" + (f" [{f.node}]" if f.node else ""), style="bold")
        out.append(f"  {f.message}")
        where, fix = in_console(f)
        out.append(f"\n  → change {where}: {fix}")
    return out


def _is_shipped(path: Path) -> bool:
    from ..core.config.paths import recipes_dir

    try:
        return path.expanduser().resolve().is_relative_to(recipes_dir().resolve())
    except OSError:
        return False


def _settings_path() -> Path:
    from ..core.config.paths import config_dir

    return config_dir() / "console.yaml"


def _read_settings() -> dict:
    try:
        text = _settings_path().read_text()
    except OSError:
        return {}
    import yaml  # not before the first frame when there is no settings file

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _write_settings(values: dict) -> None:
    import yaml

    try:
        path = _settings_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({**_read_settings(), **values}))
    except OSError:
        pass  # remembering the theme is a convenience, never an error


def _run_design(run_id: str) -> tuple[str | None, str | None]:
    """`--run` without a recipe: design views show the run's recipe and cluster when they can be found."""
    from ..core.config.clusters import find as find_cluster
    from ..core.config.errors import AtomdeckError
    from ..core.config.paths import find_recipe
    from ..core.run.run import Run

    try:
        meta = next((m for m in Run.list() if m.get("id") == run_id or str(m.get("id", "")).startswith(run_id)), {})
        recipe, cluster = meta.get("recipe"), meta.get("cluster")
        if recipe and cluster:
            find_recipe(recipe)
            find_cluster(cluster)
            return recipe, cluster
    except (AtomdeckError, OSError):
        pass
    return None, None


def console_options(cluster: str | None, recipe: str | None, run_id: str | None) -> tuple[str, str | None, bool]:
    """(recipe, cluster, ask) for the console: the demo recipe on the current context (None: the clusters file's
    `current:`, else the demo cluster, read after the first frame) unless told otherwise; a cluster without a
    recipe opens the Open screen on that cluster, but `--run` always wins: it opens that run."""
    if run_id and recipe is None:
        run_recipe, run_cluster = _run_design(run_id)
        if cluster is None or cluster == run_cluster:
            recipe, cluster = run_recipe, run_cluster or cluster
    ask = cluster is not None and recipe is None and not run_id
    return recipe or DEMO_RECIPE, cluster, ask


def run_console(cluster: str | None = None, recipe: str | None = None, readonly: bool = False, **kw: Any) -> int:
    """`atomdeck` / `atomdeck tui`: see console_options."""
    recipe, cluster, ask = console_options(cluster, recipe, kw.get("run_id"))
    app = ConsoleApp(recipe, cluster, readonly=readonly, ask=ask, defer=True, **kw)
    result = app.run()
    if app.load_error is not None:
        raise app.load_error
    return result if isinstance(result, int) else 0
