"""`atomdeck snapshot` on the lab, over Slurm (`srun --overlap` steps, `sbcast`) and over ssh (SFTP) (issue 39):
py-spy is on no lab node's PATH, so a first snapshot says it is missing and how to copy it, and still shows the
/proc, socket and log parts; `--install-py-spy` copies atomdeck's own to remote_dir/bin on the nodes; then a rank
held in a blocking call (the rank-hangs fault: decode-0's TP7 in a socket receive) is the odd one out, and
`--twice` marks the decode's ranks stuck (requests wait in it) and the idle prefill idle.

Not tested here: ptrace denied on a lab node. The lab's nodes are network namespaces of this machine, without
Yama (no kernel.yama.ptrace_scope to set, in a namespace or not), their sshd and slurmd run as root with every
capability, and a non-root lab user is not made easily. tests/e2e/test_snapshot_local.py runs the same script
without CAP_SYS_PTRACE on the local launcher; tests/unit/test_snapshot.py reads py-spy's real refusal."""

from __future__ import annotations

import json
import threading
import time

import pytest
from atomdeck.core.run.snapshot import fold_keys

from tests.frozen import request_in_flight

from .runhelpers import cli, serve, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]
HANG = {"ATOMSIM_HANG_AFTER": "4", "ATOMSIM_HANG_RANK": "TP7"}  # (after the launch's smoke request)


def snapshot(run_id: str, *args: str) -> dict:
    res = cli("snapshot", run_id, "--json", *args)
    assert res.returncode in (0, 1) and res.stdout.strip(), (res.returncode, res.stdout, res.stderr[-3000:])
    return json.loads(res.stdout)


def until(cond, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return got


@pytest.mark.parametrize("cluster", ["lab", "lab-ssh"])
def test_pyspy_is_copied_and_the_hung_rank_is_the_odd_one_out_and_stuck(lab, cluster):
    ws = workspace("demo-1p1d", cluster, decode__env=HANG)
    spy = f"{ws.cluster.remote_dir}/bin/py-spy"
    run, state = serve(ws)
    try:
        assert state.status == "serving", state.diagnosis
        nodes = sorted({n.name for n in run.plan.nodes})
        for node in nodes:  # (left by an earlier run of this test)
            lab.node_exec(node, ["rm", "-f", spy])

        first = snapshot(run.id, "--no-bundle")
        assert set(first["pyspy"]) == set(nodes) and all(
            w.startswith("missing: py-spy is not on this node's PATH") for w in first["pyspy"].values()), first["pyspy"]
        decode = next(p for p in first["procs"] if p["name"] == "decode-0")
        ranks = [r for r in decode["ranks"] if r["kind"] == "rank"]
        assert sorted(r["title"] for r in ranks) == [f"ATOM::TP{i}" for i in range(8)]  # /proc read without py-spy
        assert all(r["stack"] == [] and r["wchan"] for r in ranks) and decode["last_lines"]

        until(lambda: snapshot(run.id, "decode-0", "--no-bundle")["procs"][0]["ranks"] and any(
            r["title"] == "ATOM::TP7" and r["syscall"] == "recvfrom"
            for r in snapshot(run.id, "decode-0", "--no-bundle")["procs"][0]["ranks"]), "TP7 to hang")
        done = threading.Event()
        for _ in range(3):
            threading.Thread(target=request_in_flight, args=(run.plan.router.url, run.recipe.model.client_name, done),
                             daemon=True).start()
        until(lambda: snapshot(run.id, "decode-0", "--no-bundle")["procs"][0]["queues"].get("requests_waiting", 0)
              >= 3, "three requests waiting in the decode")

        out = snapshot(run.id, "--install-py-spy", "--twice", "1")
        assert sorted(out["installed"]) == sorted(f"{n}: py-spy copied to {spy}" for n in nodes), out["installed"]
        assert all(w == spy for w in out["pyspy"].values()), out["pyspy"]
        assert all(v == "ok" for v in out["nodes"].values()), out["nodes"]
        odd = out["groups"][0]
        assert (odd["process"], odd["members"], odd["odd"]) == ("decode-0", ["ATOM::TP7"], True), out["groups"]
        assert odd["where"].startswith("recv_from_peer <- all_reduce"), odd
        c = out["compare"]
        assert fold_keys([k for k in c["stuck"] if "TP" in k]) == "decode-0 TP0–TP7", c
        assert fold_keys([k for k in c["idle"] if "TP" in k]) == "prefill-0 TP0–TP7", c
        router = next(p for p in out["procs"] if p["name"] == "router")
        assert any(c["peer_name"] == "decode-0:8020" for r in router["ranks"] for c in r["connections"]), router
        assert out["bundle"].startswith(str(run.rd.path))
    finally:
        assert teardown(run.id).clean
