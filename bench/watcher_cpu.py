"""The console's watcher process while a run serves, at N simulated nodes (issue 19: its CPU at scale).

`atomdeck up --wait` brings (N/2)P(N/2)D TP8 + router up on a synthetic local cluster of N nodes (as
scale_console.py), then the real watcher (`python -m atomdeck.core.cli.watcher RUN`, asked for no
process's every line, as a console showing the run view gets) watches it; its CPU (utime + stime from
/proc) is read over `--seconds`. With `--before REV` a watcher from that revision (`git archive`, put
first on PYTHONPATH) is measured on the same serving run too, alternating with this tree's `--rounds`
times, so both see the same machine. `--py-spy S` also records each watcher for S seconds
(`py-spy record --nonblocking -f raw`) and gives the share of samples in sock_connect (any: the
barrier's connects and the health checks' and metric scrapes' HTTP; a connect that completes is
finished in a loop callback, outside run_node's stack) and in BarrierProber.run_node, and the samples per
function of ours (`top`: the innermost atomdeck frame of each sample; `--keep DIR` keeps the raw profiles).

What each watcher sends the console is counted too (its stdout, read here): messages, kilobytes and events a
second, by kind. `--coming-up` also measures the watchers while the run comes up: `atomdeck up --wait` is
started, and once every process is launched (run.json says `starting`) one watcher of each variant attaches
at once (side by side, so they share the machine), until the run serves and at least `--up-window` seconds
passed (the handshake pairs move on after the router serves): their CPU and what they sent, the pair events
among it.

    bench/isolated .venv/bin/python bench/watcher_cpu.py 32 --before 35178e9 --rounds 2
    bench/isolated .venv/bin/python bench/watcher_cpu.py 128 --before REV --coming-up --no-save

Benchmarks write numbers, they do not assert them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from common import ROOT, save
from scale_console import cluster_yaml, recipe_yaml

HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def checkout(rev: str, into: Path) -> Path:
    """REV's tree as an importable `atomdeck` package under `into`."""
    pkg = into / "atomdeck"
    pkg.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(pkg)], input=archive, check=True)
    return into


class Stream:
    """Counts what a watcher sends the console: messages, bytes, events by kind (a thread reads its stdout)."""

    def __init__(self, out) -> None:
        self.lock = threading.Lock()
        self.msgs = self.bytes = 0
        self.kinds: Counter[str] = Counter()
        self.thread = threading.Thread(target=self.read, args=(out,), daemon=True)
        self.thread.start()

    def read(self, out) -> None:
        for line in out:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            kinds = Counter()
            for e in msg.get("e", ()):
                kinds[(json.loads(e) if isinstance(e, str) else e)["kind"]] += 1  # a string before issue 19's change
            with self.lock:
                self.msgs += 1
                self.bytes += len(line)
                self.kinds.update(kinds)

    def snap(self) -> tuple[int, int, Counter]:
        with self.lock:
            return self.msgs, self.bytes, Counter(self.kinds)


def rates(a: tuple[int, int, Counter], b: tuple[int, int, Counter], dt: float) -> dict:
    kinds = b[2] - a[2]
    return {"msgs_s": round((b[0] - a[0]) / dt, 1), "kb_s": round((b[1] - a[1]) / dt / 1024, 1),
            "events_s": round(sum(kinds.values()) / dt, 1),
            "by_kind_s": {k: round(v / dt, 1) for k, v in kinds.most_common()}}


def start_watcher(run_id: str, env: dict[str, str]) -> tuple[subprocess.Popen, Stream]:
    w = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.watcher", run_id], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert w.stdin is not None and w.stdout is not None
    w.stdin.write(b"lines []\n")
    w.stdin.flush()
    return w, Stream(w.stdout)


def stop_watcher(w: subprocess.Popen) -> None:
    assert w.stdin is not None
    w.stdin.close()
    try:
        w.wait(30)
    except subprocess.TimeoutExpired:
        w.kill()


def spy(pid: int, seconds: float, raw: Path) -> dict:
    exe = Path(sys.executable).parent / "py-spy"
    if not seconds or not exe.exists():
        return {}
    subprocess.run([str(exe), "record", "--nonblocking", "-r", "100", "-f", "raw", "-d", str(int(seconds)),
                    "-p", str(pid), "-o", str(raw)], capture_output=True, timeout=seconds + 60)
    return spy_shares(raw)


def measure(run_id: str, env: dict[str, str], seconds: float, settle: float, spy_s: float, tmp: Path,
            label: str) -> dict:
    w, stream = start_watcher(run_id, env)
    try:
        time.sleep(settle)  # it opened the run, read the logs to their ends, saw every cell
        c0, t0, s0 = cpu_s(w.pid), time.monotonic(), stream.snap()
        time.sleep(seconds)
        dt = time.monotonic() - t0
        out = {"cpu_pct": round(100 * (cpu_s(w.pid) - c0) / dt, 1), **rates(s0, stream.snap(), dt)}
        out.update(spy(w.pid, spy_s, tmp / f"{label}.txt"))
        return out
    finally:
        stop_watcher(w)


