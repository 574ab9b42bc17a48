"""The watchers' HTTP client keeps one connection per endpoint (issue 19): real HTTP to real servers on
loopback (the simulator's HTTP server, and raw asyncio servers), connections counted where they are
accepted, sockets counted in /proc/self/fd."""

from __future__ import annotations

import asyncio
import os

import pytest
from atomdeck.core.remote.probes import HttpClient
from atomdeck.core.run.watchers.metrics import ATOM_NAMES, ROUTER_NAMES, parse, parse_wanted
from atomdeck.sim.httpd import HttpServer, Request, Response, json_response
from atomdeck.sim.metrics import AtomMetrics, MeshMetrics

HOST = "127.0.0.1"


def open_sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


async def sockets_back_to(n: int) -> int:
    """Open sockets once this process's closings have run (a closed transport lets go of its socket on a
    later turn of the loop); at most 5 s."""
    for _ in range(500):
        if open_sockets() <= n:
            break
        await asyncio.sleep(0.01)
    return open_sockets()


class Counting:
    """The simulator's HTTP server (keep-alive capable; it counts the connections it accepts), counting the
    requests to /health."""

    def __init__(self, routes=None):
        async def health(req: Request) -> Response:
            self.requests += 1
            return json_response({"status": "ok", "n": self.requests})

        self.srv = HttpServer(routes or {("GET", "/health"): health})
        self.requests = 0

    @property
    def accepted(self) -> int:
        return self.srv.accepted

    async def __aenter__(self) -> int:
        await self.srv.start(HOST, 0)
        assert self.srv.server is not None
        return self.srv.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc) -> None:
        await self.srv.close()
        assert self.srv.server is not None
        await self.srv.server.wait_closed()


async def test_many_requests_go_over_one_connection():
    before = open_sockets()
    server = Counting()
    async with server as port:
        http = HttpClient()
        for i in range(20):
            r = await http.get(HOST, port, "/health", timeout=3.0)
            assert (r.status, r.json()) == (200, {"status": "ok", "n": i + 1})
        assert server.accepted == 1 and server.requests == 20
        await http.aclose()
    assert await sockets_back_to(before) == before


async def test_a_connection_the_server_closed_is_opened_again_on_the_next_request():
    server = Counting()
    async with server as port:
        http = HttpClient()
        assert (await http.get(HOST, port, "/health")).status == 200
        for w in list(server.srv._writers):  # the server drops its idle connection (a keep-alive timeout)
            w.close()
        await asyncio.sleep(0)
        r = await http.get(HOST, port, "/health")
        assert r.status == 200 and server.accepted == 2
        r = await http.get(HOST, port, "/health")  # and keeps the new one
        assert r.status == 200 and server.accepted == 2
        await http.aclose()


class Raw:
    """A raw asyncio server on loopback that counts the connections it accepts; `answer` serves each."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.accepted = 0

    async def start(self) -> tuple[asyncio.Server, int]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            await reader.readuntil(b"\r\n\r\n")
            await self.answer(reader, writer)

        srv = await asyncio.start_server(serve, HOST, 0)
        return srv, srv.sockets[0].getsockname()[1]


async def test_a_stale_connection_found_only_when_sending_is_tried_again_once():
    """The server closed without the client noticing before it wrote (a FIN not yet read): the GET is
    sent again once on a new connection, not reported as a miss."""

    async def answer_then_close_at_the_next_request(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    raw = Raw(answer_then_close_at_the_next_request)
    srv, port = await raw.start()
    async with srv:
        http = HttpClient()
        assert (await http.get(HOST, port, "/health")).body == b"ok"
        r = await http.get(HOST, port, "/health")
        assert (r.status, r.body, raw.accepted) == (200, b"ok", 2)
        await http.aclose()


async def test_a_server_that_closes_every_connection_still_answers_every_request():
    """HTTP/1.0-style servers (Connection: close): the client opens one connection a request."""

    async def answer_and_close(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    before = open_sockets()
    raw = Raw(answer_and_close)
    srv, port = await raw.start()
    async with srv:
        http = HttpClient()
        for _ in range(5):
            assert (await http.get(HOST, port, "/x")).body == b"ok"
        assert raw.accepted == 5
        await http.aclose()
    assert await sockets_back_to(before) == before


class Silent:
    """A server that reads a request and never answers; it closes a connection once the client has gone.
    `arrived` is set when a request came."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.arrived.set()
        await reader.read()
        writer.close()

    async def start(self) -> tuple[asyncio.Server, int]:
        srv = await asyncio.start_server(self.serve, HOST, 0)
        return srv, srv.sockets[0].getsockname()[1]


