"""`atomdeck snapshot` on the local demo cluster (issue 39), through the CLI as an operator types it: the
rank-hangs fault (decode-0's TP7 blocks in a socket receive, TP0-TP6 wait in the all-reduce) with requests in
flight; a process that is gone; a run torn down; a node whose snapshot command fails (the others still shown);
a tracer without CAP_SYS_PTRACE (as in a container started without it: the /proc, socket and log parts stay);
a very deep stack and thousands of threads (a helper process of the test's own)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from atomdeck.core.launch.local import LocalLauncher
from atomdeck.core.remote.shell import LocalRunner
from atomdeck.core.run import forensics
from atomdeck.core.run.run import Run
from atomdeck.core.run.snapshot import fold, fold_keys

from tests.frozen import request_in_flight

from .conftest import serving, workspace

pytestmark = pytest.mark.slow
HANG = {"ATOMSIM_HANG_AFTER": "4", "ATOMSIM_HANG_RANK": "TP7"}  # (after the launch's smoke request)


def cli(*args: str, setpriv: bool = False) -> subprocess.CompletedProcess:
    pre = ["setpriv", "--bounding-set", "-sys_ptrace"] if setpriv else []
    return subprocess.run([*pre, sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=os.environ | {"ATOMDECK_SIM_SPEED": "20"})


def serve(runs: list, **edits) -> Run:
    return serving(workspace("demo-1p1d", **edits), runs)


def hung_with_requests(runs: list, n: int = 3) -> Run:
    """The rank-hangs drill's fault on decode-0 and, once it hangs, `n` completions through the router left
    hanging in it."""
    run = serve(runs, decode__env=HANG)

    def decode() -> dict:
        return json.loads(cli("snapshot", run.id, "decode-0", "--json", "--no-bundle").stdout)

    def until(cond, what: str) -> None:
        deadline = time.monotonic() + 30
        while not cond(out := decode()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {out}"
            time.sleep(0.3)

    until(lambda out: out["groups"][0]["odd"], "an odd rank")
    done = threading.Event()
    for _ in range(n):
        threading.Thread(target=request_in_flight, args=(run.plan.router.url, run.recipe.model.client_name, done),
                         daemon=True).start()
    until(lambda out: sum(out["procs"][0]["queues"].get(k, 0) for k in ("requests_waiting", "requests_running"))
          >= n, f"the decode to hold {n} requests")
    return run


def test_the_hung_rank_is_the_odd_one_out_and_twice_marks_the_decode_stuck_and_the_prefill_idle(runs):
    run = hung_with_requests(runs)
    res = cli("snapshot", run.id, "--twice", "1", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)  # one object
    odd = out["groups"][0]
    assert (odd["process"], odd["members"], odd["odd"]) == ("decode-0", ["ATOM::TP7"], True)
    assert odd["where"].startswith("recv_from_peer <- all_reduce")
    assert [g for g in out["groups"] if g["odd"]] == [odd]
    c = out["compare"]
    assert fold_keys([k for k in c["stuck"] if "TP" in k]) == "decode-0 TP0–TP7"
    assert fold_keys([k for k in c["idle"] if "TP" in k]) == "prefill-0 TP0–TP7"
    assert not [k for k in c["moved"] if "TP" in k]
    decode = next(p for p in out["procs"] if p["name"] == "decode-0")
    tp7 = next(r for r in decode["ranks"] if r["title"] == "ATOM::TP7")
    assert tp7["syscall"] == "recvfrom" and tp7["stack"][0]["name"] == "recv_from_peer"
    router = next(p for p in out["procs"] if p["name"] == "router")
    assert any(c["peer_name"] == "decode-0:8020" for r in router["ranks"] for c in r["connections"])
    assert Path(out["bundle"]).is_file()
    with tarfile.open(out["bundle"]) as tar:
        assert any(n.endswith("/demo-n02/decode-0/last-lines.txt") for n in tar.getnames())

    text = cli("snapshot", run.id, "--no-bundle").stdout  # the same as text
    assert "odd ones out:\n  decode-0 TP7: in recv_from_peer <- all_reduce" in text
    assert "TP0–TP6: in wait_forever <- wait_for_peers <- all_reduce" in text


def test_a_process_that_is_gone_a_name_the_run_lacks_and_a_run_torn_down(runs):
    run = serve(runs)
    os.killpg(run.handles["prefill-0"].pid, signal.SIGKILL)  # its whole tree (the ranks are in its group)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{run.handles['prefill-0'].pid}"):  # (reaped by its starter)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    out = json.loads(cli("snapshot", run.id, "--json", "--no-bundle").stdout)
    procs = {p["name"]: p for p in out["procs"]}
    assert procs["prefill-0"]["error"] == "gone: no process of it on its node" and procs["prefill-0"]["ranks"] == []
    assert len(procs["decode-0"]["ranks"]) == 11  # supervisor, server, EngineCore, 8 ranks: still shown

    res = cli("snapshot", run.id, "prefill-9", "--json")
    assert res.returncode == 2
    err = json.loads(res.stdout)["error"]
    assert err["message"] == f"run {run.id} has no process prefill-9; its processes: prefill-0, decode-0, router"

    assert asyncio.run(Run.open(run.id).teardown(grace=2)).clean
    res = cli("snapshot", run.id)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"run {run.id} is torn down: there is nothing to snapshot" in res.stderr
    res = cli("snapshot", run.id, "--json")
    assert res.returncode == 2 and json.loads(res.stdout)["error"]["message"].startswith(f"run {run.id} is torn down")


def test_a_node_that_does_not_answer_is_marked_and_the_others_are_shown(runs, monkeypatch):
    """demo-n02's snapshot command fails as an unreachable node's does (ssh's exit 255); demo-n01 answers."""
    run = serve(runs)
    real = LocalLauncher.node_run

    async def node_run(self, node, argv, timeout=60):
        if node == "demo-n02":
            return await LocalRunner().run(["sh", "-c", "echo 'ssh: connect to host demo-n02 port 22: No route to "
                                                        "host' >&2; exit 255"], timeout=timeout)
        return await real(self, node, argv, timeout)

    monkeypatch.setattr(LocalLauncher, "node_run", node_run)

    async def go():
        r = Run.open(run.id)
        try:
            return await forensics.take(r)
        finally:
            await r.close()
    s = asyncio.run(go())
    why = "its snapshot command exited 255: ssh: connect to host demo-n02 port 22: No route to host"
    assert s.nodes == {"demo-n01": "ok", "demo-n02": f"did not answer: {why}"}
    procs = {p.name: p for p in s.procs}
    assert procs["decode-0"].error == f"demo-n02 did not answer: {why}" and procs["decode-0"].ranks == []
    assert len(procs["prefill-0"].ranks) == 11 and procs["router"].ranks
    assert procs["decode-0"].last_lines  # its log is read all the same (the launcher's log path)
    from atomdeck.core.cli.forensics_verbs import snapshot_text
    text = snapshot_text(s)
    assert f"  demo-n02: did not answer: {why}" in text and "prefill-0 on demo-n01" in text


def test_without_cap_sys_ptrace_the_proc_socket_and_log_parts_stay_and_the_cause_is_named(runs):
    """atomdeck run with CAP_SYS_PTRACE out of its bounding set (what a container without SYS_PTRACE gives) on
    processes started with it: the kernel refuses py-spy's ptrace."""
    run = serve(runs)
    res = cli("snapshot", run.id, "--json", "--no-bundle", setpriv=True)
    out = json.loads(res.stdout)
    word = out["pyspy"]["demo-n01"]
    assert word.startswith("ptrace denied (no CAP_SYS_PTRACE: a container without SYS_PTRACE (docker "
                           "`--cap-add SYS_PTRACE`)"), word
    assert word.endswith("py-spy: Permission denied (os error 13); the same refusal hides their executables, wait "
                         "channels, syscalls and which sockets are theirs (states, titles, threads and logs are "
                         "shown)"), word
    decode = next(p for p in out["procs"] if p["name"] == "decode-0")
    assert all(r["stack"] == [] for r in decode["ranks"])
    ranks = [r for r in decode["ranks"] if r["kind"] == "rank"]
    assert sorted(r["title"] for r in ranks) == [f"ATOM::TP{i}" for i in range(8)]  # /proc still read
    assert all(r["state"] for r in decode["ranks"]) and decode["last_lines"]
    text = cli("snapshot", run.id, "--no-bundle", setpriv=True).stdout
    assert "py-spy on demo-n01: ptrace denied (no CAP_SYS_PTRACE" in text
    assert "  TP0–TP7: in (sleeping; ptrace denied)" in text


HELPER = r"""
import sys, threading, time
kind = sys.argv[1]
if kind == "deep":
    def down(n):
        if n == 0:
            print("ready", flush=True)
            time.sleep(600)
        down(n - 1)
    sys.setrecursionlimit(5000)
    down(int(sys.argv[2]))
else:
    gate = threading.Event()
    for _ in range(int(sys.argv[2])):
        threading.Thread(target=gate.wait, daemon=True).start()
    print("ready", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def helper():
    started: list[subprocess.Popen] = []

    def start(*args: str) -> int:
        p = subprocess.Popen([sys.executable, "-c", HELPER, *args], stdout=subprocess.PIPE, text=True)
        started.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        return p.pid
    yield start
    for p in started:
        p.kill()
        p.wait()


def script(items: list[str]) -> str:
    res = subprocess.run(["sh", "-c", forensics.SNAPSHOT_SCRIPT, "snapshot", forensics.local_pyspy(), "/nonexistent",
                          "4", *items], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_a_very_deep_stack_is_read_whole_and_grouped(helper):
    from atomdeck.core.run.snapshot import parse_node
    pid = helper("deep", "2000")
    _, trees, _ = parse_node(script([f"deep:{pid}:python"]), {"deep": "worker"})
    [me] = trees["deep"]  # the root is the process itself here (no supervisor)
    assert sum(f.name == "down" for f in me.stack) == 2001 and me.stack[-1].name == "<module>"
    assert me.where() == "sleep <- down <- down" or me.where().startswith("down <- down")


def test_thousands_of_threads_are_counted_and_the_main_one_is_the_stack(helper):
    from atomdeck.core.run.snapshot import parse_node
    pid = helper("threads", "3000")
    _, trees, _ = parse_node(script([f"many:{pid}:python"]), {"many": "worker"})
    [me] = trees["many"]
    assert me.threads == 3001 and me.other_threads == 3000
    assert [f.name for f in me.stack] == ["<module>"]  # (time.sleep is C: py-spy shows the Python caller)
    assert fold([me.label]) == me.label
