"""The console's watcher under the log flood (issue 19): 8 aggregate workers logging 2,000 lines a second each
(bench/console.py's flood recipe), one watcher asked for worker-0's every line (what the log view asks), its
CPU over `--seconds` read from /proc and the bytes it sends the console. `--before REV` also measures a
watcher of that revision (`git archive`, first on PYTHONPATH) on the same run, alternating `--rounds` times;
`--py-spy DIR` records each watcher (`py-spy record --nonblocking -f raw`) into DIR.

    flock /tmp/atomdeck-bench.lock bench/isolated .venv/bin/python bench/watcher_flood.py --before REV --rounds 2

Benchmarks write numbers, they do not assert them (nothing is saved to latest.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from console import CLUSTER8, RECIPE8
from watcher_cpu import checkout, cpu_s

PY_SPY = Path(sys.executable).parent / "py-spy"


def measure(run_id: str, env: dict, seconds: float, spy: Path | None) -> dict:
    w = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.watcher", run_id], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env)
    assert w.stdin is not None and w.stdout is not None
    w.stdin.write(b'lines ["worker-0"]\n')
    w.stdin.flush()
    got = [0]

    def read(out) -> None:
        for line in out:
            got[0] += len(line)

    threading.Thread(target=read, args=(w.stdout,), daemon=True).start()
    try:
        time.sleep(5)  # caught up with the logs, steady
        c0, b0, t0 = cpu_s(w.pid), got[0], time.monotonic()
        if spy is not None:
            subprocess.run([str(PY_SPY), "record", "--nonblocking", "-f", "raw", "-o", str(spy), "-d", str(int(seconds)),
                            "-p", str(w.pid)], capture_output=True)
        else:
            time.sleep(seconds)
        dt = time.monotonic() - t0
        return {"cpu_pct": round(100 * (cpu_s(w.pid) - c0) / dt, 1), "kb_s": round((got[0] - b0) / dt / 1024, 1),
                "load": round(os.getloadavg()[0], 2)}
    finally:
        w.stdin.close()
        try:
            w.wait(30)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="also measure a watcher of this git revision, on the same run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--py-spy", dest="spy", help="record each watcher's profile into this directory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = {**os.environ, "XDG_STATE_HOME": str(tmp / "state")}
        (tmp / "bench8.yaml").write_text(CLUSTER8)
        (tmp / "flood-8.yaml").write_text(RECIPE8)
        variants = {"this tree": env}
        if args.before:
            variants[args.before] = {**env, "PYTHONPATH": str(checkout(args.before, tmp / "before"))}
        atomdeck = [sys.executable, "-m", "atomdeck.core.cli.main"]
        up = subprocess.run([*atomdeck, "up", str(tmp / "flood-8.yaml"), "--cluster", str(tmp / "bench8.yaml"),
                             "--wait", "--timeout", "120", "--json"], capture_output=True, text=True, env=env)
        runs = json.loads(subprocess.run([*atomdeck, "runs", "--json"], capture_output=True, text=True,
                                         env=env).stdout or '{"runs": []}')["runs"]
        out: dict = {"seconds": args.seconds}
        try:
            if up.returncode != 0:
                out["error"] = f"up exited {up.returncode}: {(up.stderr or up.stdout)[-500:]}"
                return out
            for r in range(args.rounds):
                for label, venv in variants.items():
                    spy = Path(args.spy) / f"{label.replace(' ', '_')}-{r}.txt" if args.spy else None
                    if spy is not None:
                        spy.parent.mkdir(parents=True, exist_ok=True)
                    res = measure(runs[-1]["id"], venv, args.seconds, spy)
                    out.setdefault(label, []).append(res)
                    print(label, res, flush=True)
            return out
        finally:
            for m in runs:
                subprocess.run([*atomdeck, "down", m["id"]], capture_output=True, env=env, timeout=300)


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
