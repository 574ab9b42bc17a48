"""The probes' HTTP client (h11 over asyncio streams) against real servers on loopback: the
simulator's HTTP server, and raw asyncio servers that answer the awkward ways real ones do."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from atomdeck.core.remote.probes import http_get, http_post, tcp_probe
from atomdeck.sim.httpd import HttpServer, Request, Response, json_response, sse_response

HOST = "127.0.0.1"


async def sim_server(routes) -> tuple[HttpServer, int]:
    srv = HttpServer(routes)
    await srv.start(HOST, 0)
    assert srv.server is not None
    return srv, srv.server.sockets[0].getsockname()[1]


async def raw_server(answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
                     ) -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, HOST, 0)
    return srv, srv.sockets[0].getsockname()[1]


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


async def test_get_and_post_against_the_simulators_server():
    seen: list[Request] = []

    async def health(req: Request) -> Response:
        seen.append(req)
        return json_response({"status": "ok"})

    async def echo(req: Request) -> Response:
        seen.append(req)
        return json_response({"got": req.json()}, 201)

    srv, port = await sim_server({("GET", "/health"): health, ("POST", "/echo"): echo})
    try:
        r = await http_get(HOST, port, "/health")
        assert (r.status, r.ok, r.json(), r.error) == (200, True, {"status": "ok"}, "")
        r = await http_post(HOST, port, "/echo", {"prompt": "hé", "n": [1, 2]})
        assert (r.status, r.json()) == (201, {"got": {"prompt": "hé", "n": [1, 2]}})
        r = await http_get(HOST, port, "/nope")
        assert (r.status, r.ok, r.json()) == (404, False, {"detail": "Not Found"})
    finally:
        await srv.close()
    assert seen[0].headers["host"] == f"{HOST}:{port}" and seen[0].headers["connection"] == "close"
    assert seen[1].headers["content-type"] == "application/json"


async def test_a_chunked_answer_is_joined():
    async def events(req: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            for i in range(3):
                yield f"data: {i}\n\n".encode()

        return sse_response(chunks())

    srv, port = await sim_server({("GET", "/stream"): events})
    try:
        r = await http_get(HOST, port, "/stream")
    finally:
        await srv.close()
    assert r.status == 200 and r.body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"


async def test_a_body_ended_by_closing_and_a_100_continue_first():
    async def answer(reader, writer):
        await read_head(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 503 Service Unavailable\r\n\r\nloading model")
        await writer.drain()

    srv, port = await raw_server(answer)
    async with srv:
        r = await http_get(HOST, port, "/health")
    assert (r.status, r.text(), r.ok) == (503, "loading model", False)


@pytest.mark.parametrize("reply", [b"SSH-2.0-OpenSSH_9.2p1 Debian\r\n", b"", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"],
                         ids=["not-http", "closed-at-once", "cut-short"])
async def test_what_is_not_a_whole_answer_is_status_0_with_a_reason(reply):
    async def answer(reader, writer):
        await read_head(reader)
        writer.write(reply)
        await writer.drain()

    srv, port = await raw_server(answer)
    async with srv:
        r = await http_get(HOST, port, "/health")
    assert r.status == 0 and r.error and not r.ok


async def test_a_server_that_never_answers_times_out_and_a_closed_port_is_an_error():
    async def answer(reader, writer):
        await asyncio.sleep(30)

    srv, port = await raw_server(answer)
    async with srv:
        r = await http_get(HOST, port, "/health", timeout=0.3)
    assert (r.status, r.error) == (0, "no answer within 0.3s")
    r = await http_get(HOST, port, "/health")  # the server is gone: refused
    assert r.status == 0 and r.error


async def test_tcp_probe_open_and_refused():
    srv, port = await raw_server(lambda r, w: asyncio.sleep(0))
    async with srv:
        assert await tcp_probe(HOST, port) == "open"
    assert await tcp_probe(HOST, port) == "refused"


async def test_a_big_body_arrives_whole():
    big = {"text": "x" * 300_000}

    async def answer(reader, writer):
        await read_head(reader)
        body = json.dumps(big).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()

    srv, port = await raw_server(answer)
    async with srv:
        r = await http_get(HOST, port, "/big")
    assert r.status == 200 and r.json() == big
