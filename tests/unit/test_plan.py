"""Plans: placement, ports, co-location, the barrier, and node selection."""

from __future__ import annotations

from atomdeck.core.design.findings import has_errors

from .helpers import lab_assess

G = "mia1-p01-g0"


def cells(plan):
    return sorted((c.node, c.port, c.role, c.kind) for c in plan.barrier)


def test_1p1d_places_router_on_first_prefill_and_barrier_is_per_role():
    a = lab_assess()
    assert a.ok, a.findings
    p = a.plan
    assert p.selection.prefill == (G + "1",) and p.selection.decode == (G + "2",)
    assert (p.router.node, p.router.host, p.router.port) == (G + "1", "10.77.0.11", 30000)
    assert [(e.name, e.node, e.host, e.http_port) for e in p.endpoints] == [
        ("prefill-0", G + "1", "10.77.0.11", 8010), ("decode-0", G + "2", "10.77.0.12", 8020)]
    expected = [(G + "1", 8010, "prefill", "http"), (G + "1", 30000, "router", "router")]
    expected += [(G + "1", port, "prefill", "handshake") for port in range(6301, 6309)]
    expected += [(G + "2", 8020, "decode", "http")]
    assert cells(p) == sorted(expected)
    # the InferenceX bug class: no prefill port is ever expected on a decode node
    assert not [c for c in p.barrier if c.node == G + "2" and c.port == 8010]


def test_2p1d_rank_order_follows_the_chosen_nodes():
    a = lab_assess("prefill: {workers: 2, dp_attention: true}\ndecode: {dp_attention: true}\n",
                   nodes=[G + "3", G + "1", G + "4"])
    assert a.ok, a.findings
    p = a.plan
    assert p.selection.prefill == (G + "3", G + "1") and p.selection.decode == (G + "4",)
    assert p.router.node == G + "3"
    assert p.shape == "2P1D DPA TP8"
    assert {c.node for c in p.barrier if c.kind == "handshake"} == {G + "3", G + "1"}


def test_auto_selection_skips_unhealthy_and_excluded_nodes():
    a = lab_assess("prefill: {workers: 2}\n", degraded=True)
    # degraded: g03 down, g04 drained, g37 drained+excluded -> only g01, g02 usable; 3 needed
    assert a.plan is None
    (f,) = [f for f in a.findings if f.rule == "too-few-nodes"]
    assert f.message == ("the layout needs 3 node(s) (2 prefill + 1 decode) but only 2 are usable "
                         "(2 usable of 5 in labtest)")
    assert lab_assess(degraded=True).plan.selection.all() == (G + "1", G + "2")


def test_choosing_an_excluded_node_is_an_error_that_says_why():
    a = lab_assess(nodes=["mia1-p01-g37", G + "1"])
    (f,) = [f for f in a.findings if f.node == "mia1-p01-g37"]
    assert (f.rule, f.severity) == ("node-excluded", "error")
    assert f.message == ("node mia1-p01-g37 is excluded by cluster rule 'mia1-p01-g37': "
                         "persistently drained, not responding")
    assert has_errors(a.findings) and not a.ok


def test_override_turns_the_error_into_a_warning():
    a = lab_assess(nodes=[G + "4", G + "1"], overrides={G + "4"}, degraded=True)
    (f,) = [f for f in a.findings if f.node == G + "4"]
    assert (f.rule, f.severity) == ("node-unhealthy", "warning")
    assert "drained: gpu memory not released" in f.message
    assert a.ok


def test_unknown_and_duplicate_nodes():
    a = lab_assess(nodes=["nope", G + "1", G + "1"])
    assert a.plan is None
    assert {f.rule for f in a.findings} >= {"node-unknown", "node-duplicate"}


