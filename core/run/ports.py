"""Before a launch: refuse ports that something already listens on (that listener would pass the barrier).

On the local launcher, whose nodes share this network namespace, one read of its table of listening sockets
(netlink) says which ports are taken: only those get a connect, to confirm them as the barrier does; the others
are free. At 128 local nodes that is one read instead of 642 connects in the console's loop. Elsewhere (ssh,
Slurm) each port gets a connect, as before: reading a remote node's table would open an SSH connection per node
before the launch opens its own, and wait for the SSH timeout on a node that does not answer."""

from __future__ import annotations

import asyncio

from ..config.errors import AtomdeckError
from ..design.commands import ProcessSpec
from ..design.plan import Plan
from ..launch.base import Launcher
from ..launch.local import LocalLauncher
from ..remote.listening import Table, listens
from ..remote.probes import tcp_probe


async def check_ports_free(plan: Plan, processes: list[ProcessSpec], launcher: Launcher) -> None:
    """Refuse to launch onto ports something else already listens on (it would pass the barrier)."""
    wanted = sorted({(p.node, p.host, port, p.name) for p in processes for port in p.ports})
    try:
        tables = await _tables(launcher, sorted({node for node, *_ in wanted}))
        ask = [w for w in wanted if (t := tables.get(w[0])) is None or listens(t, w[1], w[2])]
        results = await asyncio.gather(*(tcp_probe(host, port, 1.0, launcher.probe_runner(node))
                                         for node, host, port, _ in ask))
    finally:
        await launcher.close()
    taken = [f"{node} {host}:{port} (wanted by {name})" for (node, host, port, name), r in zip(ask, results)
             if r == "open"]
    if taken:
        raise AtomdeckError(f"port(s) already in use, nothing was launched: {'; '.join(taken)}. Stop what holds "
                            "them (an earlier run? `atomdeck runs`) or change ports.* in the recipe")


async def _tables(launcher: Launcher, nodes: list[str]) -> dict[str, Table | None]:
    """node -> its listening sockets: on the local launcher one table serves every node; elsewhere nothing
    (then: connects)."""
    if not isinstance(launcher, LocalLauncher) or not nodes:
        return {}
    table = await launcher.listen_table(nodes[0]).read()
    return dict.fromkeys(nodes, table)
