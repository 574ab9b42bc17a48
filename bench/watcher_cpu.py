"""The console's watcher process while a run serves, at N simulated nodes (issue 19: its CPU at scale).

`atomdeck up --wait` brings (N/2)P(N/2)D TP8 + router up on a synthetic local cluster of N nodes (as
scale_console.py), then the real watcher (`python -m atomdeck.core.cli.watcher RUN`, asked for no
process's every line, as a console showing the run view gets) watches it; its CPU (utime + stime from
/proc) is read over `--seconds`. With `--before REV` a watcher from that revision (`git archive`, put
first on PYTHONPATH) is measured on the same serving run too, alternating with this tree's `--rounds`
times, so both see the same machine. `--py-spy S` also records each watcher for S seconds
(`py-spy record --nonblocking -f raw`) and gives the share of samples in sock_connect (any: the
barrier's connects and the health checks' and metric scrapes' HTTP; a connect that completes is
finished in a loop callback, outside run_node's stack) and in BarrierProber.run_node.

    /work/coord/isolated .venv/bin/python bench/watcher_cpu.py 32 --before 35178e9 --rounds 2

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
import time
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


def measure(run_id: str, env: dict[str, str], seconds: float, settle: float, spy: float, tmp: Path,
            label: str) -> dict:
    w = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.watcher", run_id], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    assert w.stdin is not None
    w.stdin.write(b"lines []\n")
    w.stdin.flush()
    try:
        time.sleep(settle)  # it opened the run, read the logs to their ends, saw every cell
        c0, t0 = cpu_s(w.pid), time.monotonic()
        time.sleep(seconds)
        out = {"cpu_pct": round(100 * (cpu_s(w.pid) - c0) / (time.monotonic() - t0), 1)}
        if spy and shutil.which("py-spy", path=str(Path(sys.executable).parent)) is not None:
            raw = tmp / f"{label}.txt"
            subprocess.run([str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "-r", "100",
                            "-f", "raw", "-d", str(int(spy)), "-p", str(w.pid), "-o", str(raw)],
                           capture_output=True, timeout=spy + 60)
            out.update(spy_shares(raw))
        return out
    finally:
        w.stdin.close()
        try:
            w.wait(30)
        except subprocess.TimeoutExpired:
            w.kill()


def spy_shares(raw: Path) -> dict:
    total = connect = node = 0
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
    return {"samples": total, "sock_connect_pct": round(100 * connect / max(1, total), 1),
            "run_node_pct": round(100 * node / max(1, total), 1)}


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("nodes", type=int, nargs="?", default=32)
    ap.add_argument("--before", help="also measure a watcher of this git revision, on the same run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--py-spy", type=float, default=0.0, dest="spy")
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
        try:
            up = subprocess.run([*atomdeck, "up", str(tmp / "recipe.yaml"), "--cluster", str(tmp / "scale.yaml"),
                                 "--wait", "--timeout", "300", "--json"], capture_output=True, text=True, env=env)
            out["up_s"] = round(time.monotonic() - t0, 1)
            runs = subprocess.run([*atomdeck, "runs", "--json"], capture_output=True, text=True, env=env)
            run_id = json.loads(runs.stdout)["runs"][-1]["id"]
            if up.returncode != 0:
                out["error"] = f"up exited {up.returncode}: {(up.stderr or up.stdout)[-500:]}"
                return out
            variants = {"this tree": env}
            if args.before:
                old = checkout(args.before, tmp / "before")
                variants[args.before] = {**env, "PYTHONPATH": str(old)}
            for r in range(args.rounds):
                for label, venv in variants.items():
                    res = measure(run_id, venv, args.seconds, args.settle, args.spy, tmp, f"{label}-{r}".replace(" ", "_"))
                    out.setdefault(label, []).append(res)
                    out.setdefault("load", []).append(round(os.getloadavg()[0], 2))
                    print(label, res, flush=True)
            return out
        finally:  # every run of this state directory (the temporary directory goes with it)
            for m in json.loads(subprocess.run([*atomdeck, "runs", "--json"], capture_output=True, text=True,
                                               env=env).stdout or '{"runs": []}')["runs"]:
                subprocess.run([*atomdeck, "down", m["id"]], capture_output=True, env=env, timeout=300)


if __name__ == "__main__":
    res = main()
    save("watcher-cpu", res)
    print(json.dumps(res, indent=2))
