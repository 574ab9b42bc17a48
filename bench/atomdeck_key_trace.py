"""`atomdeck` with a trace of where a key press waits (issue 19): run by `KEY_TRACE=FILE bench/console.py flood`.

Records time.monotonic() (CLOCK_MONOTONIC: the same clock in the bench and in the console) of each key event
made by Textual's input thread (K), the log screen's wrap action (A: start, end, wrap state) and pulses (U),
each screen update (F: compositor and display), each App._display (D), and each write and flush of Textual's
writer thread to the terminal (W: start, end, bytes, "wrap on" / "wrap off" in it; L), written to $KEY_TRACE as
JSON when the console exits. bench/console.py adds the times it sent each key and saw its effect."""
import atexit, json, os, sys, time, threading
from textual import events
from textual.app import App
from textual.drivers import _writer_thread as WT
from atomdeck.tui.screens.logs import LogScreen

REC = []
mono = time.monotonic
ok = events.Key.__init__
def key_init(self, *a, **k):
    ok(self, *a, **k); REC.append(("K", mono(), threading.current_thread().name, str(a[:1])))
events.Key.__init__ = key_init
oa = LogScreen.action_wrap
def aw(self):
    t = mono(); oa(self); REC.append(("A", t, mono(), self.logview.wrap))
LogScreen.action_wrap = aw
orun = LogScreen.run_updated
def ru(self):
    t = mono(); n = len(self.logview.lines); orun(self); REC.append(("U", t, mono(), self.received))
LogScreen.run_updated = ru
od = App._display
def disp(self, screen, renderable):
    t = mono(); od(self, screen, renderable); REC.append(("D", t, mono()))
App._display = disp
from textual.screen import Screen
ot = Screen._on_timer_update
def tu(self):
    t = mono(); ot(self); REC.append(("F", t, mono()))
Screen._on_timer_update = tu
class Proxy:
    def __init__(self, f): self.f = f
    def write(self, text):
        t = mono(); self.f.write(text); REC.append(("W", t, mono(), len(text), "wrap on" in text, "wrap off" in text))
    def flush(self):
        t = mono(); self.f.flush(); REC.append(("L", t, mono()))
    def __getattr__(self, n): return getattr(self.f, n)
oi = WT.WriterThread.__init__
def wi(self, file):
    oi(self, Proxy(file))
WT.WriterThread.__init__ = wi
def dump():
    with open(os.environ["KEY_TRACE"], "w") as f: json.dump(REC, f)
atexit.register(dump)
from atomdeck.core.cli.main import main
sys.argv[0] = "atomdeck"
sys.exit(main())
