"""The simulated router's worker API (/workers) against what ROCm/ATOM's atom/mesh/src says: server.rs
worker_routes, core/worker_service.rs, core/job_queue.rs, core/worker_registry.rs, core/worker.rs and the
workflow steps, openai-protocol 1.0.0's worker_spec.rs. Real router, real workers, real HTTP on loopback."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
import uuid

import pytest

from .simhelpers import MODEL, get_json, http, wait_http

pytestmark = pytest.mark.slow

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def deploy(spawn, ip: str, decodes: int = 1, extra: tuple[str, ...] = (), decode_env: dict | None = None,
           **router_env: str):
    """One prefill (port 8010) and `decodes` decodes (8020, 8021, ...) on `ip`, all up before the router."""
    prefill = spawn.worker("prefill", ip, 8010, "kv_producer")
    ds = [spawn.worker(f"decode{i}", ip, 8020 + i, "kv_consumer", tp=1, **(decode_env or {}))
          for i in range(decodes)]
    for port, proc in [(8010, prefill)] + [(8020 + i, d) for i, d in enumerate(ds)]:
        wait_http(f"http://{ip}:{port}/health", proc=proc, timeout=30)
    router = spawn.router("router", ip, 30000, [f"http://{ip}:8010"], [f"http://{ip}:{8020 + i}" for i in
                                                                        range(decodes)], *extra, **router_env)
    wait_http(f"http://{ip}:30000/readiness", proc=router, timeout=30)
    return router, prefill, ds


def workers(ip: str) -> dict:
    status, body = get_json(f"http://{ip}:30000/workers")
    assert status == 200
    return body


def by_url(ip: str, url: str) -> dict | None:
    return next((w for w in workers(ip)["workers"] if w["url"] == url), None)


def raw(method: str, url: str, body: bytes | None = None, content_type: str | None = "application/json"):
    """(status, headers, body) without urllib's own Content-Type default."""
    req = urllib.request.Request(url, data=body, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def wait_until(what: str, check, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)


def completion(ip: str, prompt: str, max_tokens: int = 4, stream: bool = False) -> tuple[int, bytes]:
    return http("POST", f"http://{ip}:30000/v1/completions",
                {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream})


def finished(ip: str, port: int) -> float:
    """atom:requests_finished_total of one worker (a fresh snapshot: ATOMSIM_METRICS_REFRESH=0)."""
    text = http("GET", f"http://{ip}:{port}/metrics")[1].decode()
    return float(re.search(r"^atom:requests_finished_total (\S+)$", text, re.M).group(1))


def test_list_and_get_give_the_startup_workers_their_registry_ids(spawn):
    ip = "127.0.61.2"
    router, _, _ = deploy(spawn, ip)
    listed = workers(ip)
    assert listed["total"] == 2 and listed["stats"] == {"prefill_count": 1, "decode_count": 1, "regular_count": 0}
    prefill = by_url(ip, f"http://{ip}:8010")
    # worker.rs worker_to_info for an HTTP worker; the model id and its label come from the worker's /v1/models;
    # --disable-health-check on the router command line is every worker's disable_health_check
    assert prefill == {"id": prefill["id"], "url": f"http://{ip}:8010", "model_id": MODEL, "priority": 50,
                       "cost": 1.0, "worker_type": "prefill", "is_healthy": True, "load": 0,
                       "connection_mode": "HTTP", "metadata": {"model_path": MODEL}, "disable_health_check": True}
    assert UUID4.match(prefill["id"]), "registry ids are UUID v4"
    decode = by_url(ip, f"http://{ip}:8020")
    assert decode["worker_type"] == "decode" and decode["id"] != prefill["id"]
    assert get_json(f"http://{ip}:30000/workers/{decode['id']}") == (200, decode)

    # invalid ids: worker_service.rs parse_worker_id with the uuid crate's own error text
    status, body = get_json(f"http://{ip}:30000/workers/not-a-uuid")
    assert (status, body) == (400, {"error": "Invalid worker_id 'not-a-uuid' (expected UUID). Error: invalid "
                                             "character: expected an optional prefix of `urn:uuid:` followed by "
                                             "[0-9a-fA-F-], found `n` at 1", "code": "BAD_REQUEST"})
    assert get_json(f"http://{ip}:30000/workers/1234")[1]["error"].endswith(
        "invalid length: expected length 32 for simple format, found 4")
    unknown = str(uuid.uuid4())
    assert get_json(f"http://{ip}:30000/workers/{unknown}") == (
        404, {"error": f"Worker {unknown} not found", "code": "WORKER_NOT_FOUND"})
    assert get_json(f"http://{ip}:30000/workers/{decode['id'].upper()}")[0] == 404, \
        "a valid UUID in another spelling is another id (the registry compares strings)"
    assert http("DELETE", f"http://{ip}:30000/workers/{unknown}")[0] == 404
    assert http("DELETE", f"http://{ip}:30000/workers/nope")[0] == 400
    assert http("POST", f"http://{ip}:30000/workers/{unknown}", {})[0] == 405

    # the body: axum's Json extractor (415, 400, 422, plain text) before the handler looks at the id
    status, headers, body = raw("POST", f"http://{ip}:30000/workers", b'{"url": "x"}', content_type=None)
    assert (status, body) == (415, b"Expected request with `Content-Type: application/json`")
    status, headers, body = raw("POST", f"http://{ip}:30000/workers", b"{}")
    assert (status, body) == (422, b"Failed to deserialize the JSON body into the target type: missing field "
                                   b"`url` at line 1 column 2")
    assert headers["content-type"].startswith("text/plain")
    status, _, body = raw("POST", f"http://{ip}:30000/workers", b'{"url": "http://x", "priority": -1}')
    assert (status, body) == (422, b"Failed to deserialize the JSON body into the target type: priority: invalid "
                                   b"value: integer `-1`, expected u32 at line 1 column 34")
    status, _, body = raw("POST", f"http://{ip}:30000/workers", b'{"url": ')
    assert (status, body) == (400, b"Failed to parse the request body as JSON: EOF while parsing a value at "
                                   b"line 1 column 8")
    status, _, body = raw("PUT", f"http://{ip}:30000/workers/nope", b'{"cost": "high"}')
    assert (status, body) == (422, b'Failed to deserialize the JSON body into the target type: cost: invalid '
                                   b'type: string "high", expected f32 at line 1 column 15')
    assert workers(ip)["total"] == 2, "nothing was queued"
    assert "Failed job" not in router.text()


def test_the_pin_and_head_differ_only_in_the_startup_line(spawn):
    ip = "127.0.61.3"
    router, _, _ = deploy(spawn, ip, ATOMSIM_ATOM_REV="pin")
    assert "All 2 expected workers registered (took " in router.text(), "server.rs at 087b82d9"
    assert workers(ip)["stats"] == {"prefill_count": 1, "decode_count": 1, "regular_count": 0}


def test_remove_and_add_change_routing_load_readiness_and_metrics(spawn):
    ip = "127.0.61.4"
    router, prefill, (d0, d1) = deploy(spawn, ip, decodes=2, decode_env={"ATOMSIM_SPEED": "1",
                                                                          "ATOMSIM_METRICS_REFRESH": "0"})
    base = f"http://{ip}:30000"
    d0_url, d1_url = f"http://{ip}:8020", f"http://{ip}:8021"
    d1_id = by_url(ip, d1_url)["id"]

    # DELETE: 202 and a RemoveWorker job (worker_service.rs delete_worker, job_queue.rs)
    status, body = http("DELETE", f"{base}/workers/{d1_id}")
    assert status == 202 and json.loads(body) == {"status": "accepted", "worker_id": d1_id,
                                                  "message": "Worker removal queued for background processing"}
    wait_until("the removal", lambda: get_json(f"{base}/workers/{d1_id}")[0] == 404)
    router.wait_line(f"INFO mesh::core::steps::worker::local::update_remaining_policies: Removed worker {d1_url}")
    assert workers(ip)["stats"] == {"prefill_count": 1, "decode_count": 1, "regular_count": 0}
    before = finished(ip, 8021)
    for i in range(6):
        assert completion(ip, f"only d0 now {i}")[0] == 200
    assert finished(ip, 8021) == before, "a removed worker gets no new request"

    # a request in flight through d0 is its load (and its prefill's: a non-streamed request holds both)
    d0_id = by_url(ip, d0_url)["id"]
    result: dict = {}
    slow = threading.Thread(target=lambda: result.update(r=completion(ip, "a long answer", max_tokens=400)))
    slow.start()
    try:
        wait_until("the load", lambda: get_json(f"{base}/workers/{d0_id}")[1]["load"] == 1)
        assert by_url(ip, f"http://{ip}:8010")["load"] == 1
        m = http("GET", f"http://{ip}:29100/metrics")[1].decode()
        assert f'mesh_worker_requests_active{{worker="{d0_url}"}} 1.0' in m

        # removing d0 while its request runs: the request finishes (the guard holds the worker), the
        # router's gauge is reset to 0 at once (recorder.rs remove_worker_metrics), health to -1
        assert http("DELETE", f"{base}/workers/{d0_id}")[0] == 202
        wait_until("the second removal", lambda: get_json(f"{base}/workers/{d0_id}")[0] == 404)
        m = http("GET", f"http://{ip}:29100/metrics")[1].decode()
        assert f'mesh_worker_requests_active{{worker="{d0_url}"}} 0.0' in m
        assert f'mesh_worker_health{{worker="{d0_url}"}} -1.0' in m
        assert 'mesh_worker_pool_size{connection_mode="http",model="' + MODEL + '",worker_type="decode"} 0.0' in m
        assert slow.is_alive(), "still in flight"
        status, body = get_json(f"{base}/readiness")
        assert (status, body) == (503, {"status": "not ready", "reason": "insufficient healthy workers"})
        status, body = completion(ip, "no decode left")
        assert status == 503 and json.loads(body)["error"]["code"] == "no_decode_servers"
    finally:
        slow.join(60)
    assert result["r"][0] == 200 and json.loads(result["r"][1])["usage"]["completion_tokens"] == 400
    m = http("GET", f"http://{ip}:29100/metrics")[1].decode()
    assert f'mesh_worker_requests_active{{worker="{d0_url}"}} 0.0' in m

    # POST d1 back: 202, Location, the reserved id; the job registers it and routing follows
    status, headers, body = raw("POST", f"{base}/workers", json.dumps({"url": d1_url, "worker_type": "decode"})
                                .encode())
    answer = json.loads(body)
    assert status == 202 and headers["location"] == answer["location"] == f"/workers/{answer['worker_id']}"
    assert answer == {"status": "accepted", "worker_id": answer["worker_id"], "url": d1_url,
                      "location": answer["location"], "message": "Worker addition queued for background processing"}
    assert answer["worker_id"] != d1_id, "a removed URL's id is gone; the re-added worker gets a new one"
    added = wait_until("the add", lambda: (lambda r: r[0] == 200 and "job_status" not in r[1] and r[1])(
        get_json(f"{base}{answer['location']}")))
    assert added["is_healthy"] and added["worker_type"] == "decode" and added["model_id"] == MODEL
    assert added["disable_health_check"] is True, "the router's --disable-health-check applies to added workers"
    router.wait_line("INFO mesh::core::steps::worker::shared::activate: Activated 1 worker(s) (marked as healthy)")
    assert f"Submitting tokenizer registration job for model {MODEL} from {MODEL}" in router.text()
    assert get_json(f"{base}/readiness")[0] == 200
    before = finished(ip, 8021)
    assert completion(ip, "d1 is back")[0] == 200
    assert finished(ip, 8021) == before + 1, "the added worker gets the requests"


def test_a_pending_add_then_a_failed_one_as_the_job_queue_keeps_it(spawn):
    ip = "127.0.61.5"
    # --worker-startup-timeout-secs bounds the add's /health retries: 3 attempts below 11 s (mod.rs)
    router, _, _ = deploy(spawn, ip, extra=("--worker-startup-timeout-secs", "3"))
    base = f"http://{ip}:30000"
    dead = f"http://{ip}:8099"
    status, body = http("POST", f"{base}/workers", {"url": dead, "worker_type": "decode"})
    assert status == 202
    wid = json.loads(body)["worker_id"]
    status, pending = get_json(f"{base}/workers/{wid}")
    job = pending.pop("job_status")
    # openai-protocol WorkerInfo::pending
    assert (status, pending) == (200, {"id": wid, "url": dead, "model_id": "unknown", "priority": 0, "cost": 1.0,
                                       "worker_type": "unknown", "is_healthy": False, "load": 0,
                                       "connection_mode": "unknown", "disable_health_check": False})
    assert job["job_type"] == "AddWorker" and job["worker_url"] == dead and job["status"] in ("pending", "processing")
    assert job["message"] is None and abs(job["timestamp"] - time.time()) < 5
    assert dead not in [w["url"] for w in workers(ip)["workers"]], "not listed while its job runs"

    failed = wait_until("the failure", lambda: (lambda s: s["status"] == "failed" and s)(
        get_json(f"{base}/workers/{wid}")[1]["job_status"]), timeout=20)
    error = (f"Workflow failed at step detect_connection_mode: Step failed: detect_connection_mode - Both HTTP "
             f"and gRPC health checks failed for {dead}: HTTP: Health check failed: error sending request for url "
             f"({dead}/health), gRPC: gRPC failed (tried SGLang and vLLM): gRPC connection failed: transport error")
    assert failed["message"] == error
    router.wait_line(f"WARN mesh::core::job_queue: Failed job: type=AddWorker, worker={dead}, error={error}")
    assert workers(ip)["total"] == 2

    # the id still maps to the URL: DELETE is accepted, and its job fails as find_workers_to_remove does
    assert http("DELETE", f"{base}/workers/{wid}")[0] == 202
    removal = wait_until("the removal's failure", lambda: (lambda s: s["job_type"] == "RemoveWorker" and
                                                           s["status"] == "failed" and s)(
        get_json(f"{base}/workers/{wid}")[1]["job_status"]))
    assert removal["message"] == (f"Workflow failed at step find_workers_to_remove: Step failed: "
                                  f"find_workers_to_remove - Worker {dead} not found")


def test_update_and_an_add_of_a_registered_url(spawn):
    ip = "127.0.61.6"
    router, _, _ = deploy(spawn, ip)
    base = f"http://{ip}:30000"
    decode = by_url(ip, f"http://{ip}:8020")
    status, body = http("PUT", f"{base}/workers/{decode['id']}", {"priority": 10, "cost": 2, "labels": {"rack": "a"}})
    assert (status, json.loads(body)) == (202, {"status": "accepted", "worker_id": decode["id"],
                                                "message": "Worker update queued for background processing"})
    router.wait_line(f"INFO mesh::core::steps::worker::local::update_worker_properties: Updated worker "
                     f"http://{ip}:8020")
    updated = wait_until("the update", lambda: (lambda w: w["priority"] == 10 and "job_status" not in w and w)(
        get_json(f"{base}/workers/{decode['id']}")[1]))
    assert updated["cost"] == 2.0 and updated["metadata"] == {"model_path": MODEL, "rack": "a", "priority": "10",
                                                              "cost": "2"}
    assert updated["id"] == decode["id"] and workers(ip)["total"] == 2

    # POST of a URL the router has: the registered id comes back, and the job fails at create_worker
    status, body = http("POST", f"{base}/workers", {"url": f"http://{ip}:8020", "worker_type": "decode"})
    assert status == 202 and json.loads(body)["worker_id"] == decode["id"]
    shown = wait_until("the failed add", lambda: (lambda w: (w.get("job_status") or {}).get("status") == "failed"
                                                  and w)(get_json(f"{base}/workers/{decode['id']}")[1]))
    assert shown["worker_type"] == "decode" and shown["is_healthy"], "the worker itself is untouched"
    assert shown["job_status"]["message"] == (f"Workflow failed at step create_worker: Step failed: create_worker "
                                              f"- Worker http://{ip}:8020 already exists")


def test_a_prefill_added_under_a_new_url_has_no_tp_size(spawn):
    ip = "127.0.61.7"
    router, _, _ = deploy(spawn, ip, extra=("--disable-retries",))
    base = f"http://{ip}:30000"
    new = "127.0.61.8"  # another node
    other = spawn.worker("prefill2", new, 8010, "kv_producer")
    wait_http(f"http://{new}:8010/health", proc=other, timeout=30)
    first = by_url(ip, f"http://{ip}:8010")
    assert http("DELETE", f"{base}/workers/{first['id']}")[0] == 202
    wait_until("the removal", lambda: by_url(ip, f"http://{ip}:8010") is None)
    status, body = http("POST", f"{base}/workers", {"url": f"http://{new}:8010", "worker_type": "prefill",
                                                    "bootstrap_port": 8998})
    wid = json.loads(body)["worker_id"]
    added = wait_until("the add", lambda: (lambda r: r[0] == 200 and "job_status" not in r[1] and r[1])(
        get_json(f"{base}/workers/{wid}")))
    assert added["bootstrap_port"] == 8998 and added["worker_type"] == "prefill"
    # placement/backend/atom.rs: tp_size is known only for the prefills queried at the router's start
    status, headers, body = raw("POST", f"{base}/v1/completions",
                                json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 2}).encode())
    assert status == 500 and headers["x-mesh-error-code"] == "enrich_decode_kv_failed"
    assert json.loads(body) == {"error": {"type": "Internal Server Error", "code": "enrich_decode_kv_failed",
                                          "message": f"Failed to enrich decode kv: tp_size missing for prefill "
                                                     f"http://{new}:8010"}}
    router.wait_line(f"ERROR mesh::routers::http_pd_router: ATOM enrich_decode_kv failed for prefill "
                     f"http://{new}:8010 request_id=xfer-")
    # the URL the router started with is known: re-adding it serves again
    assert http("DELETE", f"{base}/workers/{wid}")[0] == 202
    wait_until("the removal", lambda: by_url(ip, f"http://{new}:8010") is None)
    assert http("POST", f"{base}/workers", {"url": f"http://{ip}:8010", "worker_type": "prefill"})[0] == 202
    wait_until("the re-add", lambda: (by_url(ip, f"http://{ip}:8010") or {}).get("is_healthy"))
    assert completion(ip, "served again")[0] == 200
