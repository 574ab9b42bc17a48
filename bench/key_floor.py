"""The floor under a key press at 128 nodes: what the machine itself gives a program in tmux that does nothing but
answer a key, while scale_console.py's 64P64D (1,290 simulator processes) comes up on its 2 cores.

The run is brought up by `atomdeck up --wait` (the CLI: it starts the processes and watches them until they serve,
as the console and its watcher do), and in the same tmux set-up as scale_console.py a stand-in for the console
answers each key, timed the same way (Term.press_until: from sending the key through tmux's control client to the
pane printing the answer):
- `echo`: one Python thread reading the terminal in raw mode and writing "key N" at once (one wake-up a key)
- `textual`: a Textual app of one Static that shows "key N" on each key (Textual's input thread, its loop and
  its writer thread: the three wake-ups of a Textual app, without any of the console's work)
Presses before the run's `starting` event (every process started) are "starting", then "coming up" until
`atomdeck up --wait` returns (serving), then 30 "serving" presses. Printed and saved (section `key-floor-MODE`).

    bench/isolated .venv/bin/python bench/key_floor.py echo        # or textual; a node count after it (128)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import NotShown, console_in_tmux, save
from scale_console import _summary, cluster_yaml, recipe_yaml

ECHO = r"""
import os, sys, tty
tty.setraw(0)
os.write(1, b"floor ready\r\n")
n = 0
while True:
    got = os.read(0, 64)
    if not got or b"\x03" in got:
        break
    n += len(got)
    os.write(1, b"key %05d\r\n" % n)
"""

TEXTUAL = r"""
from textual.app import App
from textual.widgets import Static

class Floor(App):
    n = 0
    def compose(self):
        yield Static("floor ready", id="k")
    def on_key(self, event):
        self.n += 1
        self.query_one("#k", Static).update(f"key {self.n:05d}")

Floor().run()
"""

PROGRAMS = {"echo": ECHO, "textual": TEXTUAL}


def presses(term, until, first: int, gap: float = 0.25) -> list[tuple[float, float, float]]:
    """(sent, seconds to shown, wall time sent) of each press until `until()`; keys counted from `first`."""
    out, n = [], first
    while not until():
        n += 1
        wall = time.time()
        try:
            took = term.press_until("x", f"key {n:05d}", timeout=10)
        except NotShown:
            took = float("inf")
        out.append((time.monotonic() - took, took, wall))
        term.forget(gap)
        time.sleep(gap)
    return out


def stats(lat: list[float]) -> dict:
    """scale_console.py's summary of the presses (a press never shown counts as missed)."""
    shown = [x for x in lat if x != float("inf")]
    return _summary(shown, len(lat) - len(shown))


def main(mode: str, n: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="keyfloor-") as d:
        tmp = Path(d)
        (tmp / "floor.py").write_text(PROGRAMS[mode])
        (tmp / "scale.yaml").write_text(cluster_yaml(n))
        (tmp / "recipe.yaml").write_text(recipe_yaml(n))
        with console_in_tmux(tmp, f"{sys.executable} {tmp / 'floor.py'}", ATOMDECK_SIM_SPEED="20") as term:
            term.wait_for("floor ready", timeout=30)
            term.attach_control()
            env = {**os.environ, **term.env}
            t_launch = time.time()
            with open(tmp / "up.log", "w") as log:  # (a pipe nobody reads until the end would fill and hold it)
                up = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "up", str(tmp / "recipe.yaml"),
                                       "--cluster", str(tmp / "scale.yaml"), "--wait", "--timeout", "600"],
                                      stdout=log, stderr=subprocess.STDOUT, env=env)
                try:
                    coming = presses(term, lambda: up.poll() is not None, 0)
                finally:
                    if up.poll() is None:  # (the run it started is taken down by console_in_tmux)
                        up.terminate()
                        up.wait()
            t_serving = time.time()
            if up.returncode != 0:
                said = (tmp / "up.log").read_text()
                raise SystemExit(f"atomdeck up exited {up.returncode}:\n{said[-2000:]}")
            serving_left = [30]

            def thirty() -> bool:
                serving_left[0] -= 1
                return serving_left[0] < 0
            serving = presses(term, thirty, len(coming))
            runs = sorted((tmp / "state" / "atomdeck" / "runs").iterdir())
            events = [json.loads(line) for line in (runs[-1] / "events.jsonl").read_text().splitlines()]
            started = next(e["t"] for e in events if e.get("kind") == "run" and e.get("value") == "starting")
    out = {"mode": mode, "nodes": n, "launch_to_started_s": round(started - t_launch, 2),
           "launch_to_serving_s": round(t_serving - t_launch, 2),
           "key_starting": stats([p[1] for p in coming if p[2] < started]),
           "key_coming_up": stats([p[1] for p in coming if p[2] >= started]),
           "key_serving": stats([p[1] for p in serving])}
    return out


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "echo"
    if mode not in PROGRAMS:
        raise SystemExit(f"key_floor.py: the mode is one of {', '.join(PROGRAMS)}, not {mode!r}")
    result = main(mode, int(sys.argv[2]) if len(sys.argv) > 2 else 128)
    for phase in ("key_starting", "key_coming_up", "key_serving"):
        s = result[phase]
        ms = {k: round(s[k] * 1000, 1) if k in s else None for k in ("p50_s", "p95_s", "max_s")}
        print(f"{mode:8} {phase:14} n={s['presses']:3} (missed {s['missed']})  p50 {ms['p50_s']} ms  "
              f"p95 {ms['p95_s']} ms  max {ms['max_s']} ms")
    print(f"launch -> every process started {result['launch_to_started_s']} s, -> serving "
          f"{result['launch_to_serving_s']} s")
    save(f"key-floor-{mode}", result)
    print(json.dumps(result))
