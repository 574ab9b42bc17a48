"""The Run's watchers are small objects of their own (issue 18): each runs against any host that has a
state, a plan and a launcher, here without a Run. Real parts: the simulator's Prometheus renderers,
real sockets, the local launcher."""

from __future__ import annotations

import asyncio

from atomdeck.core.launch.local import LocalLauncher
from atomdeck.core.run.events import Event, new_state
from atomdeck.core.run.watchers.health import Endpoint, ServingHealth
from atomdeck.core.run.watchers.metrics import atom_values, parse, router_values
from atomdeck.sim.metrics import AtomMetrics, MeshMetrics


def test_atom_metrics_are_read_with_prometheus_clients_parser():
    snap = {"requests_running": 3, "requests_waiting": 1, "generation_tokens": 1234, "prompt_tokens": 99,
            "requests_finished": 7, "kv_cache_usage_ratio": 0.25}
    text = AtomMetrics(lambda: snap).render().decode()
    vals = atom_values(parse(text))
    assert vals["requests_running"] == 3 and vals["requests_waiting"] == 1
    assert vals["generation_tokens"] == 1234 and vals["prompt_tokens"] == 99  # counters, _total dropped
    assert vals["kv_cache_usage_ratio"] == 0.25


def test_router_metrics_per_worker_and_errors_by_type():
    m = MeshMetrics()
    route = {"router_type": "pd", "backend_type": "atom", "connection_mode": "http", "model": "m", "endpoint": "x"}
    m.router_requests.labels(**route, streaming="false").inc(5)
    m.router_errors.labels(**route, error_type="timeout").inc(2)
    m.upstream.labels(router_type="pd", status_code="200", error_code="").inc(3)
    m.worker_active.labels(worker="http://10.0.0.2:8020").set(4)
    vals, workers = router_values(parse(m.render().decode()))
    assert vals["router_requests"] == 5 and vals["router_errors"] == 2
    assert vals["errors_by_type"] == {"timeout": 2} and vals["upstream_responses"] == 3
    assert workers["http://10.0.0.2:8020"]["active"] == 4


class Host:
    """What a watcher needs of a run, and nothing else."""

    def __init__(self, launcher):
        self.id = "20261201-000000-alone-0001"
        self.state = new_state(self.id, [("decode-0", "decode", "here")], [], [])
        self.state.status = "serving"
        self.launcher = launcher
        self.handles: dict = {}
        self.stopping = False
        self.events: list[Event] = []

    def emit(self, e: Event) -> None:
        self.events.append(e)
        self.state.apply(e)

    def _set_status(self, status, detail=None):
        self.emit(Event("run", value=status, detail=detail or ""))


class Group:
    def settle(self) -> None:
        pass


def test_serving_health_alone_calls_a_silent_endpoint_unresponsive_and_its_answer_a_recovery(tmp_path):
    async def main():
        answering = asyncio.Event()

        async def handle(reader, writer):  # accepts, and answers only once told to (a frozen server, then not)
            await reader.readuntil(b"\r\n\r\n")
            await answering.wait()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        host = Host(LocalLauncher("alone", str(tmp_path)))
        host.state.procs["decode-0"].stage = "serving"
        health = ServingHealth(host, Group())  # type: ignore[arg-type]
        ep = Endpoint("decode-0", "here", "127.0.0.1", port, "/health")
        await health.check(ep, 2)
        assert host.state.procs["decode-0"].stage == "serving"  # one miss is not enough
        await health.check(ep, 2)
        p = host.state.procs["decode-0"]
        assert p.stage == "unresponsive" and p.health_from == "serving"
        assert p.health_detail.startswith(f"GET /health on here:{port}: no answer within 1.5s; process alive")
        answering.set()
        await health.check(ep, 2)
        assert p.stage == "serving" and p.recovered.startswith("answers GET /health again after ")
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_serving_health_asks_over_one_connection_and_closes_it_when_its_watch_is_cancelled(tmp_path):
    """Issue 19: the checks of an endpoint reuse one kept-alive connection (counted where the simulator's
    HTTP server accepts them); cancelling the watch propagates and leaves no connection open."""
    from atomdeck.sim.httpd import HttpServer, json_response

    async def main():
        async def health(req):
            return json_response({"status": "ok"})

        srv = HttpServer({("GET", "/health"): health})
        await srv.start("127.0.0.1", 0)
        assert srv.server is not None
        port = srv.server.sockets[0].getsockname()[1]
        host = Host(LocalLauncher("alone", str(tmp_path)))
        host.state.procs["decode-0"].stage = "serving"
        health = ServingHealth(host, Group())  # type: ignore[arg-type]
        ep = Endpoint("decode-0", "here", "127.0.0.1", port, "/health")
        health.endpoints = lambda: [ep]  # type: ignore[method-assign]  # (the run's plan is not here)
        task = asyncio.create_task(health.watch())
        while health.requests.get("decode-0", 0) < 3 or health.http.connections() == 0:
            await asyncio.sleep(0.05)
        assert srv.accepted == 1 and host.state.procs["decode-0"].stage == "serving"
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            cancelled = True
        else:
            cancelled = False
        assert cancelled and health.http.connections() == 0
        while srv._writers:  # the server sees the client's close
            await asyncio.sleep(0.01)
        await srv.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def _listening_worker(host):
    """A real process carrying the run's marker for decode-0, listening on a free loopback port (printed)."""
    import os
    import subprocess
    import sys

    code = ("import socket, sys, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n"
            "print(s.getsockname()[1], flush=True)\ntime.sleep(120)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "ATOMDECK_RUN": f"{host.id}:decode-0"})


def test_a_stopped_process_is_unresponsive_at_its_first_miss(tmp_path):
    """Issue 19: the checks of a passing endpoint are 2 s apart now, so a frozen worker is not left to miss
    twice: its state on the node is read at the first miss, and a process in state T (SIGSTOP) cannot
    answer: unresponsive at once. A real process carrying the run's marker, listening, stopped."""
    import os
    import signal

    host = Host(LocalLauncher("alone", str(tmp_path)))
    host.state.procs["decode-0"].stage = "serving"
    proc = _listening_worker(host)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGSTOP)

        async def main():
            health = ServingHealth(host, Group())  # type: ignore[arg-type]
            await health.check(Endpoint("decode-0", "here", "127.0.0.1", port, "/health"), 2)
            await health.http.aclose()
            return health

        health = asyncio.run(main())
        p = host.state.procs["decode-0"]
        assert health.misses["decode-0"] == 1
        assert p.stage == "unresponsive", p.health_detail
        assert "state T (stopped)" in p.health_detail and f"(pid {proc.pid} " in p.health_detail
        assert "no answer within 0.5s" in p.health_detail  # its state was read while the check was slow
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_is_running_but_silent_still_gets_a_second_check(tmp_path):
    """The other side of the first-miss read: a process that runs (state S here) may just be busy, so one
    miss is not enough, as before."""

    host = Host(LocalLauncher("alone", str(tmp_path)))
    host.state.procs["decode-0"].stage = "serving"
    proc = _listening_worker(host)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())

        async def main():
            health = ServingHealth(host, Group())  # type: ignore[arg-type]
            ep = Endpoint("decode-0", "here", "127.0.0.1", port, "/health")
            await health.check(ep, 2)
            first = host.state.procs["decode-0"].stage
            await health.check(ep, 2)
            await health.http.aclose()
            return first

        first = asyncio.run(main())
        assert first == "serving"
        assert host.state.procs["decode-0"].stage == "unresponsive"
    finally:
        proc.kill()
        proc.wait()
