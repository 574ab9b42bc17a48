"""The faults added for watching a serving deployment: freeze, stall, bind late / elsewhere; drills.yaml."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from http.client import HTTPConnection
from pathlib import Path

import pytest
import yaml

from .simhelpers import MODEL, REPO, http, port_open, wait_http

pytestmark = pytest.mark.slow


def proc_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (R, S, T, ...)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout}s")


def answers(url: str, timeout: float = 1.0) -> bool:
    try:
        return http("GET", url, timeout=timeout)[0] == 200
    except OSError:
        return False


def test_freeze_stops_the_process_and_sigcont_resumes_it(spawn):
    ip = "127.0.42.2"
    frozen = spawn.worker("frozen", ip, 8000, None, ATOMSIM_FREEZE_AFTER="0.3", ATOMSIM_ONLY=f"{ip}:8000")
    other = spawn.worker("other", ip, 8001, None, ATOMSIM_FREEZE_AFTER="0.3", ATOMSIM_ONLY=f"{ip}:8000")
    wait_http(f"http://{ip}:8000/health", proc=frozen)
    wait_for(lambda: proc_state(frozen.pid) == "T", what="state T")
    assert frozen.popen.poll() is None, "alive"
    assert port_open(ip, 8000), "the kernel still accepts connections on the listening socket"
    assert not answers(f"http://{ip}:8000/health"), "but nothing answers"
    size = len(frozen.text())
    wait_http(f"http://{ip}:8001/health", proc=other)
    assert proc_state(other.pid) != "T", "ATOMSIM_ONLY spares the other server"
    assert len(frozen.text()) == size, "a frozen process logs nothing"
    os.kill(frozen.pid, signal.SIGCONT)
    wait_for(lambda: answers(f"http://{ip}:8000/health"), what="answers after SIGCONT")
    assert proc_state(frozen.pid) != "T"


def test_stall_accepts_requests_but_makes_no_tokens(spawn):
    ip = "127.0.42.3"
    worker = spawn.worker("stall", ip, 8000, None, ATOMSIM_STALL_AFTER="0", ATOMSIM_METRICS_REFRESH="0")
    wait_http(f"http://{ip}:8000/health", proc=worker)
    conn = HTTPConnection(ip, 8000, timeout=10)
    conn.request("POST", "/v1/completions", body=f'{{"model": "{MODEL}", "prompt": "hi", "max_tokens": 3, '
                                                 f'"stream": true}}', headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type") == "text/event-stream", "headers come at once"
    conn.sock.settimeout(1.0)
    with pytest.raises(socket.timeout):
        resp.read1(1)
    assert answers(f"http://{ip}:8000/health"), "/health still answers"
    metrics = http("GET", f"http://{ip}:8000/metrics")[1].decode()
    assert re.search(r"^atom:requests_waiting 1\.0$", metrics, re.M), metrics
    assert re.search(r"^atom:generation_tokens_total 0\.0$", metrics, re.M)
    conn.close()
    assert "rror" not in worker.text(), "a stall logs nothing"


def test_bind_late_other_port_other_address(spawn):
    late = spawn.worker("late", "127.0.42.4", 8000, None, ATOMSIM_BIND_DELAY="2")
    late.wait_line("EngineCore fully initialized and ready")
    assert not port_open("127.0.42.4", 8000), "ready logged, port still closed"
    wait_http("http://127.0.42.4:8000/health", proc=late)
    assert late.text().index("EngineCore fully initialized") < late.text().index("Starting server on")

    moved = spawn.worker("moved", "127.0.42.5", 8000, None, ATOMSIM_BIND_PORT="8099")
    moved.wait_line("Uvicorn running on http://0.0.0.0:8099")
    assert "Starting server on 0.0.0.0:8000 (loop=uvloop)..." in moved.text(), "ATOM's own line names the port it was given"
    assert port_open("127.0.42.5", 8099) and not port_open("127.0.42.5", 8000)

    elsewhere = spawn.worker("elsewhere", "127.0.42.6", 8000, None, ATOMSIM_BIND_HOST="127.0.42.7")
    elsewhere.wait_line("Uvicorn running on http://127.0.42.7:8000")
    assert port_open("127.0.42.7", 8000) and not port_open("127.0.42.6", 8000)


def test_router_binds_another_port(spawn):
    ip = "127.0.42.8"
    spawn.worker("p", ip, 8010, "kv_producer")
    spawn.worker("d", ip, 8020, "kv_consumer")
    router = spawn.router("router", ip, 30000, [f"http://{ip}:8010"], [f"http://{ip}:8020"],
                          ATOMSIM_BIND_PORT="30099", ATOMSIM_FREEZE_AFTER="1")
    router.wait_line("Starting server on 0.0.0.0:30000", timeout=20)
    wait_for(lambda: port_open(ip, 30099), what="router on 30099")
    assert not port_open(ip, 30000)
    wait_for(lambda: proc_state(router.pid) == "T", what="router frozen")


DRILLS = yaml.safe_load((REPO / "sim" / "drills.yaml").read_text())["drills"]


def test_drills_file_lists_every_fault_variable():
    names = [d["name"] for d in DRILLS]
    assert len(names) == len(set(names))
    for drill in DRILLS:
        assert set(drill) == {"name", "env", "applies", "what", "look_for", "exit"}, drill
        assert drill["applies"] in {"worker", "prefill", "router", "worker+router"}
        assert isinstance(drill["look_for"], list) and drill["look_for"]
    in_drills = {k for d in DRILLS for k in d["env"]}
    read = set(re.findall(r'"(ATOMSIM_[A-Z_]+)"', (REPO / "sim" / "faults.py").read_text()))
    assert read - {"ATOMSIM_ONLY", "ATOMSIM_EXIT_CODE"} <= in_drills, read - in_drills
    readme = (REPO / "sim" / "README.md").read_text()
    for var in in_drills:
        assert f"`{var}`" in readme, f"{var} is not documented in sim/README.md"
    assert '"drills.yaml"' in (REPO / "pyproject.toml").read_text(), "shipped as package data"
