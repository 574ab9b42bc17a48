"""The in-use check's scan of a node (core/run/inuse.py): one command lists the run markers of the node's live
processes, and a node that does not answer is left out (unknown), within the scan's cap."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run import inuse
from atomdeck.core.run.run import make_launcher


def _demo_launcher():
    return make_launcher(load_workspace("demo-1p1d").cluster, "preflight", "/", {})


def test_the_scan_lists_each_marked_process_once_by_run_and_name():
    run_id = f"scan-{os.getpid()}"
    marked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={**os.environ, "ATOMDECK_RUN": f"{run_id}:decode-0"})
    plain = subprocess.Popen(["sleep", "60"])
    try:
        scans = asyncio.run(inuse._scan(_demo_launcher(), ["demo-n01", "demo-n02"]))
    finally:
        for p in (marked, plain):
            p.kill()
            p.wait()
    # the local launcher's nodes are this machine: both scans see it
    assert (run_id, "decode-0") in scans["demo-n01"] and scans["demo-n01"] == scans["demo-n02"]
    assert all(r != "" and n != "" for r, n in scans["demo-n01"]), scans
    after = asyncio.run(inuse._scan(_demo_launcher(), ["demo-n01"]))
    assert not any(r == run_id for r, _ in after["demo-n01"])  # ended: no longer listed


def test_a_node_that_does_not_answer_is_left_out_within_the_cap(monkeypatch):
    monkeypatch.setattr(inuse, "SCAN_TIMEOUT_S", 4.0)  # (the answering node's real scan reads all of /proc: under
    # a busy suite's thousand processes it took over 0.5 s once)

    class Slow:
        closed = False

        async def node_run(self, node, argv, timeout=60):
            if node == "hung":
                await asyncio.sleep(30)
            return await _demo_launcher().node_run(node, argv, timeout)

        async def close(self):
            Slow.closed = True

    t0 = time.monotonic()
    scans = asyncio.run(inuse._scan(Slow(), ["hung", "demo-n01"]))
    assert time.monotonic() - t0 < 20 and "hung" not in scans and "demo-n01" in scans and Slow.closed
