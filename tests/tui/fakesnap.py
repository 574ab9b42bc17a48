"""Snapshots of a hung 1P1D run as core's forensics makes them, from what the nodes' script really printed
(tests/data/snapshot: the rank-hangs drill, decode-0's TP7 in a socket receive, captured 2 s apart with three
requests waiting in the decode), at fixed times and with a fixed bundle path: for the Snapshot view's tests and
screenshots. Nothing is started."""

from __future__ import annotations

import gzip
from pathlib import Path

from atomdeck.core.run.snapshot import ProcSnap, Snapshot, group, name_peers, parse_node

DATA = Path(__file__).resolve().parents[1] / "data" / "snapshot"
ROLES = {"prefill-0": "prefill", "decode-0": "decode", "router": "router"}
NODES = {"prefill-0": "demo-n01", "decode-0": "demo-n02", "router": "demo-n01"}
PORTS = {("127.0.88.11", 8010): "prefill-0", ("127.0.88.12", 8020): "decode-0", ("127.0.88.11", 30000): "router"}
QUEUES = {"prefill-0": {"requests_running": 0.0, "requests_waiting": 0.0},
          "decode-0": {"requests_running": 0.0, "requests_waiting": 3.0}}
IN_FLIGHT = {"prefill-0": 3.0, "decode-0": 3.0}
LAST = {"prefill-0": ["[atom 11:59:41] [PRODUCER] All 1 consumers served for transfer_id=2"],
        "decode-0": ["[atom 11:59:41] [CONSUMER] Write-done received for req 2 (all stages), done_recving now: {2}"],
        "router": ["2025-01-01 11:59:30  INFO mesh::server: Starting server on 0.0.0.0:30000"]}


def fake_snapshot(run_id: str, capture: str, taken_at: float, bundle: str = "") -> Snapshot:
    text = gzip.decompress((DATA / capture).read_bytes()).decode()
    facts, trees, conns = parse_node(text, ROLES)
    peers = name_peers(conns, PORTS)
    procs = []
    for n, role in ROLES.items():
        p = ProcSnap(n, NODES[n], role, trees.get(n, []), queues=QUEUES.get(n, {}),
                     router_in_flight=IN_FLIGHT.get(n), last_lines=LAST[n])
        for r in p.ranks:
            r.connections = peers.get(r.pid, [])
        procs.append(p)
    spy = "/opt/atomdeck/bin/py-spy"
    s = Snapshot(run_id, taken_at, 0.34, procs, {"demo-n01": "ok", "demo-n02": "ok"},
                 {"demo-n01": spy, "demo-n02": spy}, bundle=bundle)
    s.groups = group(s.procs)
    return s


def fake_snapshots(run_id: str, t0: float, run_dir: str) -> list[Snapshot]:
    """The first snapshot and the one 2 s later."""
    return [fake_snapshot(run_id, "hang-1p1d-a.txt.gz", t0, f"{run_dir}/snapshots/snapshot-20250101-115958.tar.gz"),
            fake_snapshot(run_id, "hang-1p1d-b.txt.gz", t0 + 2, f"{run_dir}/snapshots/snapshot-20250101-120000.tar.gz")]
