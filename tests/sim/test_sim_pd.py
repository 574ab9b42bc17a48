"""End to end: P/D deployments on the production argv, with real Mooncake transfers."""

from __future__ import annotations

import json
import signal
import time

import pytest
from atomdeck.sim import engine
from atomdeck.sim.kv import BYTES_PER_BLOCK

from .simhelpers import MODEL, SHIM, assert_in_order, get_json, http, port_open, sse_events, wait_http

pytestmark = pytest.mark.slow

WORKER_STARTUP = [
    f"Loading tokenizer from {MODEL}...",
    f"Initializing engine with model {MODEL}...",
    "Mooncake TransferEngine loaded successfully",
    "KV transfer config loaded: {",
    "Engine Core Mgr: Creating EngineCore for DP rank 0/1",
    "Mooncake TransferEngine initialized: ip=",
    "Registering 8 RDMA chunks (",
    "batch_register_memory OK (8 chunks)",
    "Mooncake KV registration complete: role=",
    "Engine Core: cudagraph capture[",
    "Engine Core: load model runner success",
    "Engine Core: EngineCore fully initialized and ready",
    "Starting server on 0.0.0.0:",
    "Server started successfully and ready to accept requests",
]


def expected_text(prompt: str, max_tokens: int) -> str:
    """What a decode must answer when the prefill's KV bytes arrive intact."""
    nbytes = engine.num_blocks(len(engine.tokenize(prompt)), 16) * BYTES_PER_BLOCK
    return engine.detokenize(engine.generate(engine.compute_kv(MODEL, prompt, nbytes), max_tokens))


def complete(router: str, prompt: str, max_tokens: int = 12, stream: bool = False):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream}
    return http("POST", f"{router}/v1/completions", body)


def test_1p1d_router_waits_for_workers_then_relays_through_mooncake(spawn):
    p_ip, d_ip = "127.0.21.2", "127.0.21.3"
    router_url = f"http://{p_ip}:30000"
    router = spawn.router("router", p_ip, 30000, [f"http://{p_ip}:8010"], [f"http://{d_ip}:8020"])
    # AToMesh logs nothing while a worker's AddWorker job retries its /health probe (at --log-level info)
    router.wait_line("Worker initialization job submitted")
    time.sleep(1.5)
    assert "Activated" not in router.text() and not port_open(p_ip, 30000), "the router binds its port only after every worker registered"
    prefill = spawn.worker("prefill", p_ip, 8010, "kv_producer")
    decode = spawn.worker("decode", d_ip, 8020, "kv_consumer")
    wait_http(f"{router_url}/readiness", proc=router)

    assert_in_order(prefill.text(), WORKER_STARTUP)
    assert_in_order(prefill.text(), ["role=PRODUCER", *[f"write listener bound to tcp://*:{p}" for p in
                                                        range(6301, 6309)], "EngineCore fully initialized"])
    assert_in_order(decode.text(), WORKER_STARTUP)
    assert "role=CONSUMER" in decode.text() and "Mooncake notification listener bound to tcp://*:" in decode.text()
    assert "Transfer Engine RPC using P2P handshake, listening on 127.0.21.2:" in prefill.text(), "Mooncake's glog"
    assert all(port_open(p_ip, port) for port in range(6301, 6309)), "TP8 producer: 6301..6308"
    assert not port_open(d_ip, 6301), "a consumer opens no handshake port"
    assert_in_order(router.text(), [
        "Atomesh starting...", "Mode: PD Disaggregated", "Policy: random",
        'Prefill nodes: [("http://127.0.21.2:8010", None)]', 'Decode nodes: ["http://127.0.21.3:8020"]',
        "Starting router on 0.0.0.0:30000 | mode: PrefillDecode", "Worker initialization job submitted",
        "Activated 1 worker(s) (marked as healthy)",
        "All 2 expected worker endpoint(s) registered as 2 worker(s) (took ",
        "Workers initialized: 2 total, 2 healthy",
        "Querying ATOM prefill kv_transfer_info: http://127.0.21.2:8010/kv_transfer_info",
        "ATOM prefill http://127.0.21.2:8010 tp_size=8",
        "Global health checks disabled", "Router ready | workers: [", "Starting server on 0.0.0.0:30000"])

    assert get_json(f"http://{p_ip}:8010/kv_transfer_info") == (
        200, {"tp_size": 8, "dp_size": 1, "kv_role": "kv_producer", "handshake_port": 6301})
    assert get_json(f"{router_url}/v1/models")[1]["data"][0]["id"] == MODEL
    status, workers = get_json(f"{router_url}/workers")
    assert status == 200 and workers["stats"] == {"prefill_count": 1, "decode_count": 1, "regular_count": 0}
    assert get_json(f"{router_url}/readiness") == (200, {"status": "ready", "healthy_workers": 2, "total_workers": 2})

    status, body = complete(router_url, "The quick brown fox jumps over the lazy dog")
    assert status == 200, body
    answer = json.loads(body)
    text = answer["choices"][0]["text"]
    assert answer["usage"]["completion_tokens"] == 12 and answer["model"] == MODEL
    assert text == expected_text("The quick brown fox jumps over the lazy dog", 12)
    for needle in ("[PRODUCER] Received write_request for req", "[PRODUCER] block RDMA write: req=",
                   "[PRODUCER] write-done sent for req", "[PRODUCER] All 1 consumers served"):
        prefill.wait_line(needle, timeout=5)  # logged just after the reply went out: may trail it
    # ATOM head's wording (docs/log-patterns.md); each of the 8 producer ranks serves one consumer rank
    for needle in ("[CONSUMER] write_request sent for req", "at tcp://127.0.21.2:6308",
                   "[CONSUMER] Write-done received for req"):
        decode.wait_line(needle, timeout=5)

    other = json.loads(complete(router_url, "A completely different prompt about harbors")[1])
    assert other["choices"][0]["text"] != text, "tokens depend on the prompt"
    again = json.loads(complete(router_url, "The quick brown fox jumps over the lazy dog")[1])
    assert again["choices"][0]["text"] == text

    status, raw = complete(router_url, "The quick brown fox jumps over the lazy dog", stream=True)
    events = sse_events(raw)
    assert status == 200 and events[-1] == "[DONE]"
    streamed = "".join(e["choices"][0]["text"] for e in events[:-1] if "choices" in e)
    assert streamed == text
    assert events[-2]["usage"]["completion_tokens"] == 12

    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    status, body = http("POST", f"{router_url}/v1/chat/completions", chat)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"]
    status, raw = http("POST", f"{router_url}/v1/chat/completions", {**chat, "stream": True})
    chunks = [e for e in sse_events(raw) if e != "[DONE]" and e.get("choices")]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == json.loads(body)["choices"][0][
        "message"]["content"]

    status, body = http("POST", f"{router_url}/v1/completions", {"model": "DeepSeek-V4-Pro", "prompt": "x"})
    assert status == 400 and b"does not match server model" in body, "the wrong served name is an error"


