"""Looks taken ON a node (not from the console host): TCP reachability of other nodes' ports, and a
process's state and listening sockets read from /proc. Each is one short python3 command run by the
caller's `node_run` (locally for the local launcher, through the node's SSH shell, or as an
`srun --overlap` step in the run's job), so it sees the node's own network namespace and routes. The local
launcher, whose nodes are this machine, makes the connects and reads /proc in its own process instead
(`connect_here`, `processes_here`).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import procscan
from .probes import connect_failed
from .shell import Result

NodeRun = Callable[[list[str], float], Awaitable[Result]]

# argv: timeout host:port ... -> one line per target: "host:port result"
_CONNECT = r'''
import errno, socket, sys
from concurrent.futures import ThreadPoolExecutor
t = float(sys.argv[1])
def one(a):
    h, p = a.rsplit(":", 1)
    h = h.strip("[]")
    s = socket.socket(socket.AF_INET6 if ":" in h else socket.AF_INET)
    s.settimeout(t)
    try:
        s.connect((h, int(p)))
        r = "open"
    except socket.timeout:
        r = "timeout"
    except ConnectionRefusedError:
        r = "refused"
    except OSError as e:
        r = {errno.ETIMEDOUT: "timeout", errno.ECONNREFUSED: "refused"}.get(e.errno, "unreachable")
    finally:
        s.close()
    return a, r
with ThreadPoolExecutor(16) as ex:
    for a, r in ex.map(one, sys.argv[2:]):
        print(a, r, flush=True)
'''

STATE_WORDS = {"R": "running", "S": "sleeping", "D": "disk sleep", "T": "stopped", "t": "tracing stop",
               "Z": "zombie", "X": "dead", "I": "idle"}
_WORST = "TtDZXRSI"  # the state to report when a process group has several


async def connect_from_node(node_run: NodeRun, targets: list[tuple[str, int]], timeout: float = 1.0) -> dict:
    """(host, port) -> 'open' | 'refused' | 'timeout' | 'unreachable', connected from the node itself.
    Raises RuntimeError when the command could not run there (no python3, node unreachable)."""
    if not targets:
        return {}
    args = [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in targets]
    res = await node_run(["python3", "-c", _CONNECT, str(timeout), *args], timeout + 20)
    found: dict[tuple[str, int], str] = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and ":" in parts[0]:
            h, p = parts[0].rsplit(":", 1)
            found[(h.strip("[]"), int(p))] = parts[1]
    if not found:
        raise RuntimeError(res.explain())
    return found


# connects in flight at once in connect_here (the node-side command uses 16 threads)
HERE_AT_ONCE = 64


async def connect_here(targets: list[tuple[str, int]], timeout: float = 1.0) -> dict:
    """What connect_from_node answers, for a node that is this machine (the local launcher's nodes are
    addresses of this network namespace): the same connects, made in this process. The command costs an
    interpreter start per node; while a local 64P64D came up, the 64 decodes' probes (each also a session, so
    a scheduling group, of its own) were the console's longest waits for a CPU (bench/README.md)."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(HERE_AT_ONCE)

    async def one(host: str, port: int) -> str:
        async with gate:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
            except socket.gaierror:  # a name, not an address: resolved off the loop
                try:
                    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                except OSError:
                    return "unreachable"
            family, kind, proto, _, addr = infos[0]
            s = socket.socket(family, kind, proto)
            s.setblocking(False)
            try:
                async with asyncio.timeout(timeout):
                    await loop.sock_connect(s, addr)
                return "open"
            except OSError as e:  # (TimeoutError and ConnectionRefusedError too)
                return connect_failed(e)
            finally:
                s.close()

    results = await asyncio.gather(*(one(h, p) for h, p in targets))
    return dict(zip(targets, results))


@dataclass
class NodeProc:
    pid: int
    state: str  # the /proc state letter
    comm: str
    listening: list[str] = field(default_factory=list)  # "ip:port" of its listening TCP sockets

    @property
    def state_words(self) -> str:
        return f"{self.state} ({STATE_WORDS.get(self.state, '?')})"


async def processes_on_node(node_run: NodeRun, marker: str, timeout: float = 10.0) -> list[NodeProc]:
    """The processes carrying atomdeck's environment marker (ATOMDECK_RUN=run:name) on the node, with
    their /proc state and what they listen on (procscan.py, run there). Raises RuntimeError when it could not
    look."""
    res = await node_run(["python3", "-c", _procscan_source(), f"ATOMDECK_RUN={marker}"], timeout)
    if not res.ok and not res.stdout.strip():
        raise RuntimeError(res.explain())
    out = []
    for line in res.stdout.splitlines():
        if not line.startswith("proc "):
            continue
        f = line[5:].rsplit(None, 4)
        if len(f) == 5 and f[1].isdigit():
            out.append(NodeProc(int(f[1]), f[2], f[3], [] if f[4] == "-" else f[4].split(",")))
    return out


def processes_here(markers: list[str]) -> dict[str, list[NodeProc]]:
    """What processes_on_node answers for each marker, for nodes that are this machine (the local launcher's):
    one read of /proc in this process for them all. As a command per endpoint, a 64P64D whose simulators were
    slow to answer had 50-100 interpreters scanning /proc at once, each a session (so a scheduling group) of its
    own, and the console waited for a CPU (bench/README.md). Blocking: call it in a thread."""
    found: dict[str, list[NodeProc]] = {m: [] for m in markers}
    by_bytes = {f"ATOMDECK_RUN={m}".encode(): m for m in markers}
    for mark, pid, state, comm, listen in procscan.scan(list(by_bytes), ()):
        found[by_bytes[mark]].append(NodeProc(pid, state, comm, listen))
    return found


class ProcessReads:
    """processes_here for callers on one event loop, each asking for one marker: every ask made while a read runs
    is answered by the one after it (a 64P64D's slow checks ask within milliseconds of each other)."""

    def __init__(self) -> None:
        self._asks: dict[str, list[asyncio.Future]] = {}  # marker -> the asks for the next read
        self._reader: asyncio.Task | None = None

    async def ask(self, marker: str, timeout: float | None = None) -> list[NodeProc]:
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # (heard, even by a caller gone)
        self._asks.setdefault(marker, []).append(fut)
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read())
        async with asyncio.timeout(timeout):
            return await asyncio.shield(fut)

    async def _read(self) -> None:
        while self._asks:
            asks, self._asks = self._asks, {}
            try:
                found = await asyncio.to_thread(processes_here, list(asks))
            except Exception as e:  # (an unreadable /proc: each caller hears why)
                err = RuntimeError(f"could not read /proc: {e}")
                for futs in asks.values():
                    for f in futs:
                        if not f.done():
                            f.set_exception(err)
                continue
            for mark, futs in asks.items():
                for f in futs:
                    if not f.done():
                        f.set_result(list(found[mark]))


@functools.cache
def _procscan_source() -> str:
    return Path(procscan.__file__).read_text()


def worst(procs: list[NodeProc]) -> NodeProc | None:
    """The process whose state tells most (stopped beats running beats sleeping)."""
    return min(procs, key=lambda p: _WORST.index(p.state) if p.state in _WORST else 99, default=None)
