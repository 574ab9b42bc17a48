"""The console's actions on the attached live run (issue 38): restart a process, drain and remove a worker, add one.
Each asks first (core says what will happen: confirm.describe), then runs core's action in a worker; the steps
show in the process table as core's state folds them (the watcher process follows the new process and reads the
action's record), and the end is notified. An action cut short (the console killed) is shown on reattach, and
offered to be finished (R) or undone (X). Used by the App only (through its run controller)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .live import LiveRun
    from .protocols import ControllerHost

DRAIN_TIMEOUT_S = 60.0


class ActionController:
    def __init__(self, app: ControllerHost, live_of) -> None:
        self.app = app
        self.live_of = live_of  # () -> the attached LiveRun or None
        self.running: dict[str, str] = {}  # target -> kind, the actions this console runs now

    def request(self, kind: str, target: str | None = None, role: str | None = None) -> None:
        """Ask, then act: kind restart | remove (target: a process) | add (role)."""
        if self.app.readonly:
            self.app.notify("read-only console: actions on the run are disabled", severity="warning")
            return
        live = self.live_of()
        if live is None or live.over:
            self.app.notify("no live run to act on", severity="warning")
            return
        self.app.run_worker(self._ask(live, kind, target, role), group="actions", exit_on_error=False)

    async def _ask(self, live: LiveRun, kind: str, target: str | None, role: str | None) -> None:
        from ..core.run.confirm import describe
        from ..core.run.intents import read
        from .screens.dialogs import ConfirmDialog

        state = live.state
        if kind != "add":
            if not target or target not in state.procs:
                self.app.notify("pick a process in the table first", severity="warning")
                return
            earlier = read(live.run.rd.path, target)
            if earlier is not None and earlier.cut_short:
                self._cut_short(live, kind, target, earlier)
                return
        url = None
        if target and target in live.run.processes and state.procs[target].role != "router":
            url = live.run.plan.endpoint(target).url
        title, lines = describe(state, kind, target or "", drain_timeout=DRAIN_TIMEOUT_S, role=role or "", url=url)
        word = {"restart": "Restart", "remove": "Remove", "add": "Add"}[kind]

        def done(yes: bool | None) -> None:
            if yes:
                self._start(live, kind, target, role)

        self.app.push_screen(ConfirmDialog(title, "\n".join(lines), yes=word, danger=kind != "add"), done)

    def _cut_short(self, live: LiveRun, kind: str, target: str, earlier) -> None:
        """An action on the process was cut short (its session is gone): R finishes it, X undoes it (core's
        resume and rollback); an add cut short can only be undone."""
        from .screens.dialogs import ConfirmDialog

        what = f"{earlier.words()} was cut short at step {earlier.step} (its session is gone)."
        if kind == "restart" and earlier.kind != "add":
            def finish(yes: bool | None) -> None:
                if yes:
                    self._start(live, earlier.kind, target, None, resume=True)

            then = (f"Finishing it starts {target} if it is stopped, registers it with the router again if it runs "
                    f"unregistered, or restarts it whole." if earlier.kind == "restart" else
                    f"Finishing it takes {target} out of the router if it is still listed, stops it and removes it.")
            self.app.push_screen(ConfirmDialog(f"Finish the {earlier.kind} of {target}?", f"{what}\n{then}\n"
                                               f"(X undoes it instead.)", yes="Finish it", danger=False), finish)
            return
        if kind == "remove":
            def undo(yes: bool | None) -> None:
                if yes:
                    self._start(live, "rollback", target, None)

            then = (f"Undoing it takes the added {target} out of the router, stops it and removes it."
                    if earlier.kind == "add" else
                    f"Undoing it registers {target} with the router again, if it was only taken out of it; a "
                    f"process the action already stopped cannot be put back (R finishes the action instead).")
            self.app.push_screen(ConfirmDialog(f"Undo the {earlier.kind} of {target}?", f"{what}\n{then}",
                                               yes="Undo it", danger=earlier.kind == "add"), undo)
            return
        self.app.notify(f"{target}: {what} X undoes it", severity="warning")

    def _start(self, live: LiveRun, kind: str, target: str | None, role: str | None, resume: bool = False) -> None:
        key = target or f"new {role}"
        if key in self.running:
            self.app.notify(f"this console is already running a {self.running[key]} of {key}", severity="warning")
            return
        self.running[key] = kind
        self.app.run_worker(self._act(live, kind, target, role, resume), group="actions", exit_on_error=False)

    async def _act(self, live: LiveRun, kind: str, target: str | None, role: str | None, resume: bool) -> None:
        from ..core.config.errors import AtomdeckError
        from ..core.run import actions
        from ..core.run.adding import add
        from ..core.run.intents import source

        who = source("console")
        key = target or f"new {role}"
        try:
            if kind == "restart":
                result = await actions.restart(live.run, target or "", drain_timeout=DRAIN_TIMEOUT_S, who=who,
                                               resume=resume)
            elif kind == "remove":
                result = await actions.remove(live.run, target or "", drain_timeout=DRAIN_TIMEOUT_S, who=who,
                                              resume=resume)
            elif kind == "rollback":
                result = await actions.rollback(live.run, target or "", who=who)
            else:
                result = await add(live.run, role or "decode", who=who, restart_router=role == "prefill")
        except AtomdeckError as e:
            self.app.notify(str(e), title=f"{kind} refused", severity="error", timeout=12)
            return
        except Exception as e:  # never a traceback on screen: say it, the record keeps the rest
            self.app.notify(f"{type(e).__name__}: {e}", title=f"{kind} of {key} failed", severity="error", timeout=12)
            return
        finally:
            self.running.pop(key, None)
            live.version += 1
        ok = result.outcome == "done"
        self.app.notify(result.detail, title=f"{kind} of {result.target}: {result.outcome}",
                        severity="information" if ok else "error", timeout=8 if ok else 15)