def test_colocated_workers_get_distinct_ports_gpus_and_handshake_blocks():
    a = lab_assess("prefill: {workers: 2, tp: 4, per_node: 2}\ndecode: {workers: 2, tp: 4, per_node: 2}\n")
    assert a.ok, a.findings
    p = a.plan
    p0, p1 = p.endpoint("prefill-0"), p.endpoint("prefill-1")
    assert p0.node == p1.node == G + "1"
    assert (p0.http_port, p1.http_port) == (8010, 8011)
    assert (p0.handshake_ports, p1.handshake_ports) == (tuple(range(6301, 6305)), tuple(range(6305, 6309)))
    assert (p0.gpus, p1.gpus) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (p0.engine_port, p1.engine_port) == (None, 8007)
    procs = {x.name: x for x in a.processes}
    assert procs["prefill-1"].env["HIP_VISIBLE_DEVICES"] == "4,5,6,7"
    assert procs["prefill-1"].argv[procs["prefill-1"].argv.index("--port") + 1] == "8007"
    assert procs["decode-1"].argv[procs["decode-1"].argv.index("--server-port") + 1] == "8021"
    kv = procs["prefill-1"].argv[procs["prefill-1"].argv.index("--kv-transfer-config") + 1]
    assert '"handshake_port":6305' in kv


def test_aggregate_layout_has_no_kv_transfer_and_router_uses_worker_urls():
    a = lab_assess("mode: aggregate\naggregate: {workers: 2, tp: 8}\n")
    assert a.ok, a.findings
    procs = {x.name: x for x in a.processes}
    assert set(procs) == {"worker-0", "worker-1", "router"}
    assert "--kv-transfer-config" not in procs["worker-0"].argv
    r = procs["router"].argv
    assert "--pd-disaggregation" not in r
    i = r.index("--worker-urls")
    assert r[i + 1:i + 3] == ["http://10.77.0.11:8000", "http://10.77.0.12:8000"]
    assert {c.kind for c in a.plan.barrier} == {"http", "router"}


def test_router_node_can_be_chosen_but_must_be_in_the_plan():
    a = lab_assess("router: {node: mia1-p01-g02}\n")
    assert a.plan.router.node == G + "2"
    bad = lab_assess("router: {node: mia1-p01-g04}\n")
    assert bad.plan is None and [f.rule for f in bad.findings] == ["router-node"]


def test_placement_is_per_role_not_one_flattened_rank_list():
    # issue 17.1: prefill [g01, g03], decode [g02], one prefill worker put decode on g03 and called g02 unused
    a = lab_assess(f"placement: {{prefill: [{G}1], decode: [{G}2]}}\n")
    assert a.ok, a.findings
    assert (a.plan.selection.prefill, a.plan.selection.decode) == ((G + "1",), (G + "2",))
    bad = lab_assess(f"placement: {{prefill: [{G}1, {G}3], decode: [{G}2]}}\n")
    assert bad.plan is None
    (f,) = bad.findings
    assert (f.rule, f.key) == ("placement-count", "placement.prefill")
    assert f.message == "placement.prefill lists 2 node(s) but 1 prefill worker(s) at 1 per node need 1"
    short = lab_assess(f"prefill: {{workers: 2}}\nplacement: {{prefill: [{G}3], decode: [{G}2]}}\n")
    assert [(f.rule, f.key) for f in short.findings] == [("placement-count", "placement.prefill")]
    assert "need 2" in short.findings[0].message


def test_placement_findings_point_at_placement_keys_and_unplaced_roles_are_filled():
    a = lab_assess(f"placement: {{decode: [{G}3]}}\n")
    assert a.ok, a.findings
    assert (a.plan.selection.prefill, a.plan.selection.decode) == ((G + "1",), (G + "3",))
    bad = lab_assess("placement: {prefill: [nope], decode: [mia1-p01-g37]}\n")
    assert {(f.rule, f.key) for f in bad.findings} == {("node-unknown", "placement.prefill"),
                                                       ("node-excluded", "placement.decode")}
    both = lab_assess(f"placement: {{prefill: [{G}1], decode: [{G}1]}}\n")
    assert [(f.rule, f.key) for f in both.findings] == [("node-duplicate", "placement.decode")]
    agg = lab_assess(f"mode: aggregate\naggregate: {{workers: 1}}\nplacement: {{decode: [{G}1]}}\n")
    assert [(f.rule, f.key) for f in agg.findings] == [("placement-role", "placement.decode")]
