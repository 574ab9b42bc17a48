"""The server's own timing of each request, read on the wire: a packet capture of one loopback TCP port (the
router's), with the kernel's receive timestamps, independent of every client's event loop and CPU.

For each HTTP POST to the port it writes one JSON line: when the request's first byte reached the server
(`t_post`), when the response headers, the first and the last token event, `[DONE]` and the response's last
byte (`t_end`: a chunked stream's terminating chunk) left it, the token
events it sent (SSE `data:` events whose choice has text), the `usage.completion_tokens` it reported, the
`X-Request-ID` header a client sent (aiperf sends one), and the first 80 characters of the prompt (to match a
request to a dataset line). Times are CLOCK_REALTIME seconds (the kernel's SO_TIMESTAMPNS).

Needs root (AF_PACKET). Only the port's packets reach Python (a classic BPF filter in the kernel), each once
(the loopback's outgoing copy is dropped). Runs until SIGTERM or SIGINT, then prints its own CPU seconds.

    python bench/wire.py PORT OUT.jsonl
"""

from __future__ import annotations

import ctypes
import json
import re
import resource
import signal
import socket
import struct
import sys

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35
PACKET_OUTGOING = 4
PROMPT = re.compile(rb'"prompt"\s*:\s*"((?:[^"\\]|\\.){0,80})')
REQUEST_ID = re.compile(rb"\r\nx-request-id:\s*([^\r\n]+)", re.I)


def bpf_tcp_port(port: int) -> list[tuple[int, int, int, int]]:
    """`ip and tcp and (src port P or dst port P)` on an Ethernet frame (loopback's AF_PACKET frames are), not
    fragments; accept the whole packet."""
    return [
        (0x28, 0, 0, 12), (0x15, 0, 10, 0x0800),            # ldh [12]; ethertype IPv4 else drop
        (0x30, 0, 0, 23), (0x15, 0, 8, 6),                  # ldb [23]; protocol TCP else drop
        (0x28, 0, 0, 20), (0x45, 6, 0, 0x1FFF),             # ldh [20]; a fragment: drop
        (0xB1, 0, 0, 14),                                   # ldxb 4*([14]&0xf): the IP header's length
        (0x48, 0, 0, 14), (0x15, 2, 0, port),               # ldh [x+14]: source port
        (0x48, 0, 0, 16), (0x15, 0, 1, port),               # ldh [x+16]: destination port
        (0x06, 0, 0, 0x40000), (0x06, 0, 0, 0),             # accept / drop
    ]


def attach(sock: socket.socket, prog: list[tuple[int, int, int, int]]) -> None:
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw)
    fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    attach.keep = buf  # type: ignore[attr-defined]  # the kernel copied it; kept anyway until exit