def test_2p1d_dp_attention_uses_both_prefills_and_stays_small(spawn):
    p0, p1, d = "127.0.22.2", "127.0.22.4", "127.0.22.3"
    dpa = ("--enable-dp-attention", "--enable-tbo")
    started = time.monotonic()
    procs = [
        spawn.worker("prefill0", p0, 8010, "kv_producer", *dpa),
        spawn.worker("prefill1", p1, 8010, "kv_producer", *dpa),
        spawn.worker("decode", d, 8020, "kv_consumer", *dpa, "--cudagraph-capture-sizes", "[1,2,4,8,16,24,32]"),
    ]
    router = spawn.router("router", p0, 30000, [f"http://{p0}:8010", f"http://{p1}:8010"], [f"http://{d}:8020"])
    wait_http(f"http://{p0}:30000/readiness", proc=router)
    ready_after = time.monotonic() - started
    rss_mb = sum(p.rss_kb() for p in [*procs, router]) / 1024
    print(f"\n2P1D: ready in {ready_after:.2f}s, RSS total {rss_mb:.1f} MB")
    assert rss_mb < 400

    for ip in (p0, p1):
        assert get_json(f"http://{ip}:8010/kv_transfer_info")[1] == {
            "tp_size": 1, "dp_size": 8, "kv_role": "kv_producer", "handshake_port": 6301}
        assert all(port_open(ip, port) for port in range(6301, 6309)), "DPA8: one listener per DP rank"
    assert "Engine Core Mgr: Creating EngineCore for DP rank 7/8" in procs[0].text()
    assert "ATOM prefill http://127.0.22.4:8010 tp_size=1" in router.text()

    for i in range(40):
        prompt = f"request {i}: tell me about block transfers"
        status, body = complete(f"http://{p0}:30000", prompt, max_tokens=4)
        assert status == 200, body
        assert json.loads(body)["choices"][0]["text"] == expected_text(prompt, 4)
        if all("[PRODUCER] Received write_request" in p.text() for p in procs[:2]):
            break
    for p in procs[:2]:  # both prefills served (logged just after sending: the reply may arrive first)
        p.wait_line("[PRODUCER] write-done sent for req", timeout=5)


