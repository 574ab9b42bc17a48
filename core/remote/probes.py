"""TCP and HTTP probes, made through a Runner so they work from here or through a login host.

One small HTTP/1.1 client: h11 parses, asyncio streams carry the bytes, so the same code runs over a
local socket and over an SSH direct-tcpip channel through a login host.
"""

from __future__ import annotations

import asyncio
import errno
import json
from dataclasses import dataclass
from typing import Any

import h11

from .shell import LocalRunner, Runner

_LOCAL = LocalRunner()
MAX_HEAD = 64 * 1024  # a status line and headers longer than this are not an answer we can use
READ_SIZE = 64 * 1024


async def tcp_probe(host: str, port: int, timeout: float = 1.0, runner: Runner | None = None) -> str:
    """'open', 'refused', 'timeout' or 'unreachable'. A timeout is tried once more before it is believed:
    on a busy machine the wait can include the event loop's own delay."""
    result = await _tcp_probe(host, port, timeout, runner)
    if result == "timeout":
        result = await _tcp_probe(host, port, timeout * 2, runner)
    return result


async def _tcp_probe(host: str, port: int, timeout: float, runner: Runner | None) -> str:
    runner = runner or _LOCAL
    try:
        _, writer = await asyncio.wait_for(runner.open_connection(host, port), timeout)
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        if e.errno in (errno.ECONNREFUSED,):
            return "refused"
        if e.errno in (errno.ETIMEDOUT,):
            return "timeout"
        return "refused" if "refused" in str(e).lower() else "unreachable"
    except Exception as e:  # an SSH channel open failure reads like a refusal
        return "refused" if "refused" in str(e).lower() or "open failed" in str(e).lower() else "unreachable"
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), 0.5)
    except (TimeoutError, OSError, Exception):
        pass
    return "open"


@dataclass
class HttpResult:
    status: int  # 0 when no HTTP answer came back
    body: bytes = b""
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8", "replace"))
        except ValueError:
            return None

    def text(self, limit: int = 300) -> str:
        t = self.body.decode("utf-8", "replace").strip()
        return t if len(t) <= limit else t[:limit] + "..."


async def http_request(host: str, port: int, method: str, path: str, body: Any = None, timeout: float = 3.0,
                       runner: Runner | None = None) -> HttpResult:
    """One HTTP/1.1 request with Connection: close. Never raises for network trouble."""
    runner = runner or _LOCAL
    try:
        return await asyncio.wait_for(_request(runner, host, port, method, path, body), timeout)
    except TimeoutError:
        return HttpResult(0, error=f"no answer within {timeout:g}s")
    except (OSError, h11.ProtocolError, ValueError) as e:
        return HttpResult(0, error=str(e) or type(e).__name__)
    except Exception as e:  # SSH channel errors
        return HttpResult(0, error=str(e) or type(e).__name__)


async def _request(runner: Runner, host: str, port: int, method: str, path: str, body: Any) -> HttpResult:
    """The exchange itself, parsed by h11 (sans-IO): we only move bytes between it and the stream."""
    reader, writer = await runner.open_connection(host, port)
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    try:
        payload = b"" if body is None else json.dumps(body).encode()
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        headers = [("Host", authority), ("Connection", "close"), ("Accept", "*/*"), ("User-Agent", "atomdeck")]
        if body is not None:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
        out = conn.send(h11.Request(method=method, target=path, headers=headers)) or b""
        if payload:
            out += conn.send(h11.Data(data=payload)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        writer.write(out)
        await writer.drain()
        status, data = 0, bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(READ_SIZE))  # b"" tells h11 the peer closed
            elif isinstance(event, h11.Response):  # 1xx (InformationalResponse) are passed over
                status = event.status_code
            elif isinstance(event, h11.Data):
                data += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return HttpResult(status, bytes(data), "" if status else "closed without an answer")
    finally:
        writer.close()


async def http_get(host: str, port: int, path: str, timeout: float = 3.0, runner: Runner | None = None) -> HttpResult:
    return await http_request(host, port, "GET", path, None, timeout, runner)


async def http_post(host: str, port: int, path: str, body: Any, timeout: float = 30.0,
                    runner: Runner | None = None) -> HttpResult:
    return await http_request(host, port, "POST", path, body, timeout, runner)