class Conn:
    """One client connection: the request under way, its response bytes (de-chunked) and what they said."""

    def __init__(self, out, port: int):
        self.out, self.port = out, port
        self.req: dict | None = None
        self.req_bytes = b""
        self.resp = b""
        self.head_done = False
        self.chunked = False
        self.body = b""
        self.next_seq: dict[bool, int] = {}  # per direction (True: client -> server), the next byte expected

    def from_client(self, t: float, data: bytes) -> None:
        if data[:5] == b"POST " or data[:4] in (b"GET ", b"PUT ") or data[:7] == b"DELETE ":
            self.finish()
            if data[:5] == b"POST ":
                self.req = {"port": self.port, "t_post": t, "t_head": None, "t_first": None, "t_last": None,
                            "t_done": None, "t_end": None, "events": 0, "usage": None, "request_id": None, "prompt": None}
            self.req_bytes, self.resp, self.head_done, self.body = b"", b"", False, b""
        if self.req is not None and self.req["prompt"] is None and len(self.req_bytes) < 16384:
            self.req_bytes += data
            if self.req["request_id"] is None and (m := REQUEST_ID.search(self.req_bytes)):
                self.req["request_id"] = m.group(1).decode(errors="replace").strip()
            if (m := PROMPT.search(self.req_bytes)) is not None:
                self.req["prompt"] = m.group(1).decode(errors="replace")

    def from_server(self, t: float, data: bytes) -> None:
        if self.req is None:
            return
        self.req["t_end"] = t  # the response's last byte so far (a chunked stream's end follows [DONE])
        if self.req["t_done"] is not None:
            return
        if not self.head_done:
            self.resp += data
            end = self.resp.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head_done = True
            self.req["t_head"] = t
            self.chunked = b"transfer-encoding: chunked" in self.resp[:end].lower()
            data, self.resp = self.resp[end + 4:], b""
        self.resp += data
        if self.chunked:  # de-chunk what is complete
            while True:
                nl = self.resp.find(b"\r\n")
                if nl < 0:
                    break
                size = int(self.resp[:nl].split(b";")[0] or b"0", 16)
                if len(self.resp) < nl + 2 + size + 2:
                    break
                self.body += self.resp[nl + 2:nl + 2 + size]
                self.resp = self.resp[nl + 2 + size + 2:]
        else:
            self.body, self.resp = self.body + self.resp, b""
        while (end := self.body.find(b"\n\n")) >= 0:
            event, self.body = self.body[:end], self.body[end + 2:]
            self.event(t, event)

    def event(self, t: float, event: bytes) -> None:
        assert self.req is not None
        for line in event.split(b"\n"):
            if line[:5] != b"data:":
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.req["t_done"] = t  # written when the next request or the connection's end comes
                return
            try:
                d = json.loads(payload)
            except ValueError:
                continue
            choices = d.get("choices") or ()
            c = choices[0] if choices else {}
            text = c.get("text") or (c.get("delta") or {}).get("content")
            if text:
                self.req["events"] += 1
                self.req["t_last"] = t
                if self.req["t_first"] is None:
                    self.req["t_first"] = t
            if d.get("usage"):
                self.req["usage"] = d["usage"].get("completion_tokens")

    def finish(self) -> None:
        if self.req is not None:
            self.out.write(json.dumps(self.req) + "\n")
            self.out.flush()  # read while the capture runs
        self.req = None


def main(port: int, path: str) -> None:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    attach(sock, bpf_tcp_port(port))
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
    sock.bind(("lo", 0))
    sock.settimeout(0.2)  # a signal does not interrupt a blocking receive (PEP 475): look at `stop` this often
    stop = False

    def halt(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, halt)
    signal.signal(signal.SIGINT, halt)
    conns: dict[int, Conn] = {}
    packets = dup = 0
    with open(path, "w") as out:
        print("ready", flush=True)
        while not stop:
            try:
                data, anc, _flags, addr = sock.recvmsg(1 << 18, 64)
            except TimeoutError:
                continue
            if addr[2] == PACKET_OUTGOING:
                continue  # loopback: the same packet comes back in
            t = next((struct.unpack("ll", d[:16]) for lvl, typ, d in anc if typ == SO_TIMESTAMPNS), None)
            ts = t[0] + t[1] / 1e9 if t else 0.0
            ihl = (data[14] & 0x0F) * 4
            tcp = 14 + ihl
            sport, dport = struct.unpack("!HH", data[tcp:tcp + 4])
            total = struct.unpack("!H", data[16:18])[0]
            payload = data[tcp + (data[tcp + 12] >> 4) * 4:14 + total]
            packets += 1
            client = sport if dport == port else dport
            conn = conns.setdefault(client, Conn(out, client))
            seq = struct.unpack("!I", data[tcp + 4:tcp + 8])[0]
            way = dport == port
            if payload and way in conn.next_seq and (seq - conn.next_seq[way]) % (1 << 32) > 1 << 31:
                dup += 1  # a retransmission (or a copy) of bytes already taken
                continue
            if payload:
                conn.next_seq[way] = (seq + len(payload)) % (1 << 32)
                if dport == port:
                    conn.from_client(ts, payload)
                else:
                    conn.from_server(ts, payload)
            if data[tcp + 13] & 0x05:  # FIN or RST: the connection's last request is complete
                conn.finish()
                conns.pop(client, None)
        for c in conns.values():
            c.finish()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"packets": packets, "duplicates": dup, "cpu_s": round(ru.ru_utime + ru.ru_stime, 3)}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
