"""The barrier reads each ssh node's listening sockets through the node's persistent shell (issue 19):
`ss -ltnH` (or awk over /proc/net/tcp*) in the node's own network namespace."""

from __future__ import annotations

import asyncio

import pytest
from atomdeck.core.remote.listening import listens

from .runhelpers import launch, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_the_barrier_reads_each_ssh_nodes_table_and_its_ports_are_listed(lab):
    ws = workspace("demo-1p1d", "lab-ssh")

    async def go():
        run = await launch(ws)
        try:
            state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
            prober = run.prober
            reads = dict(prober.table_reads) if prober else {}
            tables = {n: await run.launcher.listen_table(n).read() for n in (prober.by_node if prober else {})}
            return run, state, reads, tables
        finally:
            await run.close()

    run, state, reads, tables = asyncio.run(go())
    try:
        assert state.status == "serving", state.diagnosis
        assert tables and all(reads.get(n, 0) >= 1 for n in tables), reads  # read while ports were closed
        for c in run.state.cells.values():  # every barrier port is in its own node's table now
            t = tables[c.node]
            assert t is not None and listens(t, c.host, c.port), (c.key, sorted(t or ()))
        assert all(not any(p == 1 for _, p in t or ()) for t in tables.values())  # nothing listens on port 1
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