def coming_up(up_argv: list[str], env: dict[str, str], variants: dict[str, dict[str, str]], spy_s: float,
              tmp: Path, window: float) -> tuple[subprocess.CompletedProcess, dict]:
    """`atomdeck up --wait`, and the watchers of every variant attached side by side from `starting` until it
    serves and `window` seconds have passed."""
    up = subprocess.Popen(up_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    runs = Path(env["XDG_STATE_HOME"]) / "atomdeck" / "runs"
    run_dir = None
    while up.poll() is None:  # launched: every process started and its handle written
        metas = sorted(runs.glob("*/run.json")) if runs.is_dir() else []
        try:
            if metas and json.loads(metas[-1].read_text()).get("status") != "launching":
                run_dir = metas[-1].parent
                break
        except ValueError:
            pass
        time.sleep(0.05)
    out: dict = {}
    if run_dir is None:
        stdout, stderr = up.communicate()
        return subprocess.CompletedProcess(up_argv, up.returncode, stdout, stderr), out
    watchers = {label: start_watcher(run_dir.name, venv) for label, venv in variants.items()}
    t0 = time.monotonic()
    c0 = {label: cpu_s(w.pid) for label, (w, _) in watchers.items()}
    spies = []
    for label, (w, _) in watchers.items():  # py-spy the first spy_s seconds of each, together
        if spy_s:
            t = threading.Thread(target=lambda lb=label, p=w.pid: out.setdefault(lb, {}).update(
                spy(p, spy_s, tmp / f"up-{lb}.txt".replace(" ", "_"))))
            t.start()
            spies.append(t)
    stdout, stderr = up.communicate()
    out["serving_after_s"] = round(time.monotonic() - t0, 1)
    time.sleep(max(0.0, t0 + window - time.monotonic()))  # the pairs move on after serving (4,096 at 128)
    dt = time.monotonic() - t0
    for t in spies:
        t.join()
    for label, (w, stream) in watchers.items():
        out.setdefault(label, {}).update({"seconds": round(dt, 1), "cpu_pct": round(100 * (cpu_s(w.pid) - c0[label]) / dt, 1),
                                          **rates((0, 0, Counter()), stream.snap(), dt)})
        stop_watcher(w)
    return subprocess.CompletedProcess(up_argv, up.returncode, stdout, stderr), out


def spy_shares(raw: Path, top: int = 12) -> dict:
    total = connect = node = 0
    ours: Counter[str] = Counter()
    try:
        lines = raw.read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        connect += int(n) if "sock_connect" in stack else 0
        node += int(n) if "run_node" in stack else 0
        frames = stack.split(";")  # outermost first: "function (file:line)"
        mine = [f for f in frames if "(core/" in f or "(tui/" in f or "atomdeck/" in f]
        key = mine[-1].split(" (")[0] if mine else "(other)"
        ours[key] += int(n)
    return {"samples": total, "sock_connect_pct": round(100 * connect / max(1, total), 1),
            "run_node_pct": round(100 * node / max(1, total), 1),
            "top": [[k, round(100 * v / max(1, total), 1)] for k, v in ours.most_common(top)]}


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("nodes", type=int, nargs="?", default=32)
    ap.add_argument("--before", help="also measure a watcher of this git revision, on the same run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--py-spy", type=float, default=0.0, dest="spy")
    ap.add_argument("--coming-up", action="store_true", help="also measure the watchers while the run comes up")
    ap.add_argument("--up-window", type=float, default=60.0,
                    help="with --coming-up: measure at least this long from the watchers' start")
    ap.add_argument("--keep", help="copy the raw py-spy profiles into this directory")
    ap.add_argument("--no-save", action="store_true", help="do not write bench/results/latest.json")
    args = ap.parse_args()
    n = args.nodes
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = {**os.environ, "XDG_STATE_HOME": str(tmp / "state"), "ATOMDECK_SIM_SPEED": "20"}
        (tmp / "scale.yaml").write_text(cluster_yaml(n))
        (tmp / "recipe.yaml").write_text(recipe_yaml(n))
        atomdeck = [sys.executable, "-m", "atomdeck.core.cli.main"]
        t0 = time.monotonic()
        out: dict = {"nodes": n, "processes": n + 1, "seconds": args.seconds}
        variants = {"this tree": env}
        if args.before:
            old = checkout(args.before, tmp / "before")
            variants[args.before] = {**env, "PYTHONPATH": str(old)}
        try:
            up_argv = [*atomdeck, "up", str(tmp / "recipe.yaml"), "--cluster", str(tmp / "scale.yaml"), "--wait",
                       "--timeout", "300", "--json"]
            if args.coming_up:
                up, out["coming_up"] = coming_up(up_argv, env, variants, args.spy, tmp, args.up_window)
                print("coming up", json.dumps(out["coming_up"]), flush=True)
            else:
                up = subprocess.run(up_argv, capture_output=True, text=True, env=env)
            out["up_s"] = round(time.monotonic() - t0, 1)
            runs = subprocess.run([*atomdeck, "runs", "--json"], capture_output=True, text=True, env=env)
            run_id = json.loads(runs.stdout)["runs"][-1]["id"]
            if up.returncode != 0:
                out["error"] = f"up exited {up.returncode}: {(up.stderr or up.stdout)[-500:]}"
                return out
            for r in range(args.rounds):
                for label, venv in variants.items():
                    res = measure(run_id, venv, args.seconds, args.settle, args.spy, tmp, f"{label}-{r}".replace(" ", "_"))
                    out.setdefault(label, []).append(res)
                    out.setdefault("load", []).append(round(os.getloadavg()[0], 2))
                    print(label, res, flush=True)
            return out
        finally:  # every run of this state directory (the temporary directory goes with it)
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                for raw in tmp.glob("*.txt"):
                    shutil.copy(raw, Path(args.keep) / raw.name)
            for m in json.loads(subprocess.run([*atomdeck, "runs", "--json"], capture_output=True, text=True,
                                               env=env).stdout or '{"runs": []}')["runs"]:
                subprocess.run([*atomdeck, "down", m["id"]], capture_output=True, env=env, timeout=300)


if __name__ == "__main__":
    res = main()
    if "--no-save" not in sys.argv:
        save("watcher-cpu", res)
    print(json.dumps(res, indent=2))
