"""Which TCP ports a node listens on, read from the node's own kernel.

The barrier reads this table on a short cadence instead of connecting to every closed port with
back-off: a listen shows up in the table the moment the program calls listen(), and reading it costs
the node no connection. The barrier still confirms each port with one connect before calling it open.

- local nodes (the demo cluster: 127.0.N.M addresses in this network namespace): this process asks
  the kernel over netlink (sock_diag, what `ss` uses) for listening TCP sockets only; one read serves
  every node (they share the namespace). Not /proc/net/tcp: reading it walks the whole established
  hash table, shared by every namespace (~20-30 ms of kernel CPU per read on this host, with one
  socket in the namespace), which is also why `ss` comes first on remote nodes.
- SSH nodes: `ss -ltnH`, or where there is no `ss`, an `awk` over /proc/net/tcp* printing only the
  listening sockets, through the node's persistent shell (core/remote/node_shell.py).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import struct
import time
from collections.abc import Awaitable, Callable

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
TCP_LISTEN = 10
# where there is no `ss`: awk (POSIX) prints `local_address` of the listening sockets only
AWK_LISTENING = ["awk", '$4 == "0A" { print $2 }', "/proc/net/tcp", "/proc/net/tcp6"]
# on a node: ss (netlink, cheap), else the awk
NODE_LISTENING = ["sh", "-c", "ss -ltnH 2>/dev/null || " + " ".join(
    ["awk", "'$4 == \"0A\" { print $2 }'", "/proc/net/tcp", "/proc/net/tcp6"])]

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
    """One `local_address` per line (AWK_LISTENING's output), or `ss -ltnH`'s lines
    (`LISTEN 0 4096 127.0.0.1:8000 0.0.0.0:*`, `[::]:8000`, `*:8000`, `127.0.0.53%lo:53`)."""
    out: set[tuple[str, int]] = set()
    for line in text.splitlines():
        f = line.split()
        if len(f) == 1 and (a := hex_addr(f[0])) is not None:
            out.add(a)
        elif len(f) >= 4 and f[0] == "LISTEN":
            addr, _, port = f[3].rpartition(":")
            addr = addr.strip("[]").split("%", 1)[0]
            if port.isdigit():
                # (`*` is how ss prints an IPv6 socket on :: that also takes IPv4: the kernel's table says ::, and
                # `listens` counts :: for IPv4 addresses too)
                out.add(("::" if addr == "*" else addr, int(port)))
    return frozenset(out)


def listens(table: Table, host: str, port: int) -> bool:
    """Whether `host:port` is listened on per the table. An IP literal matches itself, the wildcard of its
    family, and (IPv4) the IPv6 wildcard and its mapped form; a host name matches any address (the
    table is the node's own, and a connect confirms it anyway)."""
    wanted = _listen_addresses(host)
    if wanted is None:
        return any(p == port for _, p in table)
    return any((a, port) in table for a in wanted)


@functools.lru_cache(maxsize=4096)
def _listen_addresses(host: str) -> tuple[str, ...] | None:
    """The table's spellings of the addresses a listen must have to serve `host` (None: a host name).
    Cached: the barrier asks for every closed port at every read of the table (642 ports of a 128-node
    run, 20 reads a second), and parsing the address each time was a quarter of the watcher's CPU."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv4Address):
        return (str(ip), "0.0.0.0", "::", f"::ffff:{ip}")
    return (ip.compressed, "::")


def _diag_request(family: int) -> bytes:
    """A netlink sock_diag dump request for TCP sockets of `family` in state LISTEN only (the kernel then
    walks only its listening hash)."""
    # struct inet_diag_req_v2: family, protocol, ext, pad, states; then a zeroed inet_diag_sockid (48 bytes)
    req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN) + bytes(48)
    # struct nlmsghdr: len, type SOCK_DIAG_BY_FAMILY (20), flags NLM_F_REQUEST | NLM_F_DUMP, seq, pid
    return struct.pack("=IHHII", 16 + len(req), 20, 0x1 | 0x300, 1, 0) + req


def read_netlink_table() -> Table:
    """This namespace's listening TCP sockets, over NETLINK_SOCK_DIAG (a few hundred microseconds)."""
    out: set[tuple[str, int]] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4) as s:  # 4: NETLINK_SOCK_DIAG
        for family in (socket.AF_INET, socket.AF_INET6):
            s.send(_diag_request(family))
            done = False
            while not done:
                data, off = s.recv(1 << 16), 0
                if not data:
                    break
                while off + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, off)
                    if kind == 3:  # NLMSG_DONE
                        done = True
                        break
                    if kind == 2:  # NLMSG_ERROR
                        err = struct.unpack_from("=i", data, off + 16)[0]
                        if err:
                            raise OSError(-err, "sock_diag request refused")
                        done = True
                        break
                    m = off + 16  # struct inet_diag_msg: family, state, timer, retrans, then the sockid
                    fam, state = data[m], data[m + 1]
                    port = struct.unpack_from(">H", data, m + 4)[0]
                    raw = data[m + 8:m + 24]
                    if state == TCP_LISTEN:
                        addr = socket.inet_ntop(socket.AF_INET, raw[:4]) if fam == socket.AF_INET \
                            else socket.inet_ntop(socket.AF_INET6, raw)
                        out.add((addr, port))
                    off += (length + 3) & ~3 if length else len(data)
    return frozenset(out)


def read_local_table() -> Table:
    """/proc/net/tcp* of this namespace (the fallback where netlink is not allowed: costly, see above)."""
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

    @property
    def working(self) -> bool:
        """Its last read answered (a barrier may then rely on it to see a port start listening)."""
        return self._last is not None

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


PROC_FALLBACK_S = 1.0  # /proc/net/tcp costs tens of ms of kernel CPU per read: not more often than this


def local_table(cadence: float) -> ListenTable:
    """This network namespace's table: over netlink, read on the loop (it is cheap); where netlink
    sock_diag is not allowed, /proc/net/tcp* in a thread, at most every PROC_FALLBACK_S."""
    try:
        read_netlink_table()
    except OSError:
        return ListenTable(lambda: asyncio.to_thread(read_local_table), max(cadence, PROC_FALLBACK_S))

    async def fetch() -> Table:
        return read_netlink_table()

    return ListenTable(fetch, cadence)


def shell_table(run: Callable[..., Awaitable], cadence: float, where: str) -> ListenTable:
    """A remote node's table through `run(argv, timeout=...)` (the node's persistent shell)."""

    async def fetch() -> Table:
        res = await run(NODE_LISTENING, timeout=10)
        # awk exits 2 when a file is missing: without tcp6 (IPv6 off) the IPv4 table still counts
        if not (res.ok or (res.rc == 2 and "/proc/net/tcp:" not in res.stderr)):
            raise OSError(f"cannot read the socket table on {where}: {res.explain()}")
        return parse_addresses(res.stdout)

    return ListenTable(fetch, cadence, where)
