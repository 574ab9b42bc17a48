"""Node IPs from the nodes at pre-flight (issue 17.2): ATOM_HOST_IP, proxy_ip and the router's worker URLs
carry the address the node itself has, and a launch is refused when no address matches the cluster's network."""

from __future__ import annotations

import json

import pytest
import yaml
from atomdeck.core.config.paths import find_cluster
from atomdeck.core.run.run import Run

from .runhelpers import engine_pid, refused, serve, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]
G = "mia1-p01-g0"


def _cluster(tmp_path, monkeypatch, name: str, node_ip: dict) -> None:
    cluster = yaml.safe_load(find_cluster("lab").read_text())
    cluster.update(name=name, node_ip=node_ip)
    (tmp_path / "recipes" / "clusters").mkdir(parents=True, exist_ok=True)
    (tmp_path / "recipes" / "clusters" / f"{name}.yaml").write_text(yaml.safe_dump(cluster))
    monkeypatch.chdir(tmp_path)


def _environ(lab, node: str, run_id: str, name: str) -> dict[str, str]:
    raw = open(f"/proc/{engine_pid(lab, node, run_id, name)}/environ", "rb").read().decode()
    return dict(x.split("=", 1) for x in raw.split("\0") if "=" in x)


def test_nodes_known_by_name_get_the_ip_they_have(lab, tmp_path, monkeypatch):
    _cluster(tmp_path, monkeypatch, "lab-byname", {"method": "name", "subnet": "10.77.0.0/24"})
    ws = workspace("demo-1p1d", "lab-byname")
    a = ws.assess([f"{G}1", f"{G}2"])
    assert a.ok, a.findings
    assert {p.env.get("ATOM_HOST_IP") for p in a.processes if p.role != "router"} == {f"{G}1", f"{G}2"}  # offline
    run, state = serve(ws, a=a)
    try:
        assert state.status == "serving", state.diagnosis
        assert run.rd.meta()["node_ips"] == {f"{G}1": "10.77.0.11", f"{G}2": "10.77.0.12"}
        assert _environ(lab, f"{G}1", run.id, "prefill-0")["ATOM_HOST_IP"] == "10.77.0.11"
        assert _environ(lab, f"{G}2", run.id, "decode-0")["ATOM_HOST_IP"] == "10.77.0.12"
        argv = run.processes["prefill-0"].argv
        kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert kv["proxy_ip"] == "10.77.0.11"
        router = run.processes["router"].argv
        assert router[router.index("--prefill") + 1] == "http://10.77.0.11:8010"
        assert router[router.index("--decode") + 1] == "http://10.77.0.12:8020"
        again = Run.open(run.id)  # another session rebuilds the same plan
        assert again.plan.endpoint("decode-0").host == "10.77.0.12"
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()


def test_no_address_on_the_clusters_network_refuses_the_launch_naming_what_the_node_has(lab, tmp_path,
                                                                                        monkeypatch):
    _cluster(tmp_path, monkeypatch, "lab-ib", {"interface": "ib*"})
    ws = workspace("demo-1p1d", "lab-ib")
    e = refused(ws, ws.assess([f"{G}1", f"{G}2"]), "launched although no node has an address on interface ib*")
    found = sorted((f.node, f.key, f.message) for f in e.findings if f.rule == "preflight-node-ip")
    assert found == [(f"{G}{i}", "node_ip.interface",
                      f"{G}{i} has no address on interface ib*: it has 10.77.0.1{i} on eth0") for i in (1, 2)]
    assert Run.list()[-1]["status"] == "failed"
