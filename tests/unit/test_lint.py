"""One test per lint rule. Each asserts the finding appears, and that it is gone when only that rule
is disabled, so the test fails without the rule."""

from __future__ import annotations

import dataclasses

import pytest
from atomdeck.core.config.catalog import ModelEntry, parse_catalog
from atomdeck.core.design.lint import RULES
from atomdeck.core.design.plan import BarrierCell
from atomdeck.core.engines import ENGINES
from atomdeck.core.engines.atom import Atom

from .helpers import lab_assess

G = "mia1-p01-g0"


def rules_of(a):
    return {f.rule for f in a.findings}


def only(a, rule_id):
    found = [f for f in a.findings if f.rule == rule_id]
    assert found, f"{rule_id} not reported: {a.findings}"
    return found


def check(rule_id, *args, **kw):
    """Run with the rule and without it; return the findings of that rule."""
    with_rule = lab_assess(*args, **kw)
    without = lab_assess(*args, disabled=frozenset({rule_id}), **kw)
    assert rule_id not in rules_of(without)
    return only(with_rule, rule_id)


def test_barrier_expecting_a_port_the_role_never_opens():
    (f,) = check("barrier-role-port", "health:\n  extra_ports: [{role: decode, port: 8010}]\n")
    assert f.node == G + "2" and f.severity == "error"
    assert f.message.startswith("the barrier waits for port 8010 on mia1-p01-g02, but that node runs decode")


def test_barrier_rule_catches_the_inferencex_bug_on_a_hand_made_barrier():
    """InferenceX waited for the prefill port on every node, decode nodes included."""
    a = lab_assess("prefill: {workers: 2}\n")
    bad = a.plan.barrier + tuple(BarrierCell(n, "", 8010, "decode", "http", None) for n in a.plan.selection.decode)
    plan = dataclasses.replace(a.plan, barrier=bad)
    (f,) = RULES["barrier-role-port"](plan, a.processes, None)
    assert f.node == G + "3" and "8010" in f.message


def test_served_model_name_differs_from_what_atom_advertises():
    (f,) = _served()
    assert f.key == "model.served_name"
    assert "'DeepSeek-V4-Pro'" in f.message and "'deepseek-ai/DeepSeek-V4-Pro'" in f.message
    assert "503" in f.message


def _served():
    from atomdeck.core.config.catalog import load_catalog
    from atomdeck.core.config.cluster import parse_cluster
    from atomdeck.core.config.paths import catalog_path
    from atomdeck.core.config.recipe import parse_recipe
    from atomdeck.core.design.commands import LaunchContext
    from atomdeck.core.design.lint import assess

    from .helpers import LAB, lab_inventory

    r = parse_recipe("name: t\nmodel: {path: deepseek-ai/DeepSeek-V4-Pro, served_name: DeepSeek-V4-Pro}\n")
    args = (r, parse_cluster(LAB), lab_inventory(), None, frozenset(), load_catalog(catalog_path()), LaunchContext())
    assert "served-model-name" not in rules_of(assess(*args, disabled=frozenset({"served-model-name"})))
    return only(assess(*args), "served-model-name")


def test_reserved_flag_from_the_catalog_is_refused_and_ignored(monkeypatch):
    from atomdeck.core.config import catalog as cat_mod

    bad = parse_catalog({"DeepSeek-V4-Pro": {"extra_flags": "--host 10.0.0.1 --server_port 9"}}, "bad.yaml")
    monkeypatch.setattr(cat_mod, "load_catalog", lambda path: bad)
    from . import helpers

    monkeypatch.setattr(helpers, "load_catalog", lambda path: bad)
    found = check("reserved-flag")
    assert {f.message.split(" tries to set ")[1].split(" for ")[0] for f in found} == {"--host", "--server_port"}
    a = lab_assess()
    p0 = {p.name: p for p in a.processes}["prefill-0"]
    assert p0.argv[p0.argv.index("--host") + 1] == "0.0.0.0" and p0.argv.count("--host") == 1


def test_frontend_backend_mismatch(monkeypatch):
    class Vllm(Atom):  # a second engine, so a recipe can pair it with AToMesh
        name = "vllm"

    monkeypatch.setitem(ENGINES, "vllm", Vllm)
    found = check("frontend-backend", "engine: vllm\n")
    assert any(f.key == "engine" and "needs backend atom" in f.message for f in found)


def test_router_must_get_backend_atom_exactly(monkeypatch):
    from atomdeck.core.engines import atomesh

    orig = atomesh.Atomesh.options

    def options(self, plan):
        o = orig(self, plan)
        o.append("--backend", "sglang")
        return o

    monkeypatch.setattr(atomesh.Atomesh, "options", options)
    found = check("frontend-backend")
    assert found[0].message.startswith("the router command passes --backend atom sglang")


def test_port_collisions_on_a_node():
    found = check("port-collision", "ports: {handshake: 8005, router: 8010}\n")
    msgs = {f.message for f in found}
    assert "port 8010 on mia1-p01-g01 is wanted by prefill-0 HTTP and prefill-0 handshake block 8005-8012 and " \
           "the router" in msgs


