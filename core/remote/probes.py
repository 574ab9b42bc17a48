"""TCP and HTTP probes, made through a Runner so they work from here or through a login host.

One small HTTP/1.1 client: h11 parses, asyncio streams carry the bytes, so the same code runs over a
local socket and over an SSH direct-tcpip channel through a login host. `http_get`/`http_post` make one
request on a connection of its own; `HttpClient` keeps one connection per endpoint for the watchers'
steady checks and scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import h11

from .shell import LocalRunner, Runner

_LOCAL = LocalRunner()
MAX_HEAD = 64 * 1024  # a status line and headers longer than this are not an answer we can use
READ_SIZE = 64 * 1024
# h11's Request validates its headers when made (~8 % of the watcher's samples at 128 nodes, issue 19); the
# same GET to the same endpoint is made again every second or two: made once, its (immutable) event is reused
_REQUESTS: dict[tuple[str, str, str], h11.Request] = {}


async def tcp_probe(host: str, port: int, timeout: float = 1.0, runner: Runner | None = None) -> str:
    """'open', 'refused', 'timeout' or 'unreachable'. A timeout is tried once more before it is believed:
    on a busy machine the wait can include the event loop's own delay."""
    result = await _tcp_probe(host, port, timeout, runner)
    if result == "timeout":
        result = await _tcp_probe(host, port, timeout * 2, runner)
    return result


def connect_failed(e: BaseException) -> str:
    """The word for a connect that failed with `e`: "timeout", "refused" or "unreachable". An SSH channel's
    open failure reads like a refusal. (The probes here and node_probes.connect_here both answer with it.)"""
    if isinstance(e, TimeoutError) or getattr(e, "errno", None) == errno.ETIMEDOUT:
        return "timeout"
    if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
        return "refused"
    text = str(e).lower()
    if "refused" in text or (not isinstance(e, OSError) and "open failed" in text):
        return "refused"
    return "unreachable"


async def _tcp_probe(host: str, port: int, timeout: float, runner: Runner | None) -> str:
    runner = runner or _LOCAL
    try:
        async with asyncio.timeout(timeout):
            _, writer = await runner.open_connection(host, port)
    except Exception as e:
        return connect_failed(e)
    writer.close()
    try:
        async with asyncio.timeout(0.5):
            await writer.wait_closed()
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
    return await _answer(_request(runner or _LOCAL, host, port, method, path, body), timeout)


async def _answer(exchange: Awaitable[HttpResult], timeout: float) -> HttpResult:
    """An exchange within `timeout`, network trouble turned into status 0 with a reason. A cancellation
    of the caller is not trouble: it propagates."""
    try:
        async with asyncio.timeout(timeout):
            return await exchange
    except TimeoutError:
        return HttpResult(0, error=f"no answer within {timeout:g}s")
    except (OSError, h11.ProtocolError, ValueError) as e:
        return HttpResult(0, error=str(e) or type(e).__name__)
    except Exception as e:  # SSH channel errors
        return HttpResult(0, error=str(e) or type(e).__name__)


async def _request(runner: Runner, host: str, port: int, method: str, path: str, body: Any) -> HttpResult:
    conn = await _Conn.open(runner, host, port)
    try:
        return await conn.exchange(host, port, method, path, body, keep_alive=False)
    finally:
        conn.close()


