"""The simulated worker runs ATOM's process tree (sim/proctree.py): an EngineCore per DP rank, a process per TP
rank, titled and linked as ROCm/ATOM's engine_core_mgr.py, engine_core.py, async_proc.py and utils set them up,
with orphan reaping at head and none at the pin. Everything here is read from /proc, as teardown reads it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .simhelpers import assert_in_order, http, wait_http


def tree(root: int) -> dict[int, dict]:
    """pid -> {ppid, pgid, sid, state, comm, cmdline} of `root` and every live descendant."""
    table: dict[int, dict] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(entry.name)] = {"state": fields[0], "ppid": int(fields[1]), "pgid": int(fields[2]),
                                  "sid": int(fields[3]), "comm": comm,
                                  "cmdline": cmdline.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")}
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in table and table[pid]["state"] not in "ZX":
            out[pid] = table[pid]
            todo += [p for p, t in table.items() if t["ppid"] == pid]
    return out


def wait_tree(root: int, size: int, timeout: float = 15.0) -> dict[int, dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = tree(root)
        if len(t) == size:
            return t
        time.sleep(0.05)
    raise AssertionError(f"the tree of {root} has {len(tree(root))} live processes, not {size}: {tree(root)}")


def children(t: dict[int, dict], pid: int) -> list[int]:
    return sorted(p for p, info in t.items() if info["ppid"] == pid)


def environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def test_tp8_tree_titles_and_links(spawn):
    w = spawn.worker("tp8", "127.0.38.1", 8010, "kv_producer")
    wait_http("http://127.0.38.1:8010/health", proc=w)
    t = wait_tree(w.pid, 10)
    (core,) = children(t, w.pid)
    # the kernel keeps 15 characters of a comm: rocm-smi and `ps -o comm` show "ATOM::EngineCor"
    assert t[core]["comm"] == "ATOM::EngineCor" and t[core]["cmdline"] == "ATOM::EngineCore"
    ranks = children(t, core)
    assert sorted(t[p]["cmdline"] for p in ranks) == [f"ATOM::TP{r}" for r in range(8)]
    assert {t[p]["comm"] for p in ranks} == {f"ATOM::TP{r}" for r in range(8)}
    assert {info["pgid"] for info in t.values()} == {w.pid}  # one process group: the supervisor's signal reaches all
    # setproctitle took the environment's memory for the titles: the marker cannot be read there, only in the server
    assert b"ATOMSIM_NODE_IP=127.0.38.1" in environ(w.pid).split(b"\0")
    assert all(b"ATOMSIM_NODE_IP" not in environ(p) for p in [core, *ranks])


def test_dp_attention_has_an_engine_core_per_dp_rank(spawn):
    w = spawn.worker("dpa", "127.0.38.2", 8010, None, "--enable-dp-attention", tp=2)
    wait_http("http://127.0.38.2:8010/health", proc=w)
    t = wait_tree(w.pid, 5)
    cores = children(t, w.pid)
    assert sorted(t[c]["cmdline"] for c in cores) == ["ATOM::EngineCore_DP0", "ATOM::EngineCore_DP1"]
    for c in cores:
        d = t[c]["cmdline"][-1]
        assert [t[r]["cmdline"] for r in children(t, c)] == [f"ATOM::DP{d}TP0"]


def test_sigterm_ends_the_whole_tree_cleanly(spawn):
    w = spawn.worker("term", "127.0.38.3", 8010, None, tp=4)
    wait_http("http://127.0.38.3:8010/health", proc=w)
    wait_tree(w.pid, 6)
    os.killpg(w.pid, signal.SIGTERM)  # what a teardown sends
    assert w.wait_exit(10) == 0
    assert tree(w.pid) == {}
    text = w.text()
    # each rank logs its own line (one that is not scheduled within its EngineCore's 1 s is SIGKILLed, as in ATOM)
    assert any(f"Model Runner{r}/4: received signal 15 (SIGTERM), exiting..." in text for r in range(4)), text
    assert "AsyncIOProcManager(ModelRunner): received signal 15 (SIGTERM), exiting..." in text


def test_a_dead_rank_fails_its_worker_naming_the_rank(spawn):
    w = spawn.worker("rankdies", "127.0.38.4", 8010, None, ATOMSIM_CRASH_AFTER="0.3", ATOMSIM_CRASH_RANK="TP3")
    wait_http("http://127.0.38.4:8010/health", proc=w)
    assert w.wait_exit(15) == 1
    assert_in_order(w.text(), [
        "Server started successfully",
        "AsyncIOProcManager(ModelRunner): [ModelRunner3/8] proc died unexpectedly (exitcode=-9), shutting down.",
        "AsyncIOProcManager(ModelRunner): shutdown all runners...",
        "AsyncIOProcManager(ModelRunner): All runners are shutdown.",
        "Traceback (most recent call last):",
        "RuntimeError: EngineCore encountered an issue"])
    assert "Model Runner3/8: received signal" not in w.text()  # it was killed, not asked
    assert tree(w.pid) == {}


def test_head_reaps_orphans_when_the_server_is_killed(spawn):
    w = spawn.worker("head", "127.0.38.5", 8010, None, tp=4)
    wait_http("http://127.0.38.5:8010/health", proc=w)
    pids = list(wait_tree(w.pid, 6))
    os.kill(w.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(_live(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if _live(p)], "PR_SET_PDEATHSIG should have taken the EngineCore and its ranks"


def test_pin_leaves_orphans_when_the_server_is_killed(spawn):
    """ROCm/ATOM #1511: at the pin a SIGKILLed server leaves its EngineCore and ranks running; their environment
    is readable (no setproctitle), and their command line is multiprocessing's spawn line."""
    w = spawn.worker("pin", "127.0.38.6", 8010, None, tp=2, ATOMSIM_ATOM_REV="pin")
    wait_http("http://127.0.38.6:8010/health", proc=w)
    t = wait_tree(w.pid, 4)
    others = [p for p in t if p != w.pid]
    assert all("from multiprocessing.spawn import spawn_main" in t[p]["cmdline"] for p in others)
    assert all(b"ATOMSIM_NODE_IP=127.0.38.6" in environ(p).split(b"\0") for p in others)
    try:
        os.kill(w.pid, signal.SIGKILL)
        w.wait_exit(5)
        time.sleep(0.5)
        assert all(_live(p) for p in others), "the pin has no orphan reaping: they must outlive the server"
        assert all(tree(p) for p in others)
    finally:
        for p in others:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_rank_can_leave_its_process_group(spawn):
    w = spawn.worker("setsid", "127.0.38.7", 8010, None, ATOMSIM_RANK_SETSID="TP5")
    wait_http("http://127.0.38.7:8010/health", proc=w)
    t = wait_tree(w.pid, 10)
    (core,) = children(t, w.pid)
    odd = [p for p in children(t, core) if t[p]["pgid"] != w.pid]
    try:
        assert [t[p]["cmdline"] for p in odd] == ["ATOM::TP5"]
        assert t[odd[0]]["pgid"] == odd[0] == t[odd[0]]["sid"]
    finally:
        os.killpg(w.pid, signal.SIGTERM)
        w.wait_exit(10)
    # the server closes its EngineCore, which stops its ranks, the one outside the group included
    assert tree(w.pid) == {} and not _live(odd[0])


