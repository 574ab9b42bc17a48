"""A worker frozen as a debugger or a frozen container leaves it (state T), with a request to it in flight: for the
lab's teardown tests and bench/teardown.py."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request


def stop(pids: list[int], timeout: float = 10.0) -> None:
    """SIGSTOP each process; return once the kernel shows every one stopped."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    states: list[str] = []
    while time.monotonic() < deadline:
        states = [open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] for p in pids]
        if all(s == "T" for s in states):
            return
        time.sleep(0.05)
    raise AssertionError(f"processes {pids} did not stop: states {states}")


def request_in_flight(url: str, model: str, done: threading.Event) -> None:
    """One completion through `url` (the router), however it ends; `done` is set when it did."""
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": 64}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=60).read()
    except Exception:
        pass
    done.set()
