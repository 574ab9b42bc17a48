"""TCP and HTTP probes, made through a Runner so they work from here or through a login host.

A tiny HTTP/1.1 client on asyncio streams: the same code runs over a local socket and over an SSH
direct-tcpip channel.
"""

from __future__ import annotations

import asyncio
import errno
import json
from dataclasses import dataclass
from typing import Any

from .shell import LocalRunner, Runner

_LOCAL = LocalRunner()


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
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        return HttpResult(0, error=str(e) or type(e).__name__)
    except Exception as e:  # SSH channel errors
        return HttpResult(0, error=str(e) or type(e).__name__)


async def _request(runner: Runner, host: str, port: int, method: str, path: str, body: Any) -> HttpResult:
    reader, writer = await runner.open_connection(host, port)
    try:
        payload = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close", "Accept: */*",
                "User-Agent: atomdeck"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError(f"not an HTTP answer: {status_line[:60]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int((await reader.readline()).strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    break
                data += await reader.readexactly(size)
                await reader.readline()
        elif "content-length" in headers:
            data = await reader.readexactly(int(headers["content-length"]))
        else:
            data = await reader.read()
        return HttpResult(status, data)
    finally:
        writer.close()


async def http_get(host: str, port: int, path: str, timeout: float = 3.0, runner: Runner | None = None) -> HttpResult:
    return await http_request(host, port, "GET", path, None, timeout, runner)


async def http_post(host: str, port: int, path: str, body: Any, timeout: float = 30.0,
                    runner: Runner | None = None) -> HttpResult:
    return await http_request(host, port, "POST", path, body, timeout, runner)