def test_ports_inside_mooncakes_random_rpc_range():
    """The real transfer engine binds two ports at random in 15000-17000 on every address of its node (seen in
    CI: a prefill's listener on 16407 refused, 'address already in use')."""
    found = check("mooncake-port-range", "prefill: {workers: 2}\nports: {handshake: 16401, router: 15500}\n")
    assert {(f.key, f.severity) for f in found} == {("ports.handshake", "warning"), ("ports.router", "warning")}
    hs = next(f for f in found if f.key == "ports.handshake")
    assert hs.message.startswith("prefill-0 handshake block 16401-16408 and 1 more lie inside 15000-17000")
    assert "MC_MIN_RPC_PORT" in hs.fix
    # the defaults stay clear of it; so do ports moved out of a range the workers' env moved
    assert "mooncake-port-range" not in rules_of(lab_assess())
    moved = lab_assess("ports: {handshake: 16401}\nenv: {MC_MIN_RPC_PORT: 20000, MC_MAX_RPC_PORT: 20100}\n")
    assert "mooncake-port-range" not in rules_of(moved)
    (f,) = only(lab_assess("ports: {handshake: 20050}\nenv: {MC_MIN_RPC_PORT: 20000, MC_MAX_RPC_PORT: 20100}\n"),
                "mooncake-port-range")
    assert "inside 20000-20100" in f.message


def test_excluded_and_unhealthy_nodes():
    (f,) = check("node-excluded", nodes=["mia1-p01-g37", G + "1"])
    assert f.node == "mia1-p01-g37"
    (f,) = check("node-unhealthy", nodes=[G + "3", G + "1"], degraded=True)
    assert f.message == "node mia1-p01-g03 is down, not responding: Not responding"


def test_too_few_nodes():
    (f,) = check("too-few-nodes", "prefill: {workers: 3}\ndecode: {workers: 2}\n")
    assert "needs 5 node(s)" in f.message


@pytest.mark.parametrize("extra,severity,key", [
    ("prefill: {tp: 16}\n", "error", "prefill.tp"),
    ("decode: {tp: 4, per_node: 3}\n", "error", "decode.per_node"),
    ("decode: {tp: 4}\n", "warning", "decode.tp"),
])
def test_tp_not_matching_gpus_per_node(extra, severity, key):
    found = check("tp-gpus", extra)
    assert [(f.severity, f.key) for f in found] == [(severity, key)]


def test_decode_max_num_seqs_below_largest_concurrency():
    (f,) = check("max-num-seqs", "decode: {args: {max-num-seqs: 64}}\nbenchmark: {concurrencies: [64, 256]}\n")
    assert f.message == ("decode-0 runs --max-num-seqs 64, below the largest benchmark concurrency 256 "
                         "(requests would queue)")
    ok = lab_assess("benchmark: {concurrencies: [64, 256]}\n")
    d = {p.name: p for p in ok.processes}["decode-0"].argv
    assert d[d.index("--max-num-seqs") + 1] == "256" and "max-num-seqs" not in rules_of(ok)


def test_log_level_that_hides_the_stages():
    (f,) = check("log-level", "env: {ATOM_LOG_LEVEL: WARNING}\n")
    assert f.key == "env.ATOM_LOG_LEVEL"


def test_model_without_catalog_entry():
    (f,) = check("model-catalog", model="someorg/UnknownModel")
    assert f.severity == "warning"


def test_every_registered_rule_has_a_test():
    import inspect
    import sys

    src = inspect.getsource(sys.modules[__name__])
    for rule_id in RULES:
        assert f'"{rule_id}"' in src, rule_id
    assert isinstance(ModelEntry(), ModelEntry)


def test_dp_attention_ep_or_mtp_asked_for_but_no_flag_reaches_the_command():
    """A model without a catalog entry: DP attention, EP and MTP would be silently dropped."""
    found = check("parallel-flags", "decode: {dp_attention: true, expert_parallel: true, mtp: 2}\n",
                  model="/models/Kimi-K2")
    assert {f.key for f in found} == {"decode.dp_attention", "decode.expert_parallel", "decode.mtp"}
    assert all(f.severity == "error" and "no model catalog entry" in f.message for f in found)
    ok = lab_assess("decode: {dp_attention: true, expert_parallel: true, mtp: 2}\n")  # DeepSeek: in the catalog
    assert "parallel-flags" not in rules_of(ok)
    by_args = lab_assess("decode: {dp_attention: true, args: {enable-dp-attention: true}}\n", model="/models/Kimi-K2")
    assert "parallel-flags" not in rules_of(by_args)


def test_a_section_the_mode_ignores_is_pointed_out():
    (f,) = check("mode-sections", "aggregate: {workers: 3}\n")
    assert f.severity == "warning" and "aggregate section is ignored" in f.message and "mode: aggregate" in f.fix
    found = check("mode-sections", "mode: aggregate\naggregate: {workers: 2}\ndecode: {dp_attention: true}\n")
    assert [f.message for f in found] == ["the decode section is ignored: the recipe's mode is aggregate"]
    assert "mode-sections" not in rules_of(lab_assess())


def test_a_node_known_only_by_name_is_pointed_out():
    from .helpers import LAB

    found = check("node-ip", cluster=LAB + "node_ip: {method: name}\n")
    assert {f.node for f in found} == {G + "1", G + "2"}
    assert all(f.severity == "warning" and "not an IP" in f.message and "NodeAddr" in f.fix for f in found)
    assert "node-ip" not in rules_of(lab_assess())  # NodeAddr holds the IPs