async def test_a_refused_port_and_a_timeout_are_answers_with_status_0_and_leave_no_socket():
    before = open_sockets()
    srv, port = await Silent().start()
    http = HttpClient()
    async with srv:
        r = await http.get(HOST, port, "/health", timeout=0.3)
        assert (r.status, r.error) == (0, "no answer within 0.3s")
    r = await http.get(HOST, port, "/health")
    assert r.status == 0 and r.error
    await http.aclose()
    assert await sockets_back_to(before) == before


async def test_close_leaves_no_socket_open_for_many_endpoints():
    before = open_sockets()
    servers = [Counting() for _ in range(4)]
    ports = [await s.__aenter__() for s in servers]
    http = HttpClient()
    for _ in range(3):
        rs = await asyncio.gather(*(http.get(HOST, p, "/health") for p in ports))
        assert all(r.status == 200 for r in rs)
    assert http.connections() == 4 and [s.accepted for s in servers] == [1] * 4
    assert open_sockets() == before + 4 + 4 + 4  # listeners, and both ends of each connection (in this process)
    await http.aclose()
    assert http.connections() == 0
    for s in servers:
        await s.__aexit__(None, None, None)
    assert await sockets_back_to(before) == before


@pytest.mark.parametrize("end", ["cancel", "close"])
async def test_a_request_in_flight_cancelled_or_closed_leaves_no_socket(end):
    """A cancellation propagates (and the half-done exchange is not kept for the next request); `aclose`
    ends a request in flight with status 0."""
    before = open_sockets()
    silent = Silent()
    srv, port = await silent.start()
    async with srv:
        http = HttpClient()
        task = asyncio.create_task(http.get(HOST, port, "/health", timeout=20))
        await silent.arrived.wait()
        if end == "cancel":
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not http.connections()
            await http.aclose()
        else:
            await http.aclose()
            r = await task
            assert r.status == 0 and r.error
    assert await sockets_back_to(before) == before


async def test_a_post_on_a_kept_connection_and_no_connection_close_header():
    seen: list[Request] = []

    async def echo(req: Request) -> Response:
        seen.append(req)
        return json_response({"got": req.json()})

    server = Counting({("POST", "/echo"): echo, ("GET", "/health"): echo})
    async with server as port:
        http = HttpClient()
        assert (await http.get(HOST, port, "/health")).status == 200
        r = await http.post(HOST, port, "/echo", {"a": 1})
        assert r.json() == {"got": {"a": 1}} and server.accepted == 1
        await http.aclose()
    assert "connection" not in seen[0].headers and seen[1].headers["content-type"] == "application/json"


# -- the watcher's Prometheus reading: only the names it uses, the same values as prometheus_client's --------
def test_the_fast_parser_reads_what_prometheus_clients_parser_reads_for_the_names_used():
    snap = {"requests_running": 3, "requests_waiting": 1, "generation_tokens": 1234, "prompt_tokens": 99,
            "requests_finished": 7, "kv_cache_usage_ratio": 0.25, "kv_blocks_used": 10, "kv_blocks_total": 40}
    m = MeshMetrics()
    route = {"router_type": "pd", "backend_type": "atom", "connection_mode": "http", "model": "m", "endpoint": "x"}
    m.router_requests.labels(**route, streaming="false").inc(5)
    m.router_errors.labels(**route, error_type='time "out", with\\ a } brace').inc(2)
    m.upstream.labels(router_type="pd", status_code="200", error_code="").inc(3)
    m.worker_active.labels(worker="http://10.0.0.2:8020").set(4)
    m.worker_health.labels(worker="http://10.0.0.2:8020").set(1)
    m.http_duration.labels(method="GET", path="/x").observe(0.2)
    for text, names in ((AtomMetrics(lambda: snap).render().decode(), ATOM_NAMES),
                        (m.render().decode(), ROUTER_NAMES)):
        full = [s for s in parse(text) if s[0] in names]
        assert full and sorted(map(repr, parse_wanted(text, names))) == sorted(map(repr, full))


def test_the_fast_parser_takes_timestamps_and_special_values_and_rejects_garbage():
    text = ("# HELP atom:requests_running x\n# TYPE atom:requests_running gauge\n"
            "atom:requests_running{rank=\"0\"} 2 1700000000000\natom:requests_running{rank=\"1\"} +Inf\n"
            "atom:kv_cache_usage_ratio NaN\nother_metric 5\n")
    got = parse_wanted(text, ATOM_NAMES)
    assert got[0] == ("atom:requests_running", {"rank": "0"}, 2.0) and got[1][2] == float("inf")
    assert got[2][0] == "atom:kv_cache_usage_ratio" and got[2][2] != got[2][2] and len(got) == 3
    with pytest.raises(ValueError):
        parse_wanted("atom:requests_running{rank=\"0\" 2\n", ATOM_NAMES)
    with pytest.raises(ValueError):
        parse_wanted("atom:requests_running two\n", ATOM_NAMES)
