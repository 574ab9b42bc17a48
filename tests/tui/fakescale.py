"""A deterministic 128-node run for looks at scale (screenshots, functional tests): 64P64D TP8 + router on a
synthetic local cluster, a real core Run over a real run directory, its state built from events with
fixed times. Nothing is started; `attach(run, watch=False)` shows it.

Scenario "coming-up": most workers are up, a few still load (their HTTP cells not open yet, one of
them the diagnosis's culprit), and three handshake pairs failed, all towards decode-52: the view must
show those pairs and let the operator reach any of the 129 processes and 128 nodes.
"""

from __future__ import annotations

from datetime import datetime

from atomdeck.core.config.catalog import load_catalog
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.paths import catalog_path
from atomdeck.core.config.recipe import parse_recipe
from atomdeck.core.design.workspace import Workspace
from atomdeck.core.run.events import Event
from atomdeck.core.run.run import Run

try:
    from .fakerun import new_run, started
except ImportError:  # run as a script's sibling module (make_screenshots.py)
    from fakerun import new_run, started  # type: ignore[no-redef]

LAUNCHED = datetime(2025, 1, 1, 11, 59, 20)  # 40 s before the tests' frozen clock (12:00:00)
NODES = 128
LOADING = ("prefill-61", "decode-17", "decode-63")  # still loading: their HTTP ports not open yet
FAILED_PAIRS = ("prefill-5>decode-52", "prefill-40>decode-52", "prefill-63>decode-52")


def cluster_yaml(n: int = NODES) -> str:
    nodes = "".join(f"  - {{name: s{i:03d}, addr: 127.0.{1 + i // 100}.{10 + i % 100}, gpus: 8, partition: scale}}\n"
                    for i in range(n))
    return (f"name: scale{n}\nlauncher: local\ngpus_per_node: 8\nnode_ip: {{method: static}}\n"
            f"simulator: {{enabled: true}}\nnodes:\n{nodes}")


def recipe_yaml(n: int = NODES) -> str:
    half = n // 2
    return (f"name: scale-{half}p{half}d\nmodel: {{path: atomdeck/demo-tiny-8b}}\nmooncake: {{protocol: tcp}}\n"
            f"prefill: {{workers: {half}, tp: 8}}\ndecode: {{workers: {half}, tp: 8}}\n"
            "router: {policy: round_robin}\n")


def fake_scale_run(n: int = NODES, run_id: str = "20250101-115920-scale-64p64d-k1l2") -> Run:
    ws = Workspace(parse_recipe(recipe_yaml(n)), parse_cluster(cluster_yaml(n)), load_catalog(catalog_path()))
    ws.inventory = ws.cluster.static_inventory()
    a = ws.assess()
    plan = a.plan
    assert plan is not None, a.findings
    T0 = LAUNCHED.timestamp()
    run = new_run(plan, a.processes, run_id, T0, "starting")
    rd = run.rd

    def at(dt: float, kind: str, name: str = "", value: str = "", detail: str = "", **data) -> None:
        run.emit(Event(kind, name, value, detail, data, T0 + dt))

    started(run, rd, a.processes, at, lambda i, name: 50000 + i)
    workers = [p for p in a.processes if p.role != "router"]
    for i, p in enumerate(workers):
        at(1.0 + 0.01 * i, "proc.stage", p.name, "loading")
        at(4.0 + 0.01 * i, "proc.stage", p.name, "kv_registered")
        for c in plan.barrier:
            if c.owner == p.name and c.kind == "handshake":
                at(4.1 + 0.01 * i, "cell", f"{c.node}:{c.port}", "open")
        if p.name in LOADING:
            continue
        for c in plan.barrier:
            if c.owner == p.name and c.kind == "http":
                at(6.0 + 0.01 * i, "cell", f"{c.node}:{c.port}", "open")
        at(6.1 + 0.01 * i, "proc.stage", p.name, "http_up", "GET /health 200")
        rd.log_path(p.name).write_text(f"[atom 11:59:2{i % 10}] Server started successfully and ready to accept "
                                       "requests\n")
    at(0.3, "proc.stage", "router", "starting")
    at(0.31, "proc.stage", "router", "waiting_workers")
    for pr in run.state.pairs.values():
        if pr.prefill in LOADING or pr.decode in LOADING:
            at(8.0, "pair", pr.key, "both_registered", "both sides registered their KV memory")
        else:
            at(8.0, "pair", pr.key, "ports_reachable", "handshake ports reachable from this machine")
    for key in FAILED_PAIRS:
        p_i = int(key.split(">")[0].split("-")[1])
        at(9.0, "pair", key, "failed", f"decode-52 on s116 cannot reach prefill-{p_i} 127.0.1.{10 + p_i}:6301 "
           "(timeout); reachable from the console host: the path between the nodes is blocked")
    for p in run.state.procs.values():
        p.last_line_at = T0 + 9.0
    return run
