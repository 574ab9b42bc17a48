"""The run side of the console: launch (the default launch handler), attach and watch, open logs,
tear down, reattach, quit without stopping anything. ConsoleApp has one RunController (`app.runs`);
the design side stays in app.py. core's Run does the work. Watching runs in a watcher process (watcher.py,
watch_client.py) so the console's own loop only draws; teardown and launch are core calls awaited in workers."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from rich.text import Text
from textual.screen import ModalScreen

from ..core.design.lint import Assessment
from .action_control import ActionController
from .messages import RunUpdated
from .screens.base import can_draw

WATCH_AFTER_TEARDOWN_S = 1.0

if TYPE_CHECKING:
    from textual.worker import Worker

    from ..core.run.run import Run
    from .live import LiveRun
    from .protocols import ControllerHost
    from .watch_client import WatchProcess


class RunController:
    """The console's attached run (one at a time) and what is done to it. Owned by the App, which it
    uses for screens, workers, notifications and messages (as protocols.ControllerHost: it never imports the
    App); the run views use it as protocols.RunSide."""

    def __init__(self, app: ControllerHost, context: str = "") -> None:
        """context: the cluster this controller's runs are on (the App keeps one controller per cluster it has
        been switched to, each watching its run: contexts.py); it names the controller's worker groups, so
        that one cluster's exclusive workers never cancel another's."""
        self.app = app
        self.context = context
        self._group = f"-{context}" if context else ""
        self.live: LiveRun | None = None
        self.launching = ""  # what the run view says while Run.launch works
        self.launch_step = ""  # what that launch does now (core's progress: the allocation's wait, the count)
        self._launch_t0 = 0.0
        self._quit_armed = False  # q pressed once during a launch
        self._quit_after_launch = False  # q pressed twice while the launch started the processes: quit when it ends
        self.quit_message: Text | None = None  # what quitting printed (the run left running)
        self._watch_worker: Worker | None = None
        self._watcher: WatchProcess | None = None
        self._pulsed: tuple = ()
        self.actions = ActionController(app, lambda: self.live)

    def request_action(self, kind: str, target: str | None = None, role: str | None = None) -> None:
        """Restart or remove a process, or add a worker, on the attached run (asks first: action_control.py)."""
        self.actions.request(kind, target, role)

    def show_run_view(self) -> Awaitable[None]:
        """Switch to the run view, dropping screens left on it for another run (a log view of the
        run watched before: its listeners are gone, it would show that run frozen). Awaiting the result
        waits until the view is mounted."""
        switched = self.app.switch_mode("run")
        while len(self.app.screen_stack) > 1 and getattr(self.app.screen, "live", self.live) is not self.live:
            self.app.pop_screen()
        return switched


    def refuse_while_launching(self, what: str) -> bool:
        """True (and says so) while Run.launch works: a second launch, opening or tearing down another
        run meanwhile would cancel it half-way or race it for the run view."""
        if self.launching:
            self.app.notify(f"a launch is in progress; {what} when it has started (4 Run shows it)",
                        title="Launching", severity="warning")
            return True
        return False

    async def launch_run(self, a: Assessment) -> None:
        """The default launch handler: core's Run.launch (in the launch worker), then watch it."""
        from .screens.dialogs import MessageDialog

        if self.live is not None and self.live.teardown_running:
            self.app.notify("a teardown is still running; launch again when it finished", severity="warning")
            return
        before = self.live
        plan = a.plan
        assert plan is not None
        self.launching = (f"Launching {a.recipe.name} ({plan.shape}) on {a.cluster.name}: "
                          f"{len(a.processes)} processes on {len(plan.nodes)} nodes")
        self.launch_step, self._launch_t0 = "", self.app.now()
        await self.detach()
        await self.show_run_view()
        self.poke()
        # the run view says "Launching ..." before the first process starts (at most 2 s late): once they start
        # (129 at 128 local nodes) each takes its share of the CPU, and the console drew that view 7-12 s late
        self.app.screen.refresh()  # (a frame is due even if nothing else changed)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.app.screen.wait_for_refresh(), 2.0)
        from ..core.run.run import Run

        # what attach() imports, imported while the machine is still quiet: after 129 local starts the same
        # imports held this loop 0.3 s, keys waiting (scale_console.py 128 with bench/busy_trace)
        for module in ("live", "watch_client"):
            importlib.import_module(f"{__package__}.{module}")
        # and the CSS of what attach shows first: its notice, the run view's footer groups, the teardown dialog
        from textual.containers import HorizontalGroup
        from textual.widgets import Label
        from textual.widgets._footer import KeyGroup
        from textual.widgets._toast import Toast, ToastHolder

        from .screens.teardown import TeardownScreen

        self.app.warm_css(ToastHolder, Toast, KeyGroup, HorizontalGroup, Label, TeardownScreen)
        from .gc_steward import settle_gc

        settle_gc()  # the GC's full pass of attach, made now (LiveRun's settle); the run's own objects
        self.app.gc_steward.due()  # wait for the steward's next quiet full pass

        try:
            run = await Run.launch(self.app.workspace, a, progress=self._launch_said, on_run=self._run_created)
        except Exception as e:  # every refusal is shown, none crashes the console
            self.launching, self.launch_step, self._quit_armed = "", "", False
            if self._quit_after_launch:
                self._quit_after_launch = False
                await self.quit()
                return
            self.poke()  # (a run that exists stays attached, not watched: its view says so, D tears it down)
            if self.live is None and before is not None:  # refused before a run existed: back to the one watched
                await self._open_run(before.id)
            findings = getattr(e, "findings", None)
            if findings:
                self.app.push_screen(MessageDialog("Pre-flight failed: nothing was launched",
                                                   _preflight_text(findings)))
            else:
                self.app.push_screen(MessageDialog("Launch failed", Text(str(e) or type(e).__name__)))
            return
        self.launching, self.launch_step, self._quit_armed = "", "", False
        if self._quit_after_launch:  # (q twice while the processes started) quit now, the run running
            self._quit_after_launch = False
            await self.quit()
            return
        live = self.live
        if live is not None and live.run is run:
            self._watch_live(live)
        else:  # (a launch handler's Run that skipped on_run)
            self.attach(run, settled=True)
        if before is not None and before.running:
            self.app.notify(f"run {before.id} keeps running (not watched now); 5 Runs lists it", title="Launched")
        self.app.notify(f"run {run.id}: {len(run.handles)} processes started", title="Launched")

    def _launch_said(self, what: str) -> None:
        """Core's launch progress: kept, and drawn by the next pulse (a count of 129 starts is not 129 frames)."""
        self.launch_step = what

    @property
    def launch_elapsed(self) -> int:
        """Whole seconds since the launch key by the console's clock (0 when no launch works)."""
        return int(self.app.now() - self._launch_t0) if self.launching else 0

    async def _run_created(self, run: Run) -> None:
        """Core's launch made the run and is about to start its processes (Run.launch's on_run): attach it now,
        not watched yet (the watcher finds the processes by the handles the starts write), so the run view shows
        the run LAUNCHING, its processes pending and the launcher's count in the header, instead of a line of text
        (each process is shown started as core hears its start: Launcher.on_started). Its first whole draw (at 128
        nodes ~100 ms of CPU, 300 ms and more of wall time once 129 processes boot: it held a key at the attach)
        is made here, before the first start (bench/scale_console.py)."""
        from .live import LiveRun

        self.launch_step = ""  # (what core said before: the ports check, the allocation; the count comes next)
        self.live = LiveRun(run, settle=False)  # (launch_run settled the GC already)
        self.redraw()  # now, not at the next pulse (a run not drawn yet is drawn whole, in this turn)
        self.poke()
        screen = self.app.screen
        if getattr(screen, "VIEW", None) != "run":  # the operator went to another view: drawn when shown
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(screen.wait_for_refresh(), 2.0)

    def attach(self, run: Run, watch: bool = True, settled: bool = False) -> LiveRun:
        """Make `run` the console's run (the previous one must have been detached) and watch it:
        core's Run.watch runs in a watcher process (watcher.py), which reports here. settled: the GC's
        settle pass was made already (launch_run, before the processes started)."""
        from .live import LiveRun  # with the run's events: not needed for the first frame

        live = LiveRun(run, settle=not settled)
        self.live = live
        if watch:
            self._watch_live(live)
        self.poke()
        return live

    def _watch_live(self, live: LiveRun) -> None:
        """Watch the attached run: core's Run.watch in a watcher process (watcher.py), which reports here."""
        from .watch_client import WatchProcess

        live.watching = True
        self._watcher = WatchProcess(live.run)
        # the watcher sends every line only of the processes a view shows (the log view, the last
        # lines): under a flood the others would cost this loop 2,000 decoded lines a second each
        self._watcher.on_from, self._watcher.on_count = live._on_from, live._on_count
        live.use_watcher(self._watcher.want)
        self._watch_worker = self.app.run_worker(self._watch(live, self._watcher), group="watch" + self._group,
                                                 exclusive=True, exit_on_error=False)
        self.poke()

    async def _watch(self, live: LiveRun, watcher: WatchProcess) -> None:
        try:
            await watcher.start()
            await watcher.pump()
        except asyncio.CancelledError:
            await watcher.stop()
            raise
        except Exception as e:  # watching failed; the deployment is untouched
            watcher.error = watcher.error or str(e) or type(e).__name__
        finally:
            live.watching = False
            live.use_watcher(None)
            live.version += 1
        if watcher.error and self.live is live:
            self.app.notify(f"stopped watching run {live.id}: {watcher.error}", title="Watch", severity="error",
                        timeout=10)

    async def _stop_watch(self) -> None:
        """Stop the watcher process (it saves where it read each log) and wait until it ended."""
        watcher, self._watcher = self._watcher, None
        worker, self._watch_worker = self._watch_worker, None
        if watcher is not None:
            await watcher.stop()
        if worker is not None and not worker.is_finished:
            try:
                await asyncio.wait_for(worker.wait(), 2.0)
            except Exception:  # it ended one way or another
                worker.cancel()

    async def detach(self) -> None:
        """Stop watching the run (it keeps running) and let go of its connections."""
        live, self.live = self.live, None
        if live is None:
            return
        await self._stop_watch()
        live.detach()
        try:
            await live.run.close()
        except Exception:  # closing connections must not keep the console from moving on
            pass
        self.poke()

    def open_run(self, run_id: str) -> None:
        """Reattach to a run (Runs view, or `--run`): Run.open, then watch it unless it is over."""
        if self.live is not None and self.live.id == run_id:
            self.show_run_view()
            return
        self.app.run_worker(self._open_run(run_id), group="attach" + self._group, exclusive=True,
                            exit_on_error=False)

    async def _open_run(self, run_id: str) -> LiveRun | None:
        from ..core.run.run import Run
        from .live import LiveRun

        if self.live is not None and self.live.teardown_running:
            self.app.notify("a teardown is running; wait for it before opening another run", severity="warning")
            return None
        if self.refuse_while_launching("open another run"):
            return None
        try:
            run = Run.open(run_id)
        except Exception as e:  # a damaged run directory is reported, not fatal
            self.app.notify(f"cannot open run {run_id}: {e}", title="Runs", severity="error")
            return None
        await self.detach()
        live = self.attach(run, watch=run.state.status not in LiveRun.OVER)
        self.show_run_view()
        return live

    def open_logs(self, names: list[str], node: str | None = None) -> None:
        from .screens.logs import LogScreen

        if self.live is not None and names and not self.refuse_while_launching("open its logs"):
            self.app.push_screen(LogScreen(self.live, names, node))

    def request_teardown(self, run_id: str | None = None) -> None:
        """Ask (the safe choice focused), then tear down with progress. A run picked on the Runs view
        is reattached first."""
        if self.app.readonly:
            self.app.notify("read-only console: teardown is disabled", severity="warning")
            return
        self.app.run_worker(self._ask_teardown(run_id), group="attach" + self._group, exclusive=True,
                            exit_on_error=False)

    async def _ask_teardown(self, run_id: str | None) -> None:
        from .screens.dialogs import ConfirmDialog
        from .screens.teardown import TeardownScreen, plan_text

        live = self.live
        if self.refuse_while_launching("tear down"):
            return
        if run_id is not None and (live is None or live.id != run_id):
            live = await self._open_run(run_id)
        if live is None:
            self.app.notify("no run to tear down", severity="warning")
            return
        if live.teardown_running:
            self.app.push_screen(TeardownScreen(live))
            return

        def done(yes: bool | None) -> None:  # (the run reattached meanwhile is still the one confirmed)
            now = self.live
            if yes and (now is None or now.id != live.id):
                self.app.notify(f"run {live.id} is no longer the one shown: nothing was torn down", severity="error")
            elif yes and now is not None:
                self.app.push_screen(TeardownScreen(now)) if now.teardown_running else self.start_teardown(now)

        self.app.push_screen(ConfirmDialog(f"Tear down run {live.id}?", plan_text(live), yes="Tear down"), done)

    def start_teardown(self, live: LiveRun) -> None:
        from .screens.teardown import TeardownScreen

        live.begin_teardown()
        self.app.push_screen(TeardownScreen(live))
        self.app.run_worker(self._teardown(live), group="teardown", exit_on_error=False)

    async def _teardown(self, live: LiveRun) -> None:
        from ..core.config.errors import AtomdeckError

        watcher = self._watcher if self.live is live else None
        # the watcher is another session on the run: tell it a teardown starts, or it reads the exits
        # as crashes ("exited 0 unexpectedly"); if it cannot be told, stop it first
        if watcher is not None and not await watcher.tell_stopping():
            await self._stop_watch()
            watcher = None
        try:
            live.report = await live.run.teardown()
        except AtomdeckError as e:  # e.g. another atomdeck is tearing it down (the lock)
            live.teardown_error = str(e)
        except Exception as e:
            live.teardown_error = f"{type(e).__name__}: {e}"
        finally:
            live.teardown_running = False
            live.version += 1
        if live.report is not None and live.report.clean and watcher is not None and self._watcher is watcher:
            await asyncio.sleep(WATCH_AFTER_TEARDOWN_S)  # the barrier shows the ports closing, then rest
            if self._watcher is watcher:
                await self._stop_watch()
        self.poke()
        if live.report is not None:
            self.app.notify("verified clean: every process gone, every port closed" if live.report.clean
                        else f"NOT clean; see the run view, or `atomdeck down {live.id}`",
                        title=f"Teardown of {live.id}", severity="information" if live.report.clean else "error")

    def poke(self) -> None:
        """Redraw the run views now (not only on the next pulse)."""
        self._pulsed = ()
        self.pulse()

    def pulse(self) -> None:
        live = self.live
        key = (id(live), live.version, live.lines_version, live.teardown_running, live.watching) if live \
            else (None, self.launching, self.launch_step, self.launch_elapsed)
        if key != self._pulsed:
            self._pulsed = key
            self.app.post_message(RunUpdated(live.version if live else -1))

    def redraw(self) -> None:
        """Redraw the screens that show the run: the top screen, and the ones a dialog leaves visible
        below it (not a run view hidden under a full-screen log: redrawing it ten times a second would
        cost the log view its frames). The one guard against late pulses for every such screen: see
        screens.base.can_draw."""
        for screen in reversed(self.app.screen_stack):
            update = getattr(screen, "run_updated", None)
            if update is not None and can_draw(screen):
                update()
            if not isinstance(screen, ModalScreen):
                break

    async def quit(self) -> None:
        """Quit the console, never the deployment: a running run is left running, and we say how to
        come back to it or stop it."""
        live = self.live
        message = None
        if self.launching and not self._quit_armed:
            self._quit_armed = True
            self.app.notify("a launch is in progress. Press q again to interrupt it and quit: an allocation it "
                            "holds is released; what it already started stays until `atomdeck down`"
                            if live is None else  # (its processes are starting: RunController._run_created)
                            f"run {live.id} is starting its processes. Press q again to quit once every start "
                            f"returned: the run keeps running, `atomdeck down {live.id}` stops it",
                            title="Launching", severity="warning", timeout=8)
            return
        if self.launching and live is not None and not self._quit_after_launch:
            # core's launch starts the run's processes (the run is attached: RunController._run_created): the
            # console quits once every start returned (seconds), the run whole, as it quits with a run running.
            # A start can hang (an ssh node that does not answer: up to its timeout), so q once more quits now
            self._quit_after_launch = True
            self.app.notify("the processes are starting: the console quits once every start returned, and says "
                            "how to stop them. q once more quits now", title="Launching", severity="warning",
                            timeout=8)
            return
        if self.launching and live is not None:
            # q a third time: the launch is cancelled with the app's workers, and core records what it started
            # (Run._launch_cut_short outlives the cancellations; the app's asyncio.run waits for it before its loop
            # closes); `atomdeck down` stops those and sweeps the nodes for any whose start never answered
            message = Text.assemble(
                ("atomdeck: ", "bold"), f"the launch of run {live.id} was interrupted while its processes started; "
                "what started is left running.\n", "  stop it: ", (f"atomdeck down {live.id}", "bold"))
        elif self.launching:
            message = Text.assemble(("atomdeck: ", "bold"), "the launch was interrupted. `atomdeck runs` lists it; "
                                    "stop what it started with ", ("atomdeck down RUN", "bold"))
        else:
            message = self.left_running()
        self.quit_message = message
        await self.detach()
        self.app.exit(0, message=message)

    def left_running(self) -> Text | None:
        """What quitting says of the attached run when it goes on running (None when it does not)."""
        live = self.live
        if live is None or not live.running or live.state.status in ("stopped",):
            return None
        procs = live.running
        message = Text.assemble(
            ("atomdeck: ", "bold"), f"run {live.id} is still running ({len(procs)} processes on "
            f"{len(live.nodes_of(procs))} nodes); quitting stopped only the console.\n",
            "  watch it again: ", (f"atomdeck tui --run {live.id}", "bold"), "\n",
            "  stop it:        ", (f"atomdeck down {live.id}", "bold"))
        if live.teardown_running:
            message.append("\n  (its teardown was interrupted: run `atomdeck down` to finish it)")
        return message

    async def close(self) -> None:
        """However the console ends, its watcher process ends with it (the run does not)."""
        if self._watcher is not None:
            await self._stop_watch()


def _preflight_text(findings: list) -> Text:
    out = Text(f"{len(findings)} pre-flight finding(s) on the nodes:", style="bold")
    for f in findings:
        node = getattr(f, "node", None)
        out.append(f"\n\n× {getattr(f, 'rule', 'preflight')}" + (f" [{node}]" if node else ""), style="bold")
        out.append(f"  {getattr(f, 'message', f)}")
        fix, key = getattr(f, "fix", ""), getattr(f, "key", "")
        if fix:
            out.append(f"\n  → {'change ' + key + ': ' if key else ''}{fix}")
    return out


