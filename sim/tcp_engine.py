"""A stand-in for Mooncake's TransferEngine when the real one cannot load on this machine.

Mooncake's CPU wheel needs Debian's libibverbs1; a demo on a fresh machine without root may not
have it. Then the simulator still moves the real KV bytes between prefill and decode, over a plain
TCP connection, with the same calls (initialize, get_rpc_port, batch_register_memory,
get_first_buffer_address, batch_transfer_sync_write) and the same return codes (0 / -1). The
tests run with the real engine; this exists so the demo works anywhere.
"""

from __future__ import annotations

import ctypes
import json
import socket
import socketserver
import threading


class TcpTransferEngine:
    def __init__(self) -> None:
        self.regions: list[tuple[int, int]] = []
        self.server: socketserver.ThreadingTCPServer | None = None

    def initialize(self, ip: str, metadata: str, protocol: str, device: str) -> int:
        engine = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                head = json.loads(self.rfile.readline() or b"{}")
                if head.get("op") == "first":
                    self.wfile.write(f"{engine.regions[0][0] if engine.regions else 0}\n".encode())
                    return
                if head.get("op") != "write":
                    return
                ok = True
                data = self.rfile.read(sum(head["sizes"]))
                offset = 0
                for dst, size in zip(head["dsts"], head["sizes"]):
                    chunk = data[offset:offset + size]
                    offset += size
                    if len(chunk) != size or not engine._inside(dst, size):
                        ok = False
                        continue
                    ctypes.memmove(dst, chunk, size)
                self.wfile.write(b"0\n" if ok else b"-1\n")

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        try:
            self.server = socketserver.ThreadingTCPServer((ip, 0), Handler)
        except OSError:
            return -1
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return 0

    def _inside(self, addr: int, size: int) -> bool:
        return any(base <= addr and addr + size <= base + length for base, length in self.regions)

    def get_rpc_port(self) -> int:
        return self.server.server_address[1] if self.server else 0

    def batch_register_memory(self, ptrs: list[int], sizes: list[int]) -> int:
        self.regions.extend(zip(ptrs, sizes))
        return 0

    def _ask(self, target: str, head: dict, payload: list[bytes] = ()) -> str:
        host, _, port = target.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=5) as s:
                # No Nagle: the payload's last small segment must not wait for a delayed ACK (40 ms).
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.sendall((json.dumps(head) + "\n").encode() + b"".join(payload))
                return s.makefile("rb").readline().decode().strip()
        except (OSError, ValueError):
            return ""

    def get_first_buffer_address(self, target: str) -> int:
        answer = self._ask(target, {"op": "first"})
        return int(answer) if answer.isdigit() else 0

    def batch_transfer_sync_write(self, target: str, srcs: list[int], dsts: list[int], sizes: list[int]) -> int:
        payload = [ctypes.string_at(src, size) for src, size in zip(srcs, sizes)]
        answer = self._ask(target, {"op": "write", "dsts": dsts, "sizes": sizes}, payload)
        return 0 if answer == "0" else -1
