"""core/remote/router_api.py against the simulated AToMesh and real simulated workers over loopback."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from atomdeck.core.remote.router_api import JobFailed, JobTimeout, RouterApi, RouterRefused, RouterUnreachable

from .simhelpers import MODEL, http, wait_http

pytestmark = pytest.mark.slow


def deploy(spawn, ip: str, *extra: str):
    prefill = spawn.worker("prefill", ip, 8010, "kv_producer")
    decode = spawn.worker("decode", ip, 8020, "kv_consumer", tp=1, ATOMSIM_SPEED="1")
    for port, proc in ((8010, prefill), (8020, decode)):
        wait_http(f"http://{ip}:{port}/health", proc=proc, timeout=30)
    router = spawn.router("router", ip, 30000, [f"http://{ip}:8010"], [f"http://{ip}:8020"], *extra)
    wait_http(f"http://{ip}:30000/readiness", proc=router, timeout=30)
    return router


def test_client_lists_removes_adds_and_reads_the_load(spawn):
    ip = "127.0.62.2"
    deploy(spawn, ip)
    decode_url = f"http://{ip}:8020"

    async def scenario() -> None:
        api = RouterApi(ip, 30000)
        try:
            listed = await api.list_workers()
            assert (listed.total, listed.prefill_count, listed.decode_count, listed.regular_count) == (2, 1, 1, 0)
            decode = listed.by_url(decode_url + "/")
            assert decode is not None and decode.worker_type == "decode" and decode.model_id == MODEL
            assert decode.is_healthy and not decode.pending and decode.connection_mode == "HTTP"
            assert await api.get_worker(decode.id) == decode
            assert await api.worker_load(decode_url) == 0

            # a request in flight is the worker's load
            done = threading.Event()
            threading.Thread(target=lambda: (http("POST", f"http://{ip}:30000/v1/completions",
                                                  {"model": MODEL, "prompt": "slow", "max_tokens": 300}),
                                             done.set())).start()
            deadline = time.monotonic() + 10
            while await api.worker_load(decode_url) != 1:
                assert time.monotonic() < deadline, "the load never showed the request"
                await asyncio.sleep(0.05)
            assert await api.requests_active(29100, decode_url) == 1.0
            while not done.is_set():
                await asyncio.sleep(0.05)
            assert await api.worker_load(decode_url) == 0

            removing = await api.remove_worker(decode.id)
            assert removing.message == "Worker removal queued for background processing"
            gone = await api.wait_for_job(decode.id, "RemoveWorker", time.monotonic() + 10)
            assert gone.worker is None and await api.find_worker(decode_url) is None
            assert await api.worker_load(decode_url) is None

            adding = await api.add_worker(decode_url, "decode")
            assert adding.location == f"/workers/{adding.worker_id}" and adding.url == decode_url
            added = await api.wait_for_job(adding.worker_id, "AddWorker", time.monotonic() + 10)
            assert added.worker is not None and added.worker.id == adding.worker_id and added.worker.is_healthy

            updating = await api.update_worker(adding.worker_id, priority=7)
            done_update = await api.wait_for_job(updating.worker_id, "UpdateWorker", time.monotonic() + 10)
            assert done_update.worker is not None and done_update.worker.priority == 7
        finally:
            await api.aclose()

    asyncio.run(scenario())


def test_client_errors_name_what_went_wrong(spawn):
    ip = "127.0.62.3"
    deploy(spawn, ip, "--worker-startup-timeout-secs", "3")

    async def scenario() -> None:
        api = RouterApi(ip, 30000)
        try:
            unknown = str(uuid.uuid4())
            with pytest.raises(RouterRefused) as e:
                await api.get_worker(unknown)
            assert (e.value.status, e.value.code, e.value.message) == (404, "WORKER_NOT_FOUND",
                                                                       f"Worker {unknown} not found")
            assert f"router {ip}:30000 GET /workers/{unknown}: HTTP 404 WORKER_NOT_FOUND" in str(e.value)
            with pytest.raises(RouterRefused) as e:
                await api.remove_worker("worker-1")
            assert e.value.status == 400 and e.value.code == "BAD_REQUEST"
            with pytest.raises(RouterRefused) as e:
                await api.add_worker(f"http://{ip}:8030", "decode", priority=-1)
            assert e.value.status == 422 and e.value.code == "" and "priority: invalid value: integer `-1`, " \
                                                                      "expected u32" in e.value.message

            dead = f"http://{ip}:8099"
            accepted = await api.add_worker(dead, "decode")
            with pytest.raises(JobTimeout) as t:
                await api.wait_for_job(accepted.worker_id, "AddWorker", time.monotonic() + 0.3)
            assert t.value.last is not None and t.value.last.status in ("pending", "processing")
            with pytest.raises(JobFailed) as f:
                await api.wait_for_job(accepted.worker_id, "AddWorker", time.monotonic() + 20)
            assert f.value.status.message is not None and f.value.status.message.startswith(
                f"Workflow failed at step detect_connection_mode: Step failed: detect_connection_mode - Both HTTP "
                f"and gRPC health checks failed for {dead}: HTTP: Health check failed: error sending request")
            assert str(f.value).startswith(f"the router's AddWorker job for {dead} (worker {accepted.worker_id}) "
                                           f"failed: Workflow failed at step detect_connection_mode")
        finally:
            await api.aclose()

        closed = RouterApi(ip, 30999, timeout=2.0)
        with pytest.raises(RouterUnreachable) as u:
            await closed.list_workers()
        assert str(u.value).startswith(f"router {ip}:30999 unreachable (GET /workers): ")
        await closed.aclose()

    asyncio.run(scenario())
