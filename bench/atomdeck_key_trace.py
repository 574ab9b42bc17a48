"""`atomdeck` with a trace of where a key press waits (issue 19): run by `KEY_TRACE=FILE bench/console.py flood` or
`KEY_TRACE=FILE bench/scale_console.py`.

Records time.monotonic() (CLOCK_MONOTONIC: the same clock in the bench and in the console) of each key event
made by Textual's input thread (K), the log screen's wrap action (A: start, end, wrap state) and pulses (U),
the run view's cursor keys (A, wrap state None) and each panel's `show` (P: start, end, panel),
each screen update (F: layout, compositor and display; whether it laid the screen out), each widget's
`render_lines` (R: start, end, widget class, lines), each watcher message parsed (J: bytes) and folded
(M: events, lines), each App._display (D), each refresh that asks for a layout pass (Y: who asked), each pass of
the cyclic GC (G: generation), each write and flush of Textual's writer thread to the terminal (W: start, end,
characters, "wrap on" / "wrap off" in it; L), written to $KEY_TRACE as JSON when the console exits. bench/console.py writes FILE.bench.json: (sent, shown) of each press.
The file's name holds "atomdeck" so that bench/common.console_pid finds the process."""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import threading
import time

from atomdeck.core.cli.main import main
from atomdeck.tui import watch_client
from atomdeck.tui.screens.logs import LogScreen
from atomdeck.tui.watch_client import WatchProcess
from atomdeck.tui.widgets.barrier_grid import BarrierGrid
from atomdeck.tui.widgets.process_table import ProcessTable
from atomdeck.tui.widgets.run_panels import HandshakePanel, NodesPanel, RouterPanel, RunHeader, WhyPanel
from atomdeck.tui.widgets.serving_panel import ServingPanel
from atomdeck.tui.widgets.tail_panel import TailPanel
from atomdeck.tui.widgets.vtable import VirtualTable
from textual import events
from textual.app import App
from textual.drivers import _writer_thread
from textual.screen import Screen
from textual.widget import Widget

RECORDS: list[tuple] = []
RUN_PANELS = (HandshakePanel, NodesPanel, RouterPanel, RunHeader, WhyPanel)
now = time.monotonic


def _wrap(cls, name: str, record) -> None:
    original = getattr(cls, name)

    def traced(self, *args, **kwargs):
        t = now()
        out = original(self, *args, **kwargs)
        RECORDS.append(record(self, t, now()))
        return out

    setattr(cls, name, traced)


_key_init = events.Key.__init__


def _key(self, *args, **kwargs) -> None:
    _key_init(self, *args, **kwargs)
    RECORDS.append(("K", now(), threading.current_thread().name, self.key))


events.Key.__init__ = _key
_wrap(LogScreen, "action_wrap", lambda s, t0, t1: ("A", t0, t1, s.logview.wrap))
_wrap(LogScreen, "run_updated", lambda s, t0, t1: ("U", t0, t1, s.received))
_wrap(App, "_display", lambda s, t0, t1: ("D", t0, t1))
_wrap(VirtualTable, "action_cursor_down", lambda s, t0, t1: ("A", t0, t1, None))  # the run view's keys
_wrap(VirtualTable, "action_cursor_up", lambda s, t0, t1: ("A", t0, t1, None))
for _panel in (ProcessTable, BarrierGrid, TailPanel, ServingPanel, *RUN_PANELS):
    _wrap(_panel, "show", lambda s, t0, t1: ("P", t0, t1, type(s).__name__))
_handle = WatchProcess.handle


def _handled(self, msg: dict) -> None:
    """Each message of the watcher folded into the console's state (M: start, end, events, lines)."""
    t = now()
    _handle(self, msg)
    RECORDS.append(("M", t, now(), len(msg.get("e", ())), sum(len(lines) for _, lines in msg.get("l", ()))))


WatchProcess.handle = _handled


class _TimedJson:
    """watch_client's json module with `loads` timed (J: start, end, bytes): a report line is parsed in the loop."""

    def __getattr__(self, name: str):
        return getattr(json, name)

    @staticmethod
    def loads(text, *args, **kwargs):
        t = now()
        out = json.loads(text, *args, **kwargs)
        RECORDS.append(("J", t, now(), len(text)))
        return out


watch_client.json = _TimedJson()  # type: ignore[assignment]
_on_timer_update = Screen._on_timer_update
_render_lines = Widget.render_lines


def _rendered(self, crop):
    """Each widget's lines drawn for a frame (R: start, end, widget class, lines)."""
    t = now()
    out = _render_lines(self, crop)
    RECORDS.append(("R", t, now(), type(self).__name__, len(out)))
    return out


Widget.render_lines = _rendered
_refresh = Widget.refresh


def _refreshed(self, *args, **kwargs):
    """Each refresh that asks for a layout pass (Y: time, widget class, its id, the three callers above it)."""
    if kwargs.get("layout"):
        f, callers = sys._getframe(1), []
        while f is not None and len(callers) < 3:
            callers.append(f"{f.f_code.co_name}:{os.path.basename(f.f_code.co_filename)}")
            f = f.f_back
        RECORDS.append(("Y", now(), type(self).__name__, self.id, " < ".join(callers)))
    return _refresh(self, *args, **kwargs)


Widget.refresh = _refreshed


def _frame(self) -> None:
    """A screen update (F: start, end, whether it laid the screen out, the main thread's CPU seconds in it)."""
    t, cpu = now(), time.thread_time()
    layout = bool(self._layout_required)
    _on_timer_update(self)
    RECORDS.append(("F", t, now(), layout, time.thread_time() - cpu))


Screen._on_timer_update = _frame


class _Timed:
    """The writer thread's file: each write and flush timed."""

    def __init__(self, file) -> None:
        self.file = file

    def write(self, text: str) -> None:
        t = now()
        self.file.write(text)
        RECORDS.append(("W", t, now(), len(text), "wrap on" in text, "wrap off" in text))

    def flush(self) -> None:
        t = now()
        self.file.flush()
        RECORDS.append(("L", t, now()))

    def __getattr__(self, name: str):
        return getattr(self.file, name)


_gc_start = [0.0]


def _gc(phase: str, info: dict) -> None:
    """Each pass of the cyclic GC (G: start, end, generation): a full pass holds the loop as a busy frame does."""
    if phase == "start":
        _gc_start[0] = now()
    else:
        RECORDS.append(("G", _gc_start[0], now(), info["generation"]))


gc.callbacks.append(_gc)

_writer_init = _writer_thread.WriterThread.__init__


def _writer(self, file) -> None:
    _writer_init(self, _Timed(file))


_writer_thread.WriterThread.__init__ = _writer


@atexit.register
def _dump() -> None:
    with open(os.environ["KEY_TRACE"], "w") as f:
        json.dump(RECORDS, f)


def _dump_and_die(signum: int, _frame) -> None:
    """A console ended by its terminal going away (the bench kills tmux) writes its trace too."""
    _dump()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


signal.signal(signal.SIGHUP, _dump_and_die)
signal.signal(signal.SIGTERM, _dump_and_die)


if __name__ == "__main__":
    sys.argv[0] = "atomdeck"
    sys.exit(main())