def _live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] not in "ZX"


def test_a_hung_rank_blocks_in_a_receive_and_its_peers_in_the_collective(spawn):
    """ATOMSIM_HANG_AFTER: the hung rank waits in a socket receive, its peers and their EngineCore in pipe reads
    (the kernel's wait channel tells them apart), the engine makes no tokens, /health answers."""
    w = spawn.worker("hang", "127.0.38.8", 8010, None, tp=4, ATOMSIM_HANG_AFTER="0.2", ATOMSIM_HANG_RANK="TP3")
    wait_http("http://127.0.38.8:8010/health", proc=w)
    t = wait_tree(w.pid, 6)
    (core,) = children(t, w.pid)
    ranks = {t[p]["cmdline"]: p for p in children(t, core)}

    def wchan(pid: int) -> str:
        return Path(f"/proc/{pid}/wchan").read_text()

    deadline = time.monotonic() + 10
    while "unix_stream" not in wchan(ranks["ATOM::TP3"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "unix_stream" in wchan(ranks["ATOM::TP3"]), wchan(ranks["ATOM::TP3"])
    assert all("pipe" in wchan(ranks[f"ATOM::TP{r}"]) for r in range(3)), [wchan(ranks[f"ATOM::TP{r}"]) for r in range(3)]
    assert wait_http("http://127.0.38.8:8010/health", proc=w) is None  # still answers
    try:
        http("POST", "http://127.0.38.8:8010/v1/completions", {"model": "deepseek-ai/DeepSeek-V4-Pro", "prompt": "hi",
                                                                 "max_tokens": 4}, timeout=1.5)
        raise AssertionError("a completion finished on a hung engine")
    except OSError:  # the engine makes no tokens: the request waits (urllib's timeout)
        pass