class _Conn:
    """One connection and its h11 state machine (sans-IO): we only move bytes between it and the stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.received = 0  # bytes of the current exchange's answer

    @classmethod
    async def open(cls, runner: Runner, host: str, port: int) -> _Conn:
        return cls(*await runner.open_connection(host, port))

    async def exchange(self, host: str, port: int, method: str, path: str, body: Any, keep_alive: bool
                       ) -> HttpResult:
        conn = self.h11
        self.received = 0
        payload = b"" if body is None else json.dumps(body).encode()
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        headers = [("Host", authority), ("Accept", "*/*"), ("User-Agent", "atomdeck")]
        if not keep_alive:
            headers.insert(1, ("Connection", "close"))
        if body is not None:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
        if body is None and keep_alive:  # the watchers' steady GETs: one Request per endpoint and path
            key = (method, path, authority)
            request = _REQUESTS.get(key)
            if request is None:
                request = _REQUESTS[key] = h11.Request(method=method, target=path, headers=headers)
                if len(_REQUESTS) > 4096:
                    _REQUESTS.pop(next(iter(_REQUESTS)))
        else:
            request = h11.Request(method=method, target=path, headers=headers)
        out = conn.send(request) or b""
        if payload:
            out += conn.send(h11.Data(data=payload)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        self.writer.write(out)
        await self.writer.drain()
        status, data = 0, bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                chunk = await self.reader.read(READ_SIZE)
                self.received += len(chunk)
                conn.receive_data(chunk)  # b"" tells h11 the peer closed
            elif isinstance(event, h11.Response):  # 1xx (InformationalResponse) are passed over
                status = event.status_code
            elif isinstance(event, h11.Data):
                data += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                if not status:
                    raise ConnectionError("closed without an answer")
                return HttpResult(status, bytes(data))

    def next_cycle(self) -> bool:
        """Both sides done with a keep-alive exchange: ready it for the next one. False (not reusable) after
        `Connection: close`, an HTTP/1.0 answer, a body ended by closing, or an error."""
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            return True
        return False

    def stale(self) -> bool:
        """The peer closed it while it sat idle (its FIN read), or it is closing."""
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(0.5):
                await self.writer.wait_closed()


IDEMPOTENT = frozenset({"GET", "HEAD"})


class HttpClient:
    """Requests that reuse one kept-alive connection per endpoint (issue 19: a connect per health check and
    metrics scrape was most of the watcher's HTTP cost at 32 nodes). Same answers as `http_request`.

    Hand-written on h11 like the one-shot client, not aiohttp/httpx: a connection must come from the
    launcher's Runner (a local socket, or an SSH direct-tcpip channel through the login host); both of
    those libraries open their own sockets, and an SSH channel would need a custom transport for each.
    h11 already parses; what keeping connections needs is the ~60 lines below.

    - An idle connection the server closed (its FIN seen) is dropped and a new one opened; idle
      connections to servers that went away are let go within a second of any other request.
    - A GET on a reused connection that fails before any byte of an answer arrived (the server closed it as
      the request went out) is sent once more on a new connection; other errors and timeouts close the
      connection, and the next request opens a new one.
    - Two requests to one endpoint at once: the second opens a connection of its own, kept only while the
      first is busy (at most one idle connection per endpoint).
    - A cancellation closes the connection of the request it interrupts and propagates; `aclose` closes
      every connection, idle or busy (a busy request then answers status 0)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str, int], _Conn] = {}
        self._busy: set[_Conn] = set()
        self._generation = 0  # bumped by aclose: what was in flight then is neither kept nor tried again
        self._pruned = 0.0

    async def request(self, host: str, port: int, method: str, path: str, body: Any = None, timeout: float = 3.0,
                      runner: Runner | None = None) -> HttpResult:
        return await _answer(self._request(runner or _LOCAL, host, port, method, path, body), timeout)

    async def get(self, host: str, port: int, path: str, timeout: float = 3.0,
                  runner: Runner | None = None) -> HttpResult:
        return await self.request(host, port, "GET", path, None, timeout, runner)

    async def post(self, host: str, port: int, path: str, body: Any, timeout: float = 30.0,
                   runner: Runner | None = None) -> HttpResult:
        return await self.request(host, port, "POST", path, body, timeout, runner)

    def connections(self) -> int:
        """Open connections, idle and busy."""
        return len(self._idle) + len(self._busy)

    async def _request(self, runner: Runner, host: str, port: int, method: str, path: str, body: Any
                       ) -> HttpResult:
        self._prune()
        key, generation = (runner.where, host, port), self._generation
        kept = self._idle.pop(key, None)
        if kept is not None and kept.stale():
            kept.close()
            kept = None
        for attempt in range(2):
            conn = kept if attempt == 0 and kept is not None else await _Conn.open(runner, host, port)
            self._busy.add(conn)
            try:
                result = await conn.exchange(host, port, method, path, body, keep_alive=True)
            except (OSError, h11.ProtocolError):
                conn.close()
                if conn is kept and not conn.received and method in IDEMPOTENT and generation == self._generation:
                    continue  # sent on a connection the server had just closed: once more, on a new one
                raise
            except BaseException:  # a timeout, a cancellation: the exchange is half done
                conn.close()
                raise
            finally:
                self._busy.discard(conn)
            if generation == self._generation and key not in self._idle and conn.next_cycle():
                self._idle[key] = conn
            else:
                conn.close()
            return result
        raise AssertionError("unreachable")

    def _prune(self) -> None:
        """At most once a second: let go of idle connections their server closed (a process that ended),
        so none waits half-closed until the watch ends."""
        now = time.monotonic()
        if now - self._pruned < 1.0:
            return
        self._pruned = now
        for key in [k for k, c in self._idle.items() if c.stale()]:
            self._idle.pop(key).close()

    async def aclose(self) -> None:
        """Close every connection, idle or busy, and wait until their sockets are closed. The client can be
        used again afterwards (it opens new connections)."""
        self._generation += 1
        conns = [*self._idle.values(), *self._busy]
        self._idle.clear()
        for c in conns:
            c.close()
        await asyncio.gather(*(c.wait_closed() for c in conns))


async def http_get(host: str, port: int, path: str, timeout: float = 3.0, runner: Runner | None = None) -> HttpResult:
    return await http_request(host, port, "GET", path, None, timeout, runner)


async def http_post(host: str, port: int, path: str, body: Any, timeout: float = 30.0,
                    runner: Runner | None = None) -> HttpResult:
    return await http_request(host, port, "POST", path, body, timeout, runner)
