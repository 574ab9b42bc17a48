"""core/run/snapshot.py on what scripts/snapshot.sh really printed (tests/data/snapshot/README.md says how each was
captured): a 1P1D TP8 demo run with the rank-hangs fault (decode-0's TP7 in a socket receive, TP0-TP6 waiting
for it in the all-reduce), two captures 2 s apart with requests in flight; the pin's untitled tree; py-spy's
output when ptrace is denied."""

from __future__ import annotations

import copy
import gzip
import json
import tarfile
from pathlib import Path

import pytest
from atomdeck.core.run.forensics import _pyspy_word, bundle
from atomdeck.core.run.snapshot import (
    Frame,
    ProcSnap,
    Snapshot,
    _spy_error,
    busy,
    compare,
    fold,
    fold_keys,
    group,
    name_peers,
    parse_node,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "snapshot"
ROLES = {"prefill-0": "prefill", "decode-0": "decode", "router": "router"}
NODES = {"prefill-0": "demo-n01", "decode-0": "demo-n02", "router": "demo-n01"}
# the run's ports as forensics.take names them (the demo cluster copy the captures were taken on)
PORTS = {("127.0.88.11", 8010): "prefill-0", ("127.0.88.12", 8020): "decode-0", ("127.0.88.11", 30000): "router"}


def text(name: str) -> str:
    return gzip.decompress((DATA / name).read_bytes()).decode()


def snap(name: str, queues: dict[str, dict] | None = None, in_flight: dict[str, float] | None = None) -> Snapshot:
    """A Snapshot as forensics.take builds it from one node's output (the demo runs every process on this
    machine: one node)."""
    facts, trees, conns = parse_node(text(name), ROLES)
    peers = name_peers(conns, PORTS)
    procs = []
    for n, role in ROLES.items():
        p = ProcSnap(n, NODES[n], role, trees.get(n, []))
        p.queues = (queues or {}).get(n, {})
        p.router_in_flight = (in_flight or {}).get(n)
        for r in p.ranks:
            r.connections = peers.get(r.pid, [])
        procs.append(p)
    s = Snapshot("run-1", 1.0, 0.3, procs, {"this machine": "ok"}, {"this machine": facts["spy"]})
    s.groups = group(s.procs)
    return s


def by_label(p: ProcSnap) -> dict[str, object]:
    return {r.label: r for r in p.ranks}


# ---- parsing -------------------------------------------------------------------------------------------------

def test_the_node_line_and_every_member_of_each_tree():
    facts, trees, conns = parse_node(text("hang-1p1d-a.txt.gz"), ROLES)
    assert facts["uid"] == "0" and facts["spy"].endswith("/py-spy") and facts["ptrace_scope"] == "-"
    assert set(trees) == set(ROLES)
    for name in ("prefill-0", "decode-0"):  # ATOM's tree: supervisor, server, EngineCore, 8 ranks
        kinds = sorted(r.kind for r in trees[name])
        assert kinds == sorted(["supervisor", "server", "EngineCore", *["rank"] * 8]), kinds
        assert sorted(r.title for r in trees[name] if r.kind == "rank") == [f"ATOM::TP{i}" for i in range(8)]
    assert [r.kind for r in trees["router"]] == ["supervisor", "router"]
    assert conns and all(len(c) == 4 for c in conns)


def test_the_hung_rank_and_its_peers_as_the_kernel_and_py_spy_see_them():
    s = snap("hang-1p1d-a.txt.gz")
    decode = by_label(s.procs[1])
    tp7, tp0, core = decode["ATOM::TP7"], decode["ATOM::TP0"], decode["ATOM::EngineCore"]
    assert tp7.stack[0].name == "recv_from_peer" and [f.name for f in tp7.stack[:3]] == \
        ["recv_from_peer", "all_reduce", "execute_model"]
    assert tp7.syscall == "recvfrom" and tp7.state == "S"  # a socket receive, in the kernel too
    assert [f.name for f in tp0.stack[:3]] == ["wait_forever", "wait_for_peers", "all_reduce"]
    assert "get_output" in [f.name for f in core.stack]
    assert tp7.ppid == core.pid and tp0.ppid == core.pid  # the ranks are the EngineCore's children
    assert all(r.threads >= 1 and r.exe for r in s.procs[1].ranks)
    router = by_label(s.procs[2])["router"]
    assert router.stack == [] and router.where() == "(epoll_wait)"  # Rust: the kernel's view only


def test_connections_name_the_runs_peers():
    s = snap("hang-1p1d-a.txt.gz")
    router = by_label(s.procs[2])["router"]
    assert {c.peer_name for c in router.connections if c.peer_name} >= {"decode-0:8020"}
    assert all(c.state == "ESTAB" for c in router.connections)
    # a peer that is no port of this run stays unnamed
    assert name_peers([("ESTAB", "127.0.0.1:1", "10.9.9.9:22", [5])], PORTS)[5][0].peer_name == ""


# ---- grouping -------------------------------------------------------------------------------------------------

def test_the_odd_rank_comes_first_and_the_rest_are_grouped():
    s = snap("hang-1p1d-a.txt.gz")
    first = s.groups[0]
    assert (first.process, first.members, first.odd) == ("decode-0", ["ATOM::TP7"], True)
    assert first.where == "recv_from_peer <- all_reduce <- execute_model"
    assert [g for g in s.groups if g.odd] == [first]
    decode_ranks = next(g for g in s.groups if g.process == "decode-0" and len(g.members) == 7)
    assert fold(decode_ranks.members) == "TP0–TP6" and not decode_ranks.odd
    prefill_ranks = next(g for g in s.groups if g.process == "prefill-0" and len(g.members) == 8)
    assert fold(prefill_ranks.members) == "TP0–TP7" and not prefill_ranks.odd  # all alike: nothing odd


def test_the_pins_untitled_tree_is_named_by_its_place_and_the_odd_rank_keeps_its_pid():
    facts, trees, _ = parse_node(text("pin-hang-1p1d.txt.gz"), ROLES)
    decode = trees["decode-0"]
    assert not any(r.title.startswith("ATOM::") for r in decode)  # the pin sets no titles
    core = next(r for r in decode if r.kind == "EngineCore")
    assert core.title == f"EngineCore {core.pid}"
    ranks = sorted((r for r in decode if r.kind == "rank"), key=lambda r: r.pid)
    assert [r.title for r in ranks] == [f"rank {i} (pid {r.pid})" for i, r in enumerate(ranks)]
    assert all(r.ppid == core.pid for r in ranks)
    s = Snapshot("pin", 1.0, 0.3, [ProcSnap(n, NODES[n], ROLES[n], trees[n]) for n in ROLES], {}, {})
    groups = group(s.procs)
    odd = groups[0]
    assert odd.odd and odd.process == "decode-0" and odd.where.startswith("recv_from_peer")
    assert fold(odd.members) == odd.members[0] and "(pid " in odd.members[0]
    rest = next(g for g in groups if g.process == "decode-0" and len(g.members) == 7)
    hung = int(odd.members[0].split()[1])
    want = ", ".join(part for part in (f"ranks 0–{hung - 1}" if hung > 1 else "rank 0" if hung == 1 else "",
                                       f"ranks {hung + 1}–7" if hung < 6 else "rank 7" if hung == 6 else "") if part)
    assert fold(rest.members) == want


# ---- comparing --------------------------------------------------------------------------------------------------

# the queues as /metrics and the router said during the captures: 3 requests waiting in the decode; the router
# counts them against the prefill too (its PD load guards are held until the request ends)
QUEUES = {"prefill-0": {"requests_running": 0.0, "requests_waiting": 0.0},
          "decode-0": {"requests_running": 0.0, "requests_waiting": 3.0}}
IN_FLIGHT = {"prefill-0": 3.0, "decode-0": 3.0}


def test_twice_marks_the_decodes_ranks_stuck_and_the_idle_prefill_idle():
    a = snap("hang-1p1d-a.txt.gz", QUEUES, IN_FLIGHT)
    b = snap("hang-1p1d-b.txt.gz", QUEUES, IN_FLIGHT)
    c = compare(a, b)
    assert fold_keys([k for k in c["stuck"] if "TP" in k]) == "decode-0 TP0–TP7"
    assert "decode-0 ATOM::EngineCore" in c["stuck"]
    assert all(k.startswith("prefill-0") or k.startswith("router") for k in c["idle"])
    assert fold_keys([k for k in c["idle"] if "TP" in k]) == "prefill-0 TP0–TP7"
    assert c["gone"] == []


def test_a_worker_without_metrics_falls_back_to_the_routers_count():
    p = ProcSnap("prefill-0", "n1", "prefill", queues={"error": "GET /metrics: 404"}, router_in_flight=2.0)
    assert busy(p)
    p.queues = {"requests_running": 0.0, "requests_waiting": 0.0}
    assert not busy(p)  # its own word wins over the router's PD guard


def test_a_rank_whose_stack_changed_moved_and_one_no_longer_there_is_gone():
    a = snap("hang-1p1d-a.txt.gz", QUEUES, IN_FLIGHT)
    b = copy.deepcopy(a)
    decode = b.procs[1]
    tp3 = next(r for r in decode.ranks if r.title == "ATOM::TP3")
    tp3.stack = [Frame("sample", "sampler.py", 10), *tp3.stack[1:]]
    decode.ranks = [r for r in decode.ranks if r.title != "ATOM::TP5"]
    c = compare(a, b)
    assert "decode-0 ATOM::TP3" in c["moved"] and c["gone"] == ["decode-0 ATOM::TP5"]
    assert fold_keys([k for k in c["stuck"] if "TP" in k]) == "decode-0 TP0–TP2, TP4, TP6–TP7"


def test_a_line_change_in_the_same_frame_is_a_move():
    a = snap("hang-1p1d-a.txt.gz", QUEUES)
    b = copy.deepcopy(a)
    r = next(r for r in b.procs[1].ranks if r.title == "ATOM::TP0")
    r.stack[0] = Frame(r.stack[0].name, r.stack[0].file, r.stack[0].line + 1)
    assert "decode-0 ATOM::TP0" in compare(a, b)["moved"]


def test_fold():
    assert fold(["ATOM::TP0", "ATOM::TP1", "ATOM::TP2", "ATOM::TP5"]) == "TP0–TP2, TP5"
    assert fold(["ATOM::DP1TP0", "ATOM::DP1TP1", "ATOM::DP0TP0"]) == "DP0TP0, DP1TP0–DP1TP1"
    assert fold(["server"]) == "server" and fold(["ATOM::TP1", "server"]) == "ATOM::TP1, server"
    assert fold(["rank 0 (pid 10)", "rank 1 (pid 11)", "rank 3 (pid 13)"]) == "ranks 0–1, rank 3"
    assert fold_keys(["decode-0 ATOM::TP0", "decode-0 ATOM::TP1", "decode-0 ATOM::EngineCore", "prefill-0 server"]) \
        == "decode-0 TP0–TP1, EngineCore; prefill-0 server"


# ---- py-spy's and the kernel's refusals ------------------------------------------------------------------------

def test_ptrace_denied_names_the_cause_not_pyspys_misleading_first_line():
    out = (DATA / "pyspy-denied.txt").read_text()
    assert "Check that the process is running" in out  # what py-spy says first
    assert _spy_error(out, 1) == "ptrace denied: py-spy: Permission denied (os error 13)"
    assert _spy_error("", 124) == "py-spy did not answer within 20 s"  # timeout(1)'s code
    assert _spy_error("Error: Failed to find python version from target process\n", 1) == \
        "Error: Failed to find python version from target process"


@pytest.mark.parametrize(("facts", "fix"), [
    ({"spy": "/x/py-spy", "uid": "0", "capeff": "000001fffef7ffff", "ptrace_scope": "-"}, "no CAP_SYS_PTRACE"),
    ({"spy": "/x/py-spy", "uid": "1000", "capeff": "0000000000000000", "ptrace_scope": "1"},
     "kernel.yama.ptrace_scope=1 lets only a parent trace; run as root, or `sysctl kernel.yama.ptrace_scope=0`"),
])
def test_ptrace_denied_on_a_node_says_why_and_the_fix(facts, fix):
    facts_, trees, _ = parse_node(text("hang-1p1d-a.txt.gz"), ROLES)
    denied = _spy_error((DATA / "pyspy-denied.txt").read_text(), 1)
    for ranks in trees.values():
        for r in ranks:
            r.stack, r.stack_error = [], denied
    word = _pyspy_word(facts, trees)
    assert word.startswith("ptrace denied (") and fix in word
    assert word.endswith("): py-spy: Permission denied (os error 13)")  # (its exe was read: nothing else hidden)


def test_no_pyspy_on_the_node_says_how_to_copy_one():
    word = _pyspy_word({"spy": "none"}, {})
    assert word.startswith("missing:") and "--install-py-spy" in word


# ---- the JSON contract and the bundle --------------------------------------------------------------------------

def test_json_is_processes_ranks_groups_and_bundle():
    s = snap("hang-1p1d-a.txt.gz", QUEUES, IN_FLIGHT)
    out = json.loads(json.dumps(s.to_json()))
    assert set(out) >= {"run", "procs", "groups", "nodes", "pyspy", "bundle"}
    rank = next(r for r in out["procs"][1]["ranks"] if r["title"] == "ATOM::TP7")
    assert set(rank) >= {"pid", "title", "state", "wchan", "syscall", "stack", "connections"}
    assert rank["stack"][0] == {"name": "recv_from_peer", "file": rank["stack"][0]["file"],
                                "line": rank["stack"][0]["line"]}
    assert out["groups"][0]["odd"] is True


def test_the_bundle_has_one_file_per_node_process_and_rank(tmp_path):
    s = snap("hang-1p1d-a.txt.gz", QUEUES, IN_FLIGHT)
    s.procs[1].last_lines = ["INFO: last line"]
    path = bundle(s, tmp_path)
    assert path.parent == tmp_path / "snapshots" and path.stat().st_mode & 0o777 == 0o600
    assert s.bundle == str(path)
    with tarfile.open(path) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        assert f"{top}/snapshot.json" in names
        tp7 = next(n for n in names if n.startswith(f"{top}/demo-n02/decode-0/") and n.endswith("ATOM::TP7.txt"))
        body = tar.extractfile(tp7).read().decode()  # type: ignore[union-attr]
        assert "recv_from_peer" in body and "syscall recvfrom" in body
        assert tar.extractfile(f"{top}/demo-n02/decode-0/last-lines.txt").read() == b"INFO: last line\n"  # type: ignore[union-attr]


async def test_a_local_snapshot_yields_the_cpu_to_the_console():
    """On the local launcher the node commands share the console's machine. They run in sessions of their own, and
    with the kernel's autogroups a session is one scheduling group at nice 0 against the console's whatever its tasks'
    policy: the command lowers its own group (16 at once had starved the console's keys for 30-140 ms)."""
    import os
    import shutil

    from atomdeck.core.remote.shell import LocalRunner
    from atomdeck.core.remote.shell import low_priority as _low_priority

    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("this kernel has no autogroups (CONFIG_SCHED_AUTOGROUP): nothing to lower")
    res = await LocalRunner().run([*_low_priority("local"), "sh", "-c", "cat /proc/self/autogroup; cat /proc/self/sched"])
    assert res.ok, res.stderr
    assert "nice 19" in res.stdout.splitlines()[0]
    policy = next(line for line in res.stdout.splitlines() if line.startswith("policy"))
    assert policy.split()[-1] == ("5" if shutil.which("chrt") else "0")  # SCHED_IDLE
    # (its own group: this one is left as it was). A process whose session was never started by setsid (PID 1's
    # descendants under some CI runners) is in the kernel's root group, which reads as nothing, as /proc/1/autogroup.
    mine = open("/proc/self/autogroup").read().split()[:1]
    theirs = res.stdout.split()[0]
    assert theirs.startswith("/autogroup-") and [theirs] != mine
    assert _low_priority("ssh") == ["nice", "-n", "19"] == _low_priority("slurm")


async def test_low_priority_node_commands_lower_their_group_also_for_a_user_without_privileges():
    """The kernel takes one group's nice value a tenth of a second from a user without CAP_SYS_ADMIN and refuses the
    others (EAGAIN): the GPU readings start 8 a second at 128 local nodes, and a reading that could not lower its
    group ran as the console's equal. Eight started at once as `nobody` all end up at nice 19 (a single try left
    all but the first at 0)."""
    import asyncio
    import os
    import shutil

    from atomdeck.core.remote.shell import LocalRunner
    from atomdeck.core.remote.shell import low_priority as _low_priority

    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("this kernel has no autogroups (CONFIG_SCHED_AUTOGROUP): nothing to lower")
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv (util-linux) to run the commands as a user without privileges")
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *_low_priority("local"),
            "cat", "/proc/self/autogroup"]
    results = await asyncio.gather(*(LocalRunner().run(argv, timeout=30) for _ in range(8)))
    assert all(r.ok for r in results), [r.stderr for r in results]
    assert [r.stdout.split()[-2:] for r in results] == [["nice", "19"]] * 8
