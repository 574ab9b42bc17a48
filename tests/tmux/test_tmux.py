"""The real `atomdeck` command in a real terminal (tmux): open, launch from the preview, watch it
serve, tear it down with one key, verified clean; then quit with a run left running, which says
how to stop it, and stop it with `atomdeck down`.

Each test starts its own tmux server (-L with a unique socket) and kills only that server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from atomdeck.core.run.run import Run
from atomdeck.core.run.schedgroup import SLICE_NS

from tests.leftovers import alive, gone

# tests/run installs tmux as root; without it (not root) the test is skipped, but never under CI=true
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180),
              pytest.mark.skipif(shutil.which("tmux") is None and os.environ.get("CI") != "true",
                                 reason="tmux is not installed (Debian's tmux; tests/run installs it as root)")]

ATOMDECK = Path(sys.executable).parent / "atomdeck"


def _slice(proc: str) -> int:
    """A thread's or process's slice in ns, as the kernel reports it."""
    with open(f"{proc}/sched") as f:
        return int(next(line for line in f if line.startswith("se.slice")).split()[-1])


class Tmux:
    def __init__(self, tmp: Path):
        self.sock = f"atomdeck-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp = tmp

    def __call__(self, *args: str, check: bool = True) -> str:
        # pytest sets COLUMNS/LINES, which Textual would believe over the terminal's real size
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        out = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=20, env=env)
        if check and out.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {out.stderr}")
        return out.stdout

    def start(self, command: str) -> None:
        env = (f"env -u COLUMNS -u LINES TERM=xterm-256color ATOMDECK_SIM_SPEED=20 XDG_STATE_HOME={os.environ['XDG_STATE_HOME']} "
               f"XDG_CONFIG_HOME={os.environ['XDG_CONFIG_HOME']}")
        self("new-session", "-d", "-s", "s", "-x", "160", "-y", "50", "-c", str(self.tmp), f"{env} {command}")
        self("set-option", "-t", "s", "remain-on-exit", "on")
        self("set-option", "-s", "escape-time", "0")  # Escape then a key must not become Alt+key

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "s")

    def keys(self, *keys: str) -> None:
        for k in keys:
            self("send-keys", "-t", "s", k)
            time.sleep(0.15)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            shown = self.screen()
            if text in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"'{text}' never appeared; the screen was:\n{self.screen()}")

    def wait_gone(self, text: str, timeout: float = 30.0) -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            shown = self.screen()
            if text not in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"'{text}' never went away; the screen was:\n{self.screen()}")

    def exited(self) -> bool:
        return self("display-message", "-p", "-t", "s", "#{pane_dead}").strip() == "1"

    def kill(self) -> None:
        self("kill-server", check=False)
        socket = Path(f"/tmp/tmux-{os.getuid()}") / self.sock  # (or $TMUX_TMPDIR); tidy, not required
        socket.unlink(missing_ok=True)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.kill()
    for meta in Run.list():  # whatever happened, nothing may be left running
        run = Run.open(meta["id"])
        if alive(run):
            subprocess.run([str(ATOMDECK), "down", run.id], capture_output=True, timeout=60)
        assert gone(run) == [], f"run {run.id} left {gone(run)}"


def test_launch_watch_teardown_in_a_real_terminal(tmux):
    tmux.start(str(ATOMDECK))
    tmux.wait_for("1 Nodes")
    tmux.wait_for("demo-n01")
    tmux.keys("3")
    tmux.wait_for("processes on 2 nodes")
    tmux.keys("L")
    tmux.wait_for("Launch this deployment?")
    tmux.keys("y")
    shown = tmux.wait_for("SERVING")
    assert "1/1P 1/1D router serving" in shown
    # the whole frame, once the "Launched" toast (top right) no longer covers the Router panel's title
    shown = tmux.wait_for("Router · AToMesh")
    assert "Barrier" in shown and "Router" in shown and "KV handshake" in shown, shown
    (run,) = [Run.open(m["id"]) for m in Run.list()]
    assert sorted(alive(run)) == ["decode-0", "prefill-0", "router"]
    # On a terminal the console's threads (its loop, Textual's input and writer) asked the kernel for a short
    # slice (core/run/schedgroup.py); the engines it started did not inherit it
    console = int(tmux("display-message", "-p", "-t", "s", "#{pane_pid}"))
    slices = [_slice(f"/proc/{console}/task/{tid}") for tid in os.listdir(f"/proc/{console}/task")]
    assert slices.count(SLICE_NS) >= 3, slices
    engine = run.handles["decode-0"].pid
    assert _slice(f"/proc/{engine}") > SLICE_NS
    tmux.keys("D")
    shown = tmux.wait_for("Tear down run")
    assert "Cancel (n)" in shown and "demo-n02" in shown
    tmux.keys("y")
    shown = tmux.wait_for("verified clean")
    assert shown.count("gone") >= 3
    assert gone(run) == []
    tmux.keys("Escape")
    tmux.wait_for("STOPPED")
    # Only the dialog's own text going away shows it closed (the run view's footer stays drawn under
    # it). A "q" sent while the terminal still holds the Escape is read with it as one key, alt+q, and
    # both are lost: under load that was this test's rare failure (console "did not exit after q").
    tmux.wait_gone("verified clean")
    tmux.keys("q")
    t0 = time.monotonic()
    while not tmux.exited() and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert tmux.exited()
    assert "still running" not in tmux.screen()  # nothing was left to say


def test_quit_leaves_the_run_running_and_says_how_to_stop_it(tmux):
    tmux.start(str(ATOMDECK))
    tmux.wait_for("demo-n01")
    tmux.keys("3", "L", "y")
    tmux.wait_for("SERVING")
    (run,) = [Run.open(m["id"]) for m in Run.list()]
    tmux.keys("q")
    shown = tmux.wait_for(f"atomdeck down {run.id}", timeout=10)
    assert "still running" in shown and f"atomdeck tui --run {run.id}" in shown
    assert sorted(alive(run)) == ["decode-0", "prefill-0", "router"]  # the console is gone, the run is not
    down = subprocess.run([str(ATOMDECK), "down", run.id], capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and "verified clean" in down.stdout
    assert gone(run) == []
