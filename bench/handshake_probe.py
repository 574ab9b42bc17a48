"""One decode's handshake probe at 64P64D TP8 (its 64 prefills x 8 handshake ports = 512 listening ports),
made both ways the watcher can: the command a remote node runs (`python3 -c`, node_probes.connect_from_node,
through this machine's PATH) and the local launcher's connects in the watcher's own process
(node_probes.connect_here). Prints, per probe, the CPU of this process and of the processes it started, and
the wall time.

    bench/isolated .venv/bin/python bench/handshake_probe.py [rounds]

The 512 listeners are on 127.0.N.1 (N = 1..64), in this network namespace. Numbers are printed, not asserted.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import sys
import time

from atomdeck.core.remote.node_probes import connect_from_node, connect_here
from atomdeck.core.remote.shell import LocalRunner


def cpu_s() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def drain(listeners: list[socket.socket]) -> None:
    for s in listeners:
        try:
            while True:
                s.accept()[0].close()
        except BlockingIOError:
            pass


async def main(rounds: int) -> dict:
    listeners = []
    for n in range(1, 65):
        for _ in range(8):
            s = socket.socket()
            s.bind((f"127.0.{n}.1", 0))
            s.listen(64)
            s.setblocking(False)
            listeners.append(s)
    targets = [s.getsockname() for s in listeners]

    async def node_run(argv: list[str], timeout: float):
        return await LocalRunner().run(argv, timeout=timeout)

    ways = {"command on the node (python3 -c)": lambda: connect_from_node(node_run, targets, 1.0),
            "in the watcher (connect_here)": lambda: connect_here(targets, 1.0)}
    out = {}
    for name, probe in ways.items():
        (me0, kids0), t0 = cpu_s(), time.monotonic()
        for _ in range(rounds):
            got = await probe()
            assert set(got.values()) == {"open"}, got
            drain(listeners)
        (me1, kids1), wall = cpu_s(), time.monotonic() - t0
        out[name] = {"self_cpu_ms": round((me1 - me0) * 1000 / rounds, 1),
                     "children_cpu_ms": round((kids1 - kids0) * 1000 / rounds, 1),
                     "wall_ms": round(wall * 1000 / rounds, 1)}
    for s in listeners:
        s.close()
    return {"ports": len(targets), "rounds": rounds, "per_probe": out}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)), indent=2))
