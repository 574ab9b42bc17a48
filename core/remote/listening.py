"""Which TCP ports a node listens on, read from the node's own kernel (/proc/net/tcp and tcp6).

The barrier reads this table on a short cadence instead of connecting to every closed port with
back-off: a listen shows up in the table the moment the program calls listen(), and reading it costs
the node no connection. The barrier still confirms each port with one connect before calling it open.

- local nodes (the demo cluster: 127.0.N.M addresses in this network namespace): this process reads
  /proc/net/tcp* itself; one read serves every node (they share the namespace).
- SSH nodes: one `awk` through the node's persistent shell (core/remote/node_shell.py) prints only
  the listening sockets' local addresses, so the reply stays small on a busy node.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import time
from collections.abc import Awaitable, Callable

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
# awk, not `ss`: POSIX, and present where iproute2 is not; prints `local_address` of listening sockets
AWK_LISTENING = ["awk", '$4 == "0A" { print $2 }', "/proc/net/tcp", "/proc/net/tcp6"]

Table = frozenset[tuple[str, int]]  # (address as text, port); "0.0.0.0" / "::" for every address


def hex_addr(text: str) -> tuple[str, int] | None:
    """/proc/net/tcp's `0100007F:1F90` -> ('127.0.0.1', 8080); IPv6 in four 32-bit words. The words are
    in the node's byte order: little-endian assumed (x86-64, arm64)."""
    addr, _, port = text.partition(":")
    try:
        p = int(port, 16)
        if len(addr) == 8:
            return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(addr, 16))), p
        if len(addr) == 32:
            words = [int(addr[i:i + 8], 16) for i in range(0, 32, 8)]
            return socket.inet_ntop(socket.AF_INET6, struct.pack("<4I", *words)), p
    except (ValueError, OSError, struct.error):
        return None
    return None


def parse_proc_net_tcp(text: str) -> Table:
    """Listening (address, port) pairs from the text of /proc/net/tcp and/or /proc/net/tcp6."""
    out = set()
    for line in text.splitlines():
        f = line.split()
        if len(f) > 3 and f[3] == LISTEN and (a := hex_addr(f[1])) is not None:
            out.add(a)
    return frozenset(out)


def parse_addresses(text: str) -> Table:
    """One `local_address` per line (AWK_LISTENING's output)."""
    return frozenset(a for line in text.split() if (a := hex_addr(line)) is not None)


def listens(table: Table, host: str, port: int) -> bool:
    """Whether `host:port` is listened on per the table. An IP literal matches itself, the wildcard of its
    family, and (IPv4) the IPv6 wildcard and its mapped form; a host name matches any address (the
    table is the node's own, and a connect confirms it anyway)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return any(p == port for _, p in table)
    if isinstance(ip, ipaddress.IPv4Address):
        wanted = {str(ip), "0.0.0.0", "::", f"::ffff:{ip}"}
    else:
        wanted = {ip.compressed, "::"}
    return any((a, port) in table for a in wanted)


def read_local_table() -> Table:
    parts = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                parts.append(f.read())
        except OSError:
            continue
    if not parts:
        raise OSError("no /proc/net/tcp here")
    return parse_proc_net_tcp("\n".join(parts))


class ListenTable:
    """A node's table of listening sockets, read at most once per `cadence` seconds however many callers
    (the local launcher shares one for all its nodes). `read()` returns None when the table cannot be
    had (no /proc, the shell failed): the barrier then relies on its connects."""

    def __init__(self, fetch: Callable[[], Awaitable[Table]], cadence: float, where: str = "here"):
        self.fetch = fetch
        self.cadence = cadence
        self.where = where
        self.reads = 0
        self.failures = 0
        self._at = float("-inf")
        self._last: Table | None = None
        self._lock = asyncio.Lock()

    async def read(self) -> Table | None:
        async with self._lock:
            if time.monotonic() - self._at < self.cadence * 0.5:
                return self._last  # another node's loop read it a moment ago
            try:
                self._last = await self.fetch()
                self.reads += 1
            except Exception:
                self._last = None
                self.failures += 1
            self._at = time.monotonic()
            return self._last


def local_table(cadence: float) -> ListenTable:
    """This network namespace's table (read in a thread: on a host with many sockets it is not tiny)."""
    return ListenTable(lambda: asyncio.to_thread(read_local_table), cadence)


def shell_table(run: Callable[..., Awaitable], cadence: float, where: str) -> ListenTable:
    """A remote node's table through `run(argv, timeout=...)` (the node's persistent shell)."""

    async def fetch() -> Table:
        res = await run(AWK_LISTENING, timeout=10)
        # awk exits 2 when a file is missing: without tcp6 (IPv6 off) the IPv4 table still counts
        if not (res.ok or (res.rc == 2 and "/proc/net/tcp:" not in res.stderr)):
            raise OSError(f"cannot read the socket table on {where}: {res.explain()}")
        return parse_addresses(res.stdout)

    return ListenTable(fetch, cadence, where)