def test_aggregate_mode_routes_to_workers_directly(spawn):
    ip = "127.0.24.2"
    w1 = spawn.worker("w1", ip, 8010, None)
    w2 = spawn.worker("w2", "127.0.24.3", 8010, None)
    router = spawn.start("router", ["atomesh", "launch", "--host", "0.0.0.0", "--port", "30000", "--worker-urls",
                                    f"http://{ip}:8010", "http://127.0.24.3:8010", "--policy", "round_robin",
                                    "--backend", "atom", "--prometheus-port", "29100"], ATOMSIM_NODE_IP=ip)
    wait_http(f"http://{ip}:30000/readiness", proc=router)
    assert "Mode: Regular (atom)" in router.text()
    assert get_json(f"http://{ip}:30000/workers")[1]["stats"] == {"prefill_count": 0, "decode_count": 0,
                                                                 "regular_count": 2}
    for _ in range(2):
        status, body = complete(f"http://{ip}:30000", "aggregate prompt", max_tokens=6)
        assert status == 200 and json.loads(body)["choices"][0]["text"] == expected_text("aggregate prompt", 6)
    for w in (w1, w2):  # round robin (the access log line may trail the reply)
        w.wait_line('"POST /v1/completions HTTP/1.1" 200 OK', timeout=5)
    assert "Mooncake" not in w1.text(), "no KV connector without --kv-transfer-config"


def test_sigterm_exits_0_and_closes_ports(spawn):
    p_ip, d_ip = "127.0.25.2", "127.0.25.3"
    prefill = spawn.worker("prefill", p_ip, 8010, "kv_producer")
    decode = spawn.worker("decode", d_ip, 8020, "kv_consumer")
    router = spawn.router("router", p_ip, 30000, [f"http://{p_ip}:8010"], [f"http://{d_ip}:8020"])
    wait_http(f"http://{p_ip}:30000/readiness", proc=router)

    router.signal(signal.SIGTERM)
    assert router.wait_exit(10) == 0
    assert "Received terminate signal, starting graceful shutdown" in router.text()
    assert not port_open(p_ip, 30000)

    prefill.signal(signal.SIGTERM)
    assert prefill.wait_exit(10) == 0
    assert_in_order(prefill.text(), ["INFO:     Shutting down", "Server shutting down, releasing resources...",
                                     "INFO:     Finished server process"])
    assert not port_open(p_ip, 8010) and not port_open(p_ip, 6301)

    decode.signal(signal.SIGINT)
    assert decode.wait_exit(10) == 0
    assert_in_order(decode.text(), ["Received SIGINT, shutting down engine...", "Engine shutdown complete."])


def test_sigterm_during_startup_exits_0(spawn):
    worker = spawn.worker("slow", "127.0.25.4", 8010, "kv_producer", ATOMSIM_SLOW_LOAD="30")
    worker.wait_line("Engine Core Mgr: Creating EngineCore for DP rank 0/1")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(10) == 0
    assert "Received SIGTERM, shutting down engine..." in worker.text()


def _no_mooncake(tmp_path) -> str:
    """A PYTHONPATH on which `import mooncake.engine` fails as it does without Debian's libibverbs1."""
    fake = tmp_path / "fake" / "mooncake"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('libibverbs.so.1: cannot open shared object file')\n")
    return f"{fake.parent}:{SHIM}"


def test_without_the_mooncake_engine_the_demo_still_moves_kv_bytes(spawn, tmp_path):
    p_ip, d_ip = "127.0.21.12", "127.0.21.13"
    path = _no_mooncake(tmp_path)
    router = spawn.router("router", p_ip, 30000, [f"http://{p_ip}:8010"], [f"http://{d_ip}:8020"])
    prefill = spawn.worker("prefill", p_ip, 8010, "kv_producer", PYTHONPATH=path)
    decode = spawn.worker("decode", d_ip, 8020, "kv_consumer", PYTHONPATH=path)
    wait_http(f"http://{p_ip}:30000/readiness", proc=router)
    for proc in (prefill, decode):
        assert_in_order(proc.text(), ["Mooncake is not available", "the simulator's TCP engine instead",
                                      "Mooncake KV registration complete"])
    status, body = complete(f"http://{p_ip}:30000", "The quick brown fox")
    assert status == 200 and json.loads(body)["choices"][0]["text"] == expected_text("The quick brown fox", 12)
    decode.wait_line("[CONSUMER] Write-done received", timeout=5)


def test_mooncake_required_fails_like_atom(spawn, tmp_path):
    ip = "127.0.21.14"
    w = spawn.worker("prefill", ip, 8010, "kv_producer", PYTHONPATH=_no_mooncake(tmp_path), ATOMSIM_MOONCAKE="required")
    assert w.wait_exit() != 0
    assert "RuntimeError: Mooncake is not installed but kv_connector='mooncake' was requested" in w.text()
