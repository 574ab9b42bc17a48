"""Every process's liveness and log: follow the log from the saved offset, classify each line, and
record how the process ended (its last lines say why)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ...config.errors import AtomdeckError
from ...config.secrets import nothing_to_mask
from ..classify import classify, says_nothing
from ..diagnose import diagnose
from ..events import TERMINAL, Event
from .base import RunHost, cancel_all, keep_going

if TYPE_CHECKING:
    from ...launch.base import ProcHandle, ProcStatus
    from .base import WatcherGroup as Watchers  # (the package imports this module)

HANDLE_POLL_S = 0.2  # a process stopped by an action: how often its handle file is read for the new process
ORPHAN_POLL_S = 1.0  # an engine whose supervisor is gone, where its launcher's wait() returns at once


class LogWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group

    async def watch_proc(self, name: str) -> None:
        """Follow one process until the watch ends: its log, and how it ended. A process an action stops on
        purpose (a restart, by this session or another: core/run/intents.py) is "stopped", not failed, and the
        new process the action starts is followed in its place."""
        run = self.run
        while True:
            h = run.handles[name]
            p = run.state.procs[name]
            if h.pid and p.pid != h.pid and p.stage in TERMINAL and not p.removed:
                # an action started it again while no session watched (its session was killed): follow it
                run.emit(Event("proc.reset", name, "", f"started again (pid {h.pid})", {"pid": h.pid}))
                run.emit(Event("proc.started", name, "", f"pid {h.pid} on {h.node}", {"pid": h.pid}))
            new = await self._follow(name, h)
            if new is None:
                if run.handles[name].pid != h.pid:
                    continue  # this session's action started it again (an added worker back in its slot)
                return
            run.handles[name] = new
            run.emit(Event("proc.reset", name, "", f"started again (pid {new.pid})", {"pid": new.pid}))
            run.emit(Event("proc.started", name, "", f"pid {new.pid} on {new.node}", {"pid": new.pid}))
            self.group.pairs.again(name)

    async def _follow(self, name: str, h: ProcHandle) -> ProcHandle | None:
        """One process's life; the handle of the process an action started in its place, if one did."""
        run = self.run
        tail = asyncio.create_task(keep_going(run.emit, f"reading {name}'s log", lambda: self.tail(name, h)))
        try:
            p = run.state.procs[name]
            if p.alive is False and p.stage in TERMINAL:
                return await self._started_again(name, h)  # already over: the tail, until one starts in its place
            status = await run.launcher.wait(h)
            while status.alive:  # its supervisor is gone and the engine lives on: its own end is waited for
                self.supervisor_gone(name, status)
                before = time.monotonic()
                status = await run.launcher.wait(h)
                if status.alive and time.monotonic() - before < ORPHAN_POLL_S:
                    await asyncio.sleep(ORPHAN_POLL_S)  # a launcher that cannot wait on it: polled
            # read the log to its end first: the last lines usually say why it ended
            await cancel_all([tail])
            await self.drain(name, h, idle=0.15 if h.launcher != "ssh" else 0.6)
            last = list(run.state.procs[name].last_lines)[-10:]
            if not run.stopping and run.torn_down_elsewhere():
                run.stopping = True
            if run.state.procs[name].pid not in (None, h.pid):
                return None  # another process is this name's now (an action started it): this one's end is old news
            intent = None if run.stopping else run.expected_exit(name, h.pid)
            value = "stopped" if run.stopping or intent is not None else "failed"
            detail = status.detail if status.exit_code != 0 or value == "stopped" else "exited 0 unexpectedly"
            if intent is not None:
                detail = f"{detail}: stopped for the {intent.kind} by {intent.source}"
            run.emit(Event("proc.exit", name, value, detail, {"code": status.exit_code, "last_lines": last}))
            self.group.barrier.wake(h.node)
            if intent is not None:
                new = await self._next_handle(name, h)
                if new is not None:
                    return new
            elif not run.stopping and not self.group.policy.on_exit(name, status.exit_code, detail):
                run._fail()
            tail = asyncio.create_task(self.tail(name, h))  # a few more lines may come over slow links
            return await self._started_again(name, h)
        finally:
            await cancel_all([tail])

    async def _started_again(self, name: str, old: ProcHandle) -> ProcHandle | None:
        """A process that ended (a crash that failed the run, a removed worker): whenever an action, of this
        session or another, starts one in its place (a restart of the failed worker, an add into a removed one's
        slot), the new one; None when this session's action did (its handle is in memory: watch_proc goes on)."""
        while True:
            if self.run.handles[name].pid != old.pid:
                return None
            h = self.run.saved_handle(name)
            if h is not None and h.pid and (h.pid, h.node) != (old.pid, old.node):
                return h
            await asyncio.sleep(HANDLE_POLL_S)

    async def _next_handle(self, name: str, old: ProcHandle) -> ProcHandle | None:
        """The process an action starts in place of `old` (its handle file names another PID), or None once
        no action on it runs any more."""
        while True:
            h = self.run.saved_handle(name)
            if h is not None and h.pid and (h.pid, h.node) != (old.pid, old.node):
                return h
            if self.run.expected_exit(name) is None:
                h = self.run.saved_handle(name)  # (it may have been written just before the action ended)
                return h if h is not None and h.pid and h.pid != old.pid else None
            await asyncio.sleep(HANDLE_POLL_S)

    def supervisor_gone(self, name: str, status: ProcStatus) -> None:
        """The process lives (its engine's PID says so) but its supervisor is gone: said once, with the words the
        operator needs; the run keeps its status (the engine serves), and the diagnosis names it."""
        run = self.run
        p = run.state.procs.get(name)
        if p is None or p.supervisor_gone or run.stopping:
            return
        doing = "serving" if p.stage in ("serving", "registered", "http_up") else \
            f"running ({p.stage.replace('_', ' ')})"
        detail = (f"{name}'s supervisor is gone; the engine (pid {status.engine_pid}) is still {doing}; its exit "
                  f"code will not be recorded")
        run.emit(Event("proc.supervisor", name, "gone", detail, {"engine_pid": status.engine_pid,
                                                                 "node": p.node}))
        run.emit(Event("note", name, detail=f"{detail} ({p.node})"))
        if run.state.status == "serving":  # the headline says it; the run still serves
            run._set_status("serving", diagnose(run.state).headline)

    async def tail(self, name: str, h: ProcHandle) -> None:
        """Follow the log. The lines a read hands over in one go (up to 256 between two turns of the loop)
        are handled together at the end of that turn (on_lines: one look for secrets and for anything to
        classify in all of them); the offset moves with each line as it is handled, never ahead of it."""
        pending: list[tuple[int, str]] = []
        failed: list[BaseException] = []
        soon: asyncio.Handle | None = None
        loop = asyncio.get_running_loop()

        def handle() -> None:
            nonlocal soon
            soon = None
            batch = pending[:]
            pending.clear()
            try:
                self.on_lines(name, batch)
            except Exception as e:  # raised in tail (keep_going resumes from the offset of the failed line)
                failed.append(e)

        try:
            async for off, line in self.run.launcher.tail(h, self.run.offsets.get(name, 0)):
                if failed:
                    raise failed[0]
                pending.append((off, line))
                if soon is None:
                    soon = loop.call_soon(handle)
        finally:
            if soon is not None:
                soon.cancel()
            if pending and not failed:  # cancelled (the process ended, the watch stops): handled now
                handle()
        if failed:
            raise failed[0]

    def on_lines(self, name: str, batch: list[tuple[int, str]]) -> None:
        """on_line for each (offset after it, line) in order, each line's offset stored first; the secret
        masking and the classification looked for once in the whole batch (a flood's lines need neither:
        ~20 us a line each way, most of the watcher's CPU under 8 x 2,000 lines/s)."""
        run = self.run
        p = run.state.procs.get(name)
        if p is None or not batch:
            if batch:
                run.offsets[name] = batch[-1][0]
            return
        text = "\n".join(line for _, line in batch)
        known = getattr(run, "_secrets", None)  # the values Run.redact masks (another host: each line redacted)
        plain = known is not None and nothing_to_mask(text, known)
        quiet = says_nothing(text, p.role)
        for off, line in batch:
            run.offsets[name] = off
            self.on_line(name, line, plain, quiet)

    def on_line(self, name: str, raw: str, plain: bool = False, quiet: bool = False) -> None:
        """One line: `plain` (nothing to mask) and `quiet` (nothing to classify) when on_lines knows."""
        run, g = self.run, self.group
        p = run.state.procs.get(name)
        if p is None:
            return
        line = raw if plain else run.redact(raw)  # everything kept or shown from here on is redacted
        p.last_lines.append(line)
        p.last_line_at = time.time()
        for fn in list(run.line_listeners):
            fn(name, line)
        if quiet:
            return
        m = classify(line, p.role)
        if m is None:
            return
        if m.kind == "stage":
            if run.emit_stage(name, m.value) and m.value in ("kv_registered",):
                g.barrier.wake(p.node)
            if p.role == "router" and m.value == "workers_registered":
                for w in run.state.procs.values():
                    if w.role != "router" and w.stage == "http_up":
                        run.emit_stage(w.name, "registered")
            if p.role == "router" and m.value == "ready":
                g.binding.ready(name, line)
        elif m.kind == "hint":
            g.barrier.hint(name, p.node)
            if m.value == "binding":
                g.binding.ready(name, line)
        elif m.kind == "error":
            run.emit(Event("proc.error", name, m.value, line.strip()[:500]))
            if p.role == "router" and m.value in ("kv-role", "workers-timeout"):
                run._fail(f"router: {line.strip()[:300]}")
        elif m.kind == "pair":
            g.pairs.on_line(p.name, p.role, m.value, line)

    async def drain(self, name: str, h: ProcHandle, idle: float = 0.3) -> None:
        """The log from the saved offset to its end of file (not "until quiet for `idle`": a connect
        through a jump host can take longer). `idle` is kept for callers; it no longer matters."""
        try:
            async for off, line in self.run.launcher.read_log(h, self.run.offsets.get(name, 0)):
                self.run.offsets[name] = off
                self.on_line(name, line)
        except AtomdeckError:  # the node stayed unreachable: the follower picks the rest up later
            return

    async def refresh(self) -> None:
        """One pass: liveness of every process, then the new lines of every log."""
        run = self.run
        for name, h in run.handles.items():
            p = run.state.procs.get(name)
            st = await run.launcher.poll(h)
            if st.orphaned:
                self.supervisor_gone(name, st)
            if not st.alive and p is not None and p.alive is not False:
                value = "stopped" if run.state.status in ("stopping", "stopped") else "failed"
                run.emit(Event("proc.exit", name, value, st.detail, {"code": st.exit_code}))
                if value == "failed":
                    run._fail()  # run.json says so too, not only this status pass
        await asyncio.gather(*(self.drain(n, h) for n, h in run.handles.items()))
