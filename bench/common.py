"""Shared bits of the benchmarks: statistics, results files, the README table; the console in tmux (start,
keys timed through a control-mode client, teardown) and the sampling of its processes (RSS, fds, CPU)."""

from __future__ import annotations

import json
import os
import platform
import re
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results" / "latest.json"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summary(values: list[float]) -> dict:
    return {"n": len(values), "median": statistics.median(values) if values else None,
            "p95": pct(values, 95) if values else None, "min": min(values) if values else None,
            "max": max(values) if values else None}


def machine() -> dict:
    return {"host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "when": time.strftime("%Y-%m-%d %H:%M:%S")}


def save(section: str, data: dict) -> None:
    RESULTS.parent.mkdir(exist_ok=True)
    try:
        all_results = json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        all_results = {}
    all_results[section] = {**data, "machine": machine()}
    RESULTS.write_text(json.dumps(all_results, indent=2, default=str) + "\n")


def load() -> dict:
    try:
        return json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        return {}


# -- the console in tmux (console.py, scale_console.py, soak.py) --------------------------------------------
ATOMDECK = Path(sys.executable).parent / "atomdeck"


class NotShown(RuntimeError):
    """A key's effect never showed within the time given."""


class Term:
    """One tmux server of our own (-L unique socket), killed at the end. With a control-mode client
    attached (attach_control), keys sent through it are timed until the pane shows their effect."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        import uuid

        self.sock = f"atomdeck-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.workdir = workdir
        self.env = env
        self.control: subprocess.Popen | None = None
        self._pending = 0  # commands written to the control client whose %end (or %error) is not read yet
        self._partial = b""  # the control client's last line, not complete yet
        # press_until: how each press was seen (in the pane's output, or in a capture of the screen); the
        # output is matched as text (escapes decoded, terminal sequences dropped) unless raw_stream, and the
        # screen captured every capture_every seconds meanwhile (None: the caller's `every`)
        self.matched = {"stream": 0, "capture": 0}
        self.raw_stream = os.environ.get("BENCH_RAW_STREAM") == "1"
        self.capture_every: float | None = (float(os.environ["BENCH_CAPTURE_EVERY"])
                                            if os.environ.get("BENCH_CAPTURE_EVERY") else None)

    def __call__(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, env=env,
                              timeout=30).stdout

    def start(self, command: str, size=(160, 50)) -> None:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        self("new-session", "-d", "-s", "s", "-x", str(size[0]), "-y", str(size[1]), "-c", str(self.workdir),
             f"env -u COLUMNS -u LINES TERM=xterm-256color {env} {command}")
        # a control-mode client attaching later must not resize the window (it would be 80x24)
        self("set-option", "-t", "s", "window-size", "manual")
        self("set-option", "-s", "escape-time", "0")  # Escape then D must not become Alt+D

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "s")

    def wait_for(self, text: str | tuple[str, ...], timeout: float = 60.0, every: float = 0.01) -> float:
        """Until the screen shows `text` (or one of several); returns when it did."""
        texts = (text,) if isinstance(text, str) else text
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            screen = self.screen()
            if any(t in screen for t in texts):
                return time.monotonic()
            if self.control is not None:
                # an attached control client must be read: one that is not stops reading its stdin once
                # its output pipe is full (a 128-node launch prints that much in a second), and a key
                # sent through it ("y" that confirms the launch) was never delivered
                self.forget(every)
            time.sleep(every)
        raise RuntimeError(f"'{text}' never appeared:\n{self.screen()}\n{self.stacks()}")

    def stacks(self) -> str:
        """The pane's processes (the console and what it started): state, kernel wait and, where py-spy is at hand,
        each Python thread's stack, for a wait that timed out (was the console stopped, blocked, or busy?)."""
        import shutil

        pane = self("display-message", "-p", "-t", "s", "#{pane_pid}").strip()
        if not pane.isdigit():
            return "(no pane)"
        pids, todo = [], [int(pane)]
        while todo:
            p = todo.pop()
            pids.append(p)
            try:
                todo += [int(c) for t in os.listdir(f"/proc/{p}/task")
                         for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                pass
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out = []
        for p in pids[:6]:
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
                state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
                wchan = Path(f"/proc/{p}/wchan").read_text()
            except OSError:
                continue
            out.append(f"== pid {p} state {state} wchan {wchan}: {cmd}")
            if os.path.exists(spy) and "python" in cmd:
                r = subprocess.run([spy, "dump", "--pid", str(p)], capture_output=True, text=True, timeout=30)
                out.append((r.stdout or r.stderr)[-6000:])
        return "\n".join(out)

    def keys(self, *keys: str) -> None:
        for k in keys:
            self("send-keys", "-t", "s", k)
            time.sleep(0.2)

    def server_pid(self) -> int | None:
        """The tmux server's PID (its CPU: what our pane's output and the bench's captures cost it)."""
        out = self("display-message", "-p", "-t", "s", "#{pid}").strip()
        return int(out) if out.isdigit() else None

    def pane_pid(self) -> int:
        return int(self("display-message", "-p", "-t", "s", "#{pane_pid}").strip())

    # control mode: a client that prints every byte the pane outputs as it happens ("%output %0 ..."
    # lines, escapes as \ooo octal) and answers each command with "%begin ..." ... "%end ..."
    def attach_control(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        self.control = subprocess.Popen(["tmux", "-L", self.sock, "-C", "attach", "-t", "s"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env, bufsize=0)
        self._pending, self._partial = 0, b""
        time.sleep(0.3)
        self.forget()

    def send_control(self, key: str) -> None:
        """Send a key through the control client (its %end is counted: see _read)."""
        assert self.control is not None and self.control.stdin is not None
        self._pending += 1
        self.control.stdin.write(send_keys(key))

    def _read(self) -> str:
        """Read what the control client printed (one read); return the pane output in it that tmux
        printed after the %end of every command we sent, i.e. output that came after our keys."""
        assert self.control is not None and self.control.stdout is not None
        chunk = os.read(self.control.stdout.fileno(), 1 << 20)
        if not chunk:
            raise RuntimeError(f"the tmux control client ended: {self._partial[-300:]!r}")
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        out = []
        for line in lines:
            if line.startswith((b"%end ", b"%error ")):
                self._pending = max(0, self._pending - 1)  # the attach's own answer finds none pending
            elif line.startswith(b"%output ") and self._pending == 0:
                out.append(line.decode("utf-8", "replace"))
        return "\n".join(out) + "\n" if out else ""

    def _waiting(self, timeout: float) -> bool:
        assert self.control is not None and self.control.stdout is not None
        return bool(select.select([self.control.stdout.fileno()], [], [], timeout)[0])

    def forget(self, at_most: float = 1.0) -> None:
        """Read and drop what the control client printed until nothing is waiting (a pane that never
        stops printing: for `at_most` seconds)."""
        end = time.monotonic() + at_most
        while self._waiting(0) and time.monotonic() < end:
            self._read()

    def press_until(self, key: str, pattern: re.Pattern | str, timeout: float = 5.0, every: float = 0.02) -> float:
        """Send a key through the control client; seconds until the pane shows `pattern`: in the pane's
        output printed after tmux delivered the key (after the send-keys' %end), or, when a redraw
        rewrote only part of a line, in a capture of the screen taken after that, at most every
        `every` seconds, which must show it more often than the screen did before the key (a pattern
        already on screen elsewhere is not the key's effect). Raises NotShown."""
        if isinstance(pattern, str):
            pattern = re.compile(re.escape(pattern))
        before = len(pattern.findall(self.screen()))
        self.forget()
        t0 = time.monotonic()
        self.send_control(key)
        seen = ""
        captured = t0
        every = self.capture_every if self.capture_every is not None else every
        while time.monotonic() - t0 < timeout:
            if self._waiting(every):
                seen = (seen + self._read())[-16384:]
                if self._pending == 0 and pattern.search(seen if self.raw_stream else pane_text(seen)):
                    self.matched["stream"] += 1
                    return time.monotonic() - t0
            if self._pending == 0 and time.monotonic() - captured >= every:
                captured = time.monotonic()
                if len(pattern.findall(self.screen())) > before:
                    self.matched["capture"] += 1
                    return time.monotonic() - t0
        raise NotShown(f"no output matching {pattern.pattern} within {timeout}s ({self._pending} key(s) not "
                       f"delivered yet; the last output after it: {seen[-300:]!r})")

    def press_until_screen(self, key: str, check, timeout: float = 5.0) -> float:
        """Send a key; seconds until the captured screen passes `check` (looked at whenever the pane
        printed something after tmux delivered the key). The screen must not pass it before the key."""
        if check(self.screen()):
            raise ValueError("the screen passes the check before the key: it cannot time the key's effect")
        self.forget()
        t0 = time.monotonic()
        self.send_control(key)
        while time.monotonic() - t0 < timeout:
            if self._waiting(0.05):
                self._read()
            if self._pending == 0 and check(self.screen()):
                return time.monotonic() - t0
        raise NotShown(f"the screen never passed the check within {timeout}s:\n{self.screen()}")

    def _close_control(self) -> None:
        if self.control is not None:
            try:
                self.control.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
            self.control.kill()
            self.control.wait()
            self.control = None

    def detach_control(self) -> None:
        if self.control is not None:
            self._close_control()
            time.sleep(0.3)

    def kill(self) -> None:
        self._close_control()
        self("kill-server")
        (Path(f"/tmp/tmux-{os.getuid()}") / self.sock).unlink(missing_ok=True)


_OCTAL = re.compile(r"\\([0-7]{3})")
# CSI (colours, cursor moves, modes), OSC (ended by BEL or ST), charset choices, the two-character escapes
_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()*+].|[@-_])")


def pane_text(output: str) -> str:
    """The text a pane printed, from control-mode "%output %N ..." lines: tmux's octal escapes decoded and
    the terminal's sequences dropped, so a line that a redraw wrote in one piece with colours in between
    reads as it shows ("· s012 on "). Cursor moves are dropped too: pieces written apart may run together."""
    text = "".join(line.split(" ", 2)[2] if line.count(" ") >= 2 else "" for line in output.split("\n"))
    return _SEQUENCE.sub("", _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text))


def send_keys(key: str) -> bytes:
    """A control-mode send-keys command: one character literally (so '-' or '/' are not options or
    key names), or a tmux key name such as BSpace or Escape."""
    if len(key) == 1:
        return f"send-keys -t s -l '{key}'\n".encode() if key != "'" else b"send-keys -t s -l \"'\"\n"
    return f"send-keys -t s {key}\n".encode()


def state_env(tmp: Path, **extra: str) -> dict[str, str]:
    return {"XDG_STATE_HOME": str(tmp / "state"), "XDG_CONFIG_HOME": str(tmp / "config"), **extra}


@contextmanager
def console_in_tmux(tmp: Path, command: str, **extra_env: str) -> Iterator[Term]:
    """`command` (an atomdeck console) in a tmux of its own, with state and config under `tmp` (also
    this process's XDG_STATE_HOME meanwhile, so Run.list() sees its runs). Afterwards, whatever
    happened: tmux killed, every run started there torn down (down_runs), the environment restored."""
    env = state_env(tmp, **extra_env)
    term = Term(tmp, env)
    old_state = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
    try:
        term.start(command)
        yield term
    finally:
        term.kill()
        down_runs(env)
        if old_state is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = old_state


def launch_to_serving(term: Term, node: str, timeout: float = 90.0, first: float = 20.0) -> None:
    """On the designer (a cluster showing `node`): the run tab, launch, confirm; until SERVING shows."""
    term.wait_for("1 Nodes", timeout=first)
    term.wait_for(node, timeout=first)
    term.keys("3", "L", "y")
    term.wait_for("SERVING", timeout=timeout)


def tear_down_from_console(term: Term, timeout: float = 60.0, dialog_timeout: float = 20.0,
                           every: float = 0.01) -> tuple[float, float]:
    """On the run view: D, then the confirming key; until "verified clean" shows; then leave the console.
    Returns (seconds from D to its dialog on screen, seconds from the confirming key to verified clean)."""
    t0 = time.monotonic()
    term("send-keys", "-t", "s", "D")
    dialog = term.wait_for("Tear down run", timeout=dialog_timeout) - t0
    t0 = time.monotonic()
    term("send-keys", "-t", "s", "y")
    took = term.wait_for("verified clean", timeout=timeout, every=every) - t0
    term.keys("Escape", "q")
    return dialog, took


def down_runs(env: dict[str, str]) -> None:
    """`atomdeck down` every run in the benchmark's own state directory (all of them its own; a no-op for
    one torn down already), then check by its recorded state that each is stopped. Nothing is killed
    by a recorded PID: with pid_max 32768 and hundreds of processes started, it may be someone
    else's by then."""
    runs = Path(env["XDG_STATE_HOME"]) / "atomdeck" / "runs"
    for rd in sorted(runs.glob("*")) if runs.is_dir() else []:
        r = subprocess.run([str(ATOMDECK), "down", rd.name], capture_output=True, text=True, timeout=300,
                           env={**os.environ, **env})
        if r.returncode != 0:
            print(f"bench: atomdeck down {rd.name} exited {r.returncode}: {(r.stdout + r.stderr)[-500:]}",
                  file=sys.stderr)
        try:
            status = json.loads((rd / "run.json").read_text()).get("status")
        except (OSError, ValueError):
            status = None
        if status != "stopped":
            print(f"bench: run {rd.name} is {status!r} after `atomdeck down`, not stopped: see {rd}", file=sys.stderr)


# -- the console's and its watcher's processes: RSS, open fds, CPU --------------------------------------------
def renice_run(run_id: str, nice: int) -> int:
    """Lower the CPU priority of every process of the run (each runs in a process group of its own):
    the local simulators stand in for engines that, on a cluster, run on other nodes and do not take
    the console's CPU. The console and its watcher keep theirs. Returns the groups reniced."""
    from atomdeck.core.run.run import Run

    done = 0
    for h in Run.open(run_id).handles.values():
        try:
            os.setpriority(os.PRIO_PGRP, os.getpgid(h.pid), nice)
            done += 1
        except (OSError, TypeError):
            continue
        try:  # with the kernel's autogroups the supervisor's session (a local launch's starter's, shared by all
            # its processes) is a scheduling group: only the group's nice value yields its share to the console
            # (see sim/shim/atomsim_boot.py)
            Path(f"/proc/{h.pid}/autogroup").write_text(str(nice))
        except OSError:
            pass
    return done


def rss_mb(pid: int | None) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def fds(pid: int | None) -> int | None:
    if not pid:
        return None
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def cpu_s(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def sched_wait_s(pid: int | None) -> float:
    """Seconds the threads of `pid` spent runnable but waiting for a CPU (the kernel's schedstat, its second
    field, summed over the threads alive now)."""
    if not pid:
        return 0.0
    total = 0
    for t in Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((t / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


def children(pid: int) -> list[int]:
    out = []
    for t in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (t / "children").read_text().split()]
        except OSError:
            pass
    return out


def tree_rss_mb(pid: int) -> float:
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += rss_mb(p)
        try:
            todo += children(p)
        except OSError:
            pass
    return total


def console_pid(pane_pid: int) -> int:
    """The atomdeck process: the pane's process, or its child if a shell stayed in between."""
    pid = pane_pid
    for _ in range(3):
        if "atomdeck" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            return pid
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if not kids:
            break
        pid = int(kids[0])
    return pane_pid


def watcher_pid(console: int) -> int | None:
    """The console's watcher process (core's Run.watch runs there, see core/cli/watcher.py)."""
    for c in children(console):
        try:
            if b"atomdeck.core.cli.watcher" in Path(f"/proc/{c}/cmdline").read_bytes():
                return c
        except OSError:
            pass
    return None


class ConsoleProcs:
    """The console in a tmux pane and its watcher process, sampled from /proc."""

    def __init__(self, term: Term):
        self.console = console_pid(term.pane_pid())
        self.watcher = watcher_pid(self.console)

    def find_watcher(self) -> int | None:
        """The watcher, looked for again while there is none yet (it starts with the first run)."""
        self.watcher = self.watcher or watcher_pid(self.console)
        return self.watcher

    def rss_mb(self) -> tuple[float, float]:
        return rss_mb(self.console), rss_mb(self.watcher) if self.watcher else 0.0

    def cpu_s(self) -> tuple[float, float, float]:
        """(console's CPU seconds, watcher's, now): a mark for cpu_pct_since."""
        return cpu_s(self.console), cpu_s(self.watcher), time.monotonic()

    def cpu_pct_since(self, mark: tuple[float, float, float]) -> tuple[float, float, float]:
        """(console's CPU since `mark` in % of a core, watcher's, seconds elapsed)."""
        c, w, now = self.cpu_s()
        elapsed = now - mark[2]
        return 100 * (c - mark[0]) / elapsed, 100 * (w - mark[1]) / elapsed, elapsed

    def sample(self) -> dict:
        return {"console_rss_mb": round(rss_mb(self.console), 2), "console_fds": fds(self.console),
                "watcher_rss_mb": round(rss_mb(self.watcher), 2) if self.watcher else None,
                "watcher_fds": fds(self.watcher), "console_cpu_s": round(cpu_s(self.console), 2),
                "watcher_cpu_s": round(cpu_s(self.watcher), 2)}


def big_cluster(n: int) -> str:
    """The cluster of the node-filter benchmarks (console.py in tmux, console_scale_keys.py headless): `n`
    nodes, every 37th drained with a reason."""
    lines = ["name: big2000", "description: 2,000 nodes for the filter benchmark (read offline)", "launcher: slurm",
             "gpus_per_node: 8", "nodes:"]
    for i in range(n):
        extra = ', state: "IDLE+DRAIN", reason: "gpu memory not released"' if i % 37 == 0 else ""
        lines.append(f"  - {{name: node-{i:04d}, addr: 10.{i // 250}.{i % 250}.1, gpus: 8, partition: gpu{extra}}}")
    return "\n".join(lines) + "\n"
