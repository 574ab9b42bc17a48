"""The console's watcher while 32 simulated nodes serve (16P16D TP8 + router, local launcher, nobody typing):
its CPU over a window, its open sockets, and (with py-spy) where its samples go. Issue 19: HTTP health
checks and metrics scrapes on one kept-alive connection per endpoint instead of a connect per request.

    bench/isolated .venv/bin/python bench/watcher_http.py            # 32 nodes, 60 s window
    bench/isolated .venv/bin/python bench/watcher_http.py 32 60 spy  # and 20 s of py-spy first
                                                   # (raw stacks left in /tmp/watcher_http_spy.txt)

The run is started headless (`atomdeck up --wait`), then the watcher runs alone as the console starts it
(`python -m atomdeck.core.cli.watcher RUN_ID`, its stdout drained). Benchmarks write numbers, they do not
assert them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from common import ATOMDECK, cpu_s, down_runs, fds, rss_mb, save, state_env
from scale_console import cluster_yaml, recipe_yaml

SPY = Path(sys.executable).parent / "py-spy"
# what a sample's stack is counted under (the first that matches, innermost frame last in py-spy's raw format)
MARKS = {"http (probes._request / exchange)": ("_request (", "exchange ("),
         "prometheus parsing": ("parse (", "parse_wanted (", "text_string_to_metric_families"),
         "connect (sock_connect / open_connection)": ("sock_connect", "open_connection ("),
         "tcp_probe": ("tcp_probe (",)}


def sockets(pid: int) -> int:
    n = 0
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return n


def spy(pid: int, seconds: int, out: Path) -> dict:
    subprocess.run([str(SPY), "record", "--nonblocking", "-d", str(seconds), "-r", "50", "-f", "raw", "-o", str(out),
                    "-p", str(pid)], capture_output=True, timeout=seconds + 60)
    total, hits = 0, Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for what, needles in MARKS.items():
            if any(n in stack for n in needles):
                hits[what] += int(count)
    return {"samples": total, **{k: round(100 * v / max(total, 1), 1) for k, v in hits.items()}}


def main(n: int = 32, window: float = 60.0, with_spy: bool = False) -> dict:
    out: dict = {"nodes": n, "window_s": window}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "c.yaml").write_text(cluster_yaml(n))
        (tmp / "r.yaml").write_text(recipe_yaml(n))
        env = {**os.environ, **state_env(tmp, ATOMDECK_SIM_SPEED="20")}
        try:
            t0 = time.monotonic()
            up = subprocess.run([str(ATOMDECK), "up", "--cluster", str(tmp / "c.yaml"), "--wait", "--timeout", "400",
                                 "--json", str(tmp / "r.yaml")], capture_output=True, text=True, env=env, timeout=460)
            out["up_s"] = round(time.monotonic() - t0, 1)
            runs = sorted((tmp / "state" / "atomdeck" / "runs").glob("*"))
            if up.returncode != 0 or not runs:
                out["error"] = f"up exited {up.returncode}: {(up.stdout + up.stderr)[-400:]}"
                return out
            w = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.watcher", runs[-1].name], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            threading.Thread(target=lambda: [None for _ in w.stdout], daemon=True).start()  # type: ignore[union-attr]
            try:
                time.sleep(15)  # opened, caught up with the logs, every watcher on its cadence
                if with_spy:
                    out["py_spy_pct_of_samples"] = spy(w.pid, 20, Path(tempfile.gettempdir()) / "watcher_http_spy.txt")
                c0, t0 = cpu_s(w.pid), time.monotonic()
                socks = []
                while time.monotonic() - t0 < window:
                    time.sleep(1)
                    socks.append(sockets(w.pid))
                out["watcher_cpu_pct"] = round(100 * (cpu_s(w.pid) - c0) / (time.monotonic() - t0), 1)
                out["watcher_sockets_min_max"] = [min(socks), max(socks)]
                out["watcher_fds"] = fds(w.pid)
                out["watcher_rss_mb"] = round(rss_mb(w.pid), 1)
            finally:
                w.stdin.close()  # type: ignore[union-attr]
                try:
                    w.wait(20)
                except subprocess.TimeoutExpired:
                    w.kill()
                    w.wait()
        finally:
            down_runs(state_env(tmp))
    return out


if __name__ == "__main__":
    a = sys.argv[1:]
    res = main(int(a[0]) if a else 32, float(a[1]) if len(a) > 1 else 60.0, "spy" in a)
    print(res)
    save("watcher_http", res)
