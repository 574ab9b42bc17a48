"""Reading a node's listening sockets from /proc/net/tcp and tcp6 (core/remote/listening.py)."""

from __future__ import annotations

import socket
import subprocess

from atomdeck.core.remote.listening import (
    AWK_LISTENING,
    NODE_LISTENING,
    hex_addr,
    listens,
    parse_addresses,
    parse_proc_net_tcp,
    read_local_table,
    read_netlink_table,
)

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0B15007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 00000000:189D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0B15007F:8A2C 0B15007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000
   1: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000
   2: 0000000000000000FFFF00000C15007F:1F92 00000000000000000000000000000000:0000 0A 00000000:00000000
"""


def test_the_kernel_table_is_parsed_listening_sockets_only():
    t = parse_proc_net_tcp(TCP + TCP6)
    assert t == {("127.0.21.11", 8000), ("0.0.0.0", 6301), ("::", 8080), ("::1", 8081),
                 ("::ffff:127.0.21.12", 8082)}  # the established connection (st 01) is not a listen
    assert hex_addr("garbage") is None and hex_addr("0100007F:zz") is None


def test_a_cell_matches_its_own_address_or_a_wildcard_never_a_neighbours():
    t = parse_proc_net_tcp(TCP + TCP6)
    assert listens(t, "127.0.21.11", 8000)
    assert not listens(t, "127.0.21.12", 8000)  # another node of the local cluster
    assert listens(t, "127.0.21.99", 6301) and listens(t, "10.0.0.1", 8080)  # 0.0.0.0 and :: cover IPv4
    assert listens(t, "127.0.21.12", 8082)  # an IPv4-mapped listen
    assert listens(t, "::1", 8081) and not listens(t, "::2", 8081)
    assert listens(t, "node-a", 8000) and not listens(t, "node-a", 9)  # a host name: any local address


def test_a_cells_address_is_parsed_once_not_at_every_read_of_the_table(monkeypatch):
    """The barrier asks `listens` for each closed port at each read (642 ports, 20 reads a second at 128
    nodes): parsing the address every time was a quarter of the watcher's CPU while such a run came up."""
    import ipaddress

    from atomdeck.core.remote import listening

    parsed: list[str] = []
    real = ipaddress.ip_address

    def counting(host):
        parsed.append(host)
        return real(host)

    monkeypatch.setattr(listening.ipaddress, "ip_address", counting)
    listening._listen_addresses.cache_clear()
    t = parse_proc_net_tcp(TCP + TCP6)
    for _ in range(20):
        assert listens(t, "127.0.21.11", 8000) and not listens(t, "127.0.21.12", 8000)
        assert not listens(t, "127.0.21.11", 8001)  # another port of the same address: parsed already
    assert sorted(parsed) == ["127.0.21.11", "127.0.21.12"]


def test_ss_lines_are_parsed_too():
    out = ("LISTEN 0      128    127.0.21.11:8000 0.0.0.0:*\n"
           "LISTEN 0      4096         [::]:8080    [::]:*\n"
           "LISTEN 0      511             *:6301       *:*\n"
           "LISTEN 0      4096 127.0.0.53%lo:53   0.0.0.0:*\n")
    assert parse_addresses(out) == {("127.0.21.11", 8000), ("::", 8080), ("::", 6301), ("127.0.0.53", 53)}
    assert listens(parse_addresses(out), "127.0.21.12", 6301)  # (`*`: IPv6 and IPv4 on one socket)


def test_netlink_proc_awk_and_the_node_command_agree_on_a_real_listen():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    try:
        assert not listens(read_netlink_table(), "127.0.0.1", port)  # bound, not listening
        s.listen()
        assert listens(read_netlink_table(), "127.0.0.1", port)
        for reader in (read_local_table, AWK_LISTENING, NODE_LISTENING):  # /proc/net/tcp*, a node's ss or awk
            # (the machine's other programs open and close ports meanwhile: compare only with the kernel's table
            # unchanged around the read, a few tries)
            for _ in range(20):
                before = read_netlink_table()
                got = reader() if callable(reader) else parse_addresses(
                    subprocess.run(reader, capture_output=True, text=True).stdout)
                if read_netlink_table() == before:
                    break
            assert got == before, reader
    finally:
        s.close()


def test_a_nodes_table_through_its_shell_is_what_the_kernel_says():
    """What the ssh launcher's listen_table runs in the node's persistent shell (here: a local runner)."""
    import asyncio

    from atomdeck.core.remote.listening import shell_table
    from atomdeck.core.remote.shell import LocalRunner

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        table = shell_table(LocalRunner().run, 0.5, "here")
        got = asyncio.run(table.read())
        assert got == read_netlink_table() and listens(got, "127.0.0.1", s.getsockname()[1])
    finally:
        s.close()
