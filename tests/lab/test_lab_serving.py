"""Issue 14 drills on the real lab (Slurm launcher, real slurmd, nodes in network namespaces): a worker
SIGSTOPped while serving and then SIGCONTed, the producer's handshake ports dropped by nftables inside
the consumer's node, a worker that binds another port than asked. Each is a row in docs/fault-matrix.md."""

from __future__ import annotations

import asyncio

import pytest

from .runhelpers import engine_pid, launch, serve, teardown, up, workspace


def _signal_worker(lab, node: str, run_id: str, name: str, sig: str) -> int:
    target = engine_pid(lab, node, run_id, name)
    lab.node_exec(node, ["kill", f"-{sig}", str(target)], check=True)
    return target


@pytest.mark.parametrize("cluster", ["lab", "lab-ssh"])
def test_a_worker_sigstopped_while_serving_is_unresponsive_with_its_state_then_recovers(lab, cluster):
    """The /proc state is read on the node: an `srun --overlap` step (Slurm) or the node's SSH shell."""
    ws = workspace("demo-1p1d", cluster)

    async def go():
        run, s = await up(ws)
        assert s.status == "serving", s.diagnosis
        node = run.plan.endpoint("decode-0").node
        pid = _signal_worker(lab, node, run.id, "decode-0", "STOP")
        s = await run.watch(until=lambda s: s.procs["decode-0"].stage == "unresponsive", timeout=30)
        frozen = (s.status, s.procs["decode-0"].health_detail, s.diagnosis)
        lab.node_exec(node, ["kill", "-CONT", str(pid)], check=True)
        s = await run.watch(until=lambda s: s.procs["decode-0"].stage != "unresponsive", timeout=30)
        await run.close()
        return run, node, pid, frozen, s

    run, node, pid, (status, detail, diagnosis), after = asyncio.run(go())
    try:
        assert status == "degraded"
        assert f"GET /health on {node}:" in detail and "process alive" in detail
        assert f"state T (stopped) (pid {pid} " in detail  # read on the node (srun --overlap / SSH shell)
        assert diagnosis.startswith(f"degraded: decode-0 on {node} unresponsive for ")
        assert after.procs["decode-0"].stage == "serving" and after.status == "serving"
        assert "answers GET /health again" in after.procs["decode-0"].recovered
    finally:
        assert teardown(run.id).clean


def test_handshake_ports_dropped_on_the_consumers_node_fail_the_pair_with_the_path(lab):
    ws = workspace("demo-1p1d", "lab")
    a = ws.assess()
    assert a.ok, a.findings
    p_ep, d_ep = a.plan.endpoint("prefill-0"), a.plan.endpoint("decode-0")
    lo, hi = p_ep.handshake_ports[0], p_ep.handshake_ports[-1]
    rules = ("add table inet atomdeck_drill\n"
             "add chain inet atomdeck_drill out { type filter hook output priority 0; }\n"
             f"add rule inet atomdeck_drill out ip daddr {p_ep.host} tcp dport {lo}-{hi} drop\n")
    lab.node_exec(d_ep.node, ["nft", "-f", "-"], input=rules, check=True)
    try:
        run, s = serve(ws, a=a, timeout=90)
    finally:
        lab.node_exec(d_ep.node, ["nft", "delete", "table", "inet", "atomdeck_drill"])
    try:
        pr = s.pairs["prefill-0>decode-0"]
        assert s.status == "failed"
        assert pr.stage == "failed"
        assert f"decode-0 on {d_ep.node} cannot reach prefill-0 {p_ep.host}:{lo}" in pr.failed
        assert "(timeout)" in pr.failed
        assert "reachable from the console host: the path between the nodes is blocked" in pr.failed
        assert s.diagnosis.startswith("KV transfer prefill-0 -> decode-0 failed: ")
        assert "smoke request" not in s.diagnosis
    finally:
        assert teardown(run.id).clean


def test_a_worker_bound_to_another_port_is_named_with_what_it_listens_on(lab):
    ws = workspace("demo-1p1d", "lab", decode__env={"ATOMSIM_BIND_PORT": "18020"})

    async def go():
        run = await launch(ws)
        s = await run.watch(until=lambda s: s.checks.get("bind:decode-0") is not None or s.status == "failed",
                            timeout=60)
        await run.close()
        return run, s

    run, s = asyncio.run(go())
    try:
        ep = run.plan.endpoint("decode-0")
        c = s.checks["bind:decode-0"]
        assert c.ok is False
        assert f"but {ep.node}:{ep.http_port} is not open; on {ep.node} it listens on " in c.detail
        assert ":18020" in c.detail.split("listens on", 1)[1]
    finally:
        assert teardown(run.id).clean
