"""The probes' HTTP client over SSH direct-tcpip channels through a login host (real sshd daemons):
the same h11 client as on a local socket, with GET, POST and the port probe."""

from __future__ import annotations

import asyncio

import pytest
from atomdeck.core.remote.probes import HttpClient, http_get, http_post, tcp_probe
from atomdeck.core.remote.ssh import SshRunner
from atomdeck.sim.httpd import HttpServer, Request, Response, json_response

pytestmark = pytest.mark.timeout(30)


async def test_probes_through_the_login_host(sshd, login_sshd, target):
    async def health(req: Request) -> Response:
        return json_response({"status": "ok", "host": req.headers["host"]})

    async def generate(req: Request) -> Response:
        return json_response({"text": req.json()["prompt"][::-1]})

    srv = HttpServer({("GET", "/health"): health, ("POST", "/generate"): generate})
    await srv.start("127.0.0.1", 0)
    assert srv.server is not None
    port = srv.server.sockets[0].getsockname()[1]
    try:
        login = SshRunner(target(login_sshd))
        node = SshRunner(target(sshd, jump=login.target))
        for vantage in (login, node):
            r = await http_get("127.0.0.1", port, "/health", timeout=10, runner=vantage)
            assert (r.status, r.json()) == (200, {"status": "ok", "host": f"127.0.0.1:{port}"}), r.error
            r = await http_post("127.0.0.1", port, "/generate", {"prompt": "abc"}, timeout=10, runner=vantage)
            assert (r.status, r.json()) == (200, {"text": "cba"}), r.error
            assert await tcp_probe("127.0.0.1", port, timeout=5, runner=vantage) == "open"
    finally:
        await srv.close()
    assert await tcp_probe("127.0.0.1", port, timeout=5, runner=login) == "refused"
    r = await http_get("127.0.0.1", port, "/health", timeout=10, runner=node)
    assert r.status == 0 and r.error


async def test_kept_alive_requests_through_the_login_host_use_one_channel(sshd, login_sshd, target):
    """HttpClient (issue 19) over a direct-tcpip channel: five GETs, one connection at the server; the
    server drops it and the next GET opens another; closing the client closes the channel."""
    async def health(req: Request) -> Response:
        return json_response({"status": "ok"})

    srv = HttpServer({("GET", "/health"): health})
    await srv.start("127.0.0.1", 0)
    assert srv.server is not None
    port = srv.server.sockets[0].getsockname()[1]
    http = HttpClient()
    try:
        login = SshRunner(target(login_sshd))
        node = SshRunner(target(sshd, jump=login.target))
        for _ in range(5):
            r = await http.get("127.0.0.1", port, "/health", timeout=10, runner=node)
            assert r.status == 200, r.error
        assert srv.accepted == 1 and http.connections() == 1
        for w in list(srv._writers):
            w.close()
        r = await http.get("127.0.0.1", port, "/health", timeout=10, runner=node)
        assert r.status == 200 and srv.accepted == 2, r.error
        await http.aclose()
        assert http.connections() == 0
        for _ in range(500):  # the server sees the channel's end (at most 5 s)
            if not srv._writers:
                break
            await asyncio.sleep(0.01)
        assert not srv._writers
    finally:
        await http.aclose()
        await srv.close()
