"""A small HTTP/1.1 server and client on asyncio streams, with SSE streaming.

Enough HTTP for the simulated ATOM server and AToMesh router: request bodies with
Content-Length, keep-alive, responses with Content-Length or chunked transfer encoding
(server-sent events), and a client that reads either, or streams chunks as they arrive.
"""

from __future__ import annotations

import asyncio
import json
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

REASONS = {
    200: "OK", 202: "Accepted", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
    411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Entity",
    429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}
MAX_HEAD = 64 * 1024


def reason(status: int) -> str:
    return REASONS.get(status, "Unknown")


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    peer: str

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8") or "null")


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    stream: AsyncIterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(obj).encode())


def text_response(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), "text/plain; charset=utf-8")


def sse_response(chunks: AsyncIterator[bytes]) -> Response:
    return Response(200, b"", "text/event-stream", chunks)


Handler = Callable[[Request], Awaitable[Response]]
AccessLog = Callable[[Request, int], None]


class HttpServer:
    """Routes ``(method, path)`` to handlers; unknown paths get 404, wrong methods 405."""

    def __init__(self, routes: dict[tuple[str, str], Handler], access_log: AccessLog | None = None):
        self.routes = routes
        self.access_log = access_log
        self.server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted = 0  # connections accepted (a kept-alive client opens one per endpoint)

    async def start(self, host: str, port: int) -> None:
        """Bind and listen (raises OSError when the address is taken)."""
        self.server = await asyncio.start_server(
            self._serve, host, port, reuse_address=True, limit=MAX_HEAD)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        peername = writer.get_extra_info("peername") or ("?", 0)
        peer = f"{peername[0]}:{peername[1]}"
        try:
            while True:
                request = await self._read_request(reader, peer)
                if request is None:
                    break
                keep_alive = request.headers.get("connection", "").lower() != "close"
                response = await self._dispatch(request)
                if self.access_log:             # uvicorn logs when the response starts
                    self.access_log(request, response.status)
                await self._write_response(writer, response, keep_alive)
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader, peer: str) -> Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _read_chunked(reader)
        elif "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        path, _, query = target.partition("?")
        return Request(method.upper(), path, query, headers, body, peer)

    async def _dispatch(self, request: Request) -> Response:
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            if any(path == request.path for (_m, path) in self.routes):
                return json_response({"detail": "Method Not Allowed"}, 405)
            return json_response({"detail": "Not Found"}, 404)
        try:
            return await handler(request)
        except json.JSONDecodeError as e:
            return json_response({"detail": f"Invalid JSON body: {e}"}, 400)
        except Exception as e:
            traceback.print_exc()
            return json_response({"detail": f"{type(e).__name__}: {e}"}, 500)

    async def _write_response(self, writer: asyncio.StreamWriter, response: Response, keep_alive: bool) -> None:
        headers = {"content-type": response.content_type, **response.headers}
        headers["connection"] = "keep-alive" if keep_alive else "close"
        if response.stream is None:
            headers["content-length"] = str(len(response.body))
        else:
            headers["transfer-encoding"] = "chunked"
            headers.setdefault("cache-control", "no-cache")
        head = f"HTTP/1.1 {response.status} {reason(response.status)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1"))
        if response.stream is None:
            writer.write(response.body)
            await writer.drain()
            return
        try:
            async for chunk in response.stream:
                if chunk:
                    writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            aclose = getattr(response.stream, "aclose", None)
            if aclose is not None:
                await aclose()


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    async for chunk in _iter_chunked(reader):
        parts.append(chunk)
    return b"".join(parts)


async def _iter_chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


class ClientError(Exception):
    """A request that never got an HTTP answer (refused, reset, timed out)."""


@dataclass
class ClientResponse:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    chunks: AsyncIterator[bytes] | None = None
    _writer: asyncio.StreamWriter | None = None

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8") or "null")

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    async def read(self) -> bytes:
        """Read the rest of a streamed body."""
        if self.chunks is not None:
            self.body = b"".join([c async for c in self.chunks])
            self.chunks = None
        return self.body

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _describe(url: str, exc: BaseException) -> str:
    """A reqwest-like description of a transport error."""
    if isinstance(exc, asyncio.TimeoutError):
        return f"error sending request for url ({url}): operation timed out"
    if isinstance(exc, (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError)):
        return f"error sending request for url ({url}): connection closed before message completed"
    if isinstance(exc, ConnectionRefusedError):
        return (f"error sending request for url ({url}): client error (Connect): "
                f"tcp connect error: Connection refused (os error 111)")
    if isinstance(exc, OSError) and exc.errno:
        return f"error sending request for url ({url}): client error (Connect): {exc.strerror} (os error {exc.errno})"
    return f"error sending request for url ({url}): {type(exc).__name__}: {exc}"


async def request(method: str, url: str, body: Any = None, *, timeout: float = 30.0,
                  stream: bool = False, headers: dict[str, str] | None = None) -> ClientResponse:
    """Send one request on a fresh connection. ``stream=True`` leaves the body in ``chunks``."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    payload = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    all_headers = {"host": f"{host}:{port}", "connection": "close", "accept": "*/*"}
    if body is not None:
        all_headers["content-type"] = "application/json"
    all_headers["content-length"] = str(len(payload))
    all_headers.update(headers or {})
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in all_headers.items()) + "\r\n"
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=MAX_HEAD), timeout)
        writer.write(head.encode("latin-1") + payload)
        await writer.drain()
        status, resp_headers = await asyncio.wait_for(_read_head(reader), timeout)
    except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as e:
        if writer is not None:
            writer.close()
        raise ClientError(_describe(url, e)) from e
    chunks = _body_chunks(reader, resp_headers, timeout, url)
    response = ClientResponse(status, resp_headers, chunks=chunks, _writer=writer)
    if not stream:
        try:
            await response.read()
        finally:
            response.close()
    return response


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    headers = {}
    for line in head[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def _body_chunks(reader: asyncio.StreamReader, headers: dict[str, str], timeout: float,
                       url: str) -> AsyncIterator[bytes]:
    try:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            iterator = _iter_chunked(reader).__aiter__()
            while True:
                try:
                    chunk = await asyncio.wait_for(iterator.__anext__(), timeout)
                except StopAsyncIteration:
                    return
                yield chunk
        elif "content-length" in headers:
            yield await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout)
        else:
            while data := await asyncio.wait_for(reader.read(65536), timeout):
                yield data
    except (TimeoutError, OSError, asyncio.IncompleteReadError) as e:
        raise ClientError(_describe(url, e)) from e


async def get_json(url: str, timeout: float = 5.0) -> tuple[int, Any]:
    """GET a JSON document; returns (status, parsed body or raw text)."""
    response = await request("GET", url, timeout=timeout)
    try:
        return response.status, response.json()
    except ValueError:
        return response.status, response.text()
