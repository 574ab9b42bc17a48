"""/metrics of the simulated ATOM worker and the simulated AToMesh router, parsed with prometheus_client."""

from __future__ import annotations

import json
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

from .simhelpers import MODEL, http, port_open, wait_http


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample as {(name, sorted labels): value}."""
    status, body = http("GET", url, timeout=5)
    assert status == 200, (status, body[:200])
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def total(samples: dict, name: str, **labels: str) -> float:
    """Sum of the series of ``name`` whose labels include ``labels``."""
    return sum(v for (n, lab), v in samples.items()
               if n == name and all((k, w) in lab for k, w in labels.items()))


def complete(url: str, prompt: str, max_tokens: int, stream: bool = False) -> tuple[int, bytes]:
    return http("POST", f"{url}/v1/completions",
                {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream})


def test_worker_and_router_metrics_count_real_requests(spawn):
    p_ip, d_ip = "127.0.41.2", "127.0.41.3"
    env = {"ATOMSIM_METRICS_REFRESH": "0"}
    prefill = spawn.worker("prefill", p_ip, 8010, "kv_producer", **env)
    decode = spawn.worker("decode", d_ip, 8020, "kv_consumer", **env)
    router = spawn.router("router", p_ip, 30000, [f"http://{p_ip}:8010"], [f"http://{d_ip}:8020"])
    wait_http(f"http://{p_ip}:30000/readiness", proc=router)

    before = scrape(f"http://{d_ip}:8020/metrics")
    assert value(before, "atom:metrics_snapshot_available") == 1
    assert value(before, "atom:generation_tokens_total") == 0
    assert value(before, "atom:kv_cache_blocks_total") > 0 and value(before, "atom:kv_cache_usage_ratio") == 0

    prompts = ["one two three", "a much longer prompt about harbors and lanterns and rivers", "x"]
    budgets = [5, 17, 9]
    for prompt, n in zip(prompts, budgets):
        status, body = complete(f"http://{p_ip}:30000", prompt, n)
        assert status == 200, body
    status, _ = complete(f"http://{p_ip}:30000", "streamed", 4, stream=True)
    assert status == 200
    prompt_tokens = sum(len(p.split()) for p in prompts) + 1

    d = scrape(f"http://{d_ip}:8020/metrics")
    p = scrape(f"http://{p_ip}:8010/metrics")
    assert value(d, "atom:requests_finished_total") == 4
    assert value(d, "atom:generation_tokens_total") == sum(budgets) + 4
    assert value(d, "atom:prompt_tokens_total") == prompt_tokens
    assert value(p, "atom:requests_finished_total") == 4
    assert value(p, "atom:generation_tokens_total") == 4, "a prefill makes one token per request"
    assert value(p, "atom:prompt_tokens_total") == prompt_tokens
    for s in (d, p):
        assert value(s, "atom:requests_running") == 0 and value(s, "atom:requests_waiting") == 0
        assert value(s, "atom:kv_cache_blocks_used") == 0
        assert value(s, "atom:kv_cache_blocks_free") == value(s, "atom:kv_cache_blocks_total")
        assert value(s, "atom:preemptions_total") == 0
        assert abs(value(s, "atom:metrics_last_refresh_timestamp_seconds") - time.time()) < 60

    # AToMesh's own listener on --prometheus-port (29100 in the command line)
    m = scrape(f"http://{p_ip}:29100/metrics")
    assert total(m, "mesh_router_requests_total") == 4
    assert total(m, "mesh_router_requests_total", streaming="true", backend_type="pd", endpoint="completions") == 1
    assert total(m, "mesh_router_upstream_responses_total", status_code="200") == 8, "a prefill and a decode each"
    assert total(m, "mesh_router_request_errors_total") == 0
    # the model label is each worker's model id, from its /v1/models (discover_metadata.rs, register.rs)
    assert value(m, "mesh_worker_pool_size", worker_type="prefill", connection_mode="http", model=MODEL) == 1
    assert value(m, "mesh_worker_pool_size", worker_type="decode", connection_mode="http", model=MODEL) == 1
    assert value(m, "mesh_worker_health", worker=f"http://{d_ip}:8020") == 1
    assert value(m, "mesh_worker_requests_active", worker=f"http://{p_ip}:8010") == 0
    assert total(m, "mesh_http_requests_total", path="/v1/completions") == 4
    assert total(m, "mesh_router_request_duration_seconds_count") == 4
    assert total(m, "mesh_http_request_duration_seconds_count", path="/readiness") >= 1

    # an error is counted by type: a model the workers do not serve
    status, _ = http("POST", f"http://{p_ip}:30000/v1/completions", {"model": "nope", "prompt": "x"})
    assert status == 400
    m = scrape(f"http://{p_ip}:29100/metrics")
    assert total(m, "mesh_router_request_errors_total", error_type="validation_error") == 1
    assert total(m, "mesh_router_upstream_responses_total", status_code="400") == 1
    assert prefill.popen.poll() is None and decode.popen.poll() is None


def test_gauges_show_a_request_in_flight(spawn):
    ip = "127.0.41.5"
    worker = spawn.worker("agg", ip, 8000, None, ATOMSIM_SPEED="1", ATOMSIM_METRICS_REFRESH="0")
    wait_http(f"http://{ip}:8000/health", timeout=30, proc=worker)
    result = {}
    thread = threading.Thread(target=lambda: result.update(r=complete(f"http://{ip}:8000", "slow one", 400)))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            s = scrape(f"http://{ip}:8000/metrics")
            if value(s, "atom:requests_running") == 1:
                break
            assert time.monotonic() < deadline, "the request never showed as running"
            time.sleep(0.05)
        assert value(s, "atom:kv_cache_blocks_used") > 0
        assert 0 < value(s, "atom:kv_cache_usage_ratio") < 1
        assert value(s, "atom:requests_finished_total") == 0
    finally:
        thread.join(30)
    assert result["r"][0] == 200
    assert json.loads(result["r"][1])["usage"]["completion_tokens"] == 400
    s = scrape(f"http://{ip}:8000/metrics")
    assert value(s, "atom:requests_running") == 0
    assert value(s, "atom:generation_tokens_total") == 400


def test_snapshot_refreshes_on_atoms_interval(spawn):
    ip = "127.0.41.6"
    worker = spawn.worker("agg", ip, 8000, None, ATOMSIM_METRICS_REFRESH="30")
    wait_http(f"http://{ip}:8000/health", proc=worker)
    first = scrape(f"http://{ip}:8000/metrics")
    assert complete(f"http://{ip}:8000", "hello", 3)[0] == 200
    again = scrape(f"http://{ip}:8000/metrics")
    assert value(again, "atom:generation_tokens_total") == value(first, "atom:generation_tokens_total") == 0, \
        "a snapshot is served until the next refresh, as ATOM does"
    assert value(again, "atom:metrics_last_refresh_timestamp_seconds") == value(
        first, "atom:metrics_last_refresh_timestamp_seconds")


def test_older_atom_has_no_metrics(spawn):
    ip = "127.0.41.7"
    off = spawn.worker("off", ip, 8000, None, ATOMSIM_METRICS="0", ATOMSIM_ONLY=f"{ip}:8000")
    pin = spawn.worker("pin", ip, 8001, None, ATOMSIM_ATOM_REV="pin")
    spared = spawn.worker("spared", ip, 8002, None, ATOMSIM_METRICS="0", ATOMSIM_ONLY=f"{ip}:8000")
    for port, proc in ((8000, off), (8001, pin)):
        wait_http(f"http://{ip}:{port}/health", proc=proc)
        status, body = http("GET", f"http://{ip}:{port}/metrics")
        assert status == 404 and json.loads(body) == {"detail": "Not Found"}
    wait_http(f"http://{ip}:8002/health", proc=spared)
    assert http("GET", f"http://{ip}:8002/metrics")[0] == 200, "ATOMSIM_ONLY aims the switch at one server"


def test_router_metrics_listener_is_its_own_port(spawn):
    ip = "127.0.41.8"
    router = spawn.router("router", ip, 30000, [f"http://{ip}:8010"], [f"http://{ip}:8020"],
                          "--prometheus-port", "29177")
    router.wait_line("Worker initialization job submitted", timeout=10)
    assert port_open(ip, 29177), "the exporter listens before the workers are up, as AToMesh's does"
    m = scrape(f"http://{ip}:29177/metrics")
    assert total(m, "mesh_router_requests_total") == 0
    assert not port_open(ip, 30000)
