"""Each fault from sim/README.md produces its documented lines and exit codes."""

from __future__ import annotations

import json
import time

import pytest

from .simhelpers import MODEL, assert_in_order, http, port_open, wait_http

pytestmark = pytest.mark.slow


def completion(url: str, prompt: str = "hello world", max_tokens: int = 4, **extra) -> tuple[int, bytes]:
    return http("POST", f"{url}/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                                                  **extra})


def pd(spawn, block: str, prefill_env: dict | None = None, decode_env: dict | None = None, *router_extra: str):
    p_ip, d_ip = f"{block}.2", f"{block}.3"
    prefill = spawn.worker("prefill", p_ip, 8010, "kv_producer", **(prefill_env or {}))
    decode = spawn.worker("decode", d_ip, 8020, "kv_consumer", **(decode_env or {}))
    router = spawn.router("router", p_ip, 30000, [f"http://{p_ip}:8010"], [f"http://{d_ip}:8020"], *router_extra)
    return prefill, decode, router


@pytest.mark.parametrize("fault,code,lines", [
    ({"ATOMSIM_CRASH_AT": "tokenizer"}, 1, ["Loading tokenizer from", "Traceback (most recent call last):",
                                            "OSError: Can't load tokenizer for 'deepseek-ai/DeepSeek-V4-Pro'"]),
    ({"ATOMSIM_CRASH_AT": "engine:3"}, 3, ["Initializing engine with model", "Traceback (most recent call last):",
                                           "torch.OutOfMemoryError: HIP out of memory"]),
    ({"ATOMSIM_CRASH_AT": "mooncake"}, 1, ["Mooncake TransferEngine loaded successfully",
                                           ("RuntimeError: Mooncake TransferEngine.initialize() failed (ret=-1) on "
                                           "ip=127.0.23.2, protocol=tcp")]),
    ({"ATOMSIM_CRASH_AT": "kv_register", "ATOMSIM_EXIT_CODE": "7"}, 7,
     ["Mooncake TransferEngine initialized", "batch_register_memory FAILED (ret=-1)",
      "RuntimeError: Mooncake register_memory failed"]),
    ({"ATOMSIM_CRASH_AT": "cudagraph"}, 1, ["Mooncake write listener bound to tcp://*:6308",
                                            "HIP out of memory during cudagraph capture"]),
    ({"ATOMSIM_CRASH_AT": "ready"}, 1, ["Engine Core: load model runner success",
                                        "RuntimeError: Engine core initialization failed"]),
])
def test_crash_while_loading(spawn, fault, code, lines):
    worker = spawn.worker("prefill", "127.0.23.2", 8010, "kv_producer", **fault)
    assert worker.wait_exit(15) == code
    text = worker.text()
    assert_in_order(text, lines)
    assert "Starting server on" not in text
    assert not port_open("127.0.23.2", 8010)


def test_slow_load_delays_the_port(spawn):
    started = time.monotonic()
    worker = spawn.worker("prefill", "127.0.23.5", 8010, "kv_producer", ATOMSIM_SLOW_LOAD="1.5")
    wait_http("http://127.0.23.5:8010/health", proc=worker)
    assert time.monotonic() - started >= 1.5


def test_never_bind_prints_ready_but_keeps_the_port_closed(spawn):
    worker = spawn.worker("prefill", "127.0.23.6", 8010, "kv_producer", ATOMSIM_NEVER_BIND="1")
    text = worker.wait_line("Engine Core: EngineCore fully initialized and ready")
    time.sleep(1.0)
    assert worker.popen.poll() is None, "stays alive"
    assert "Starting server on" not in worker.text() and not port_open("127.0.23.6", 8010)
    assert "Mooncake write listener bound to tcp://*:6301" in text


def test_wrong_kv_role_makes_the_router_exit_1(spawn):
    _, _, router = pd(spawn, "127.0.30", {"ATOMSIM_KV_ROLE": "kv_consumer"})
    assert router.wait_exit(15) == 1
    assert_in_order(router.text(), [
        "Querying ATOM prefill kv_transfer_info: http://127.0.30.2:8010/kv_transfer_info",
        'Error: "http://127.0.30.2:8010 is not a prefill (kv_role=Some(\\"kv_consumer\\"), expected kv_producer)"'])
    assert "Starting server on 0.0.0.0:30000" not in router.text()


def hangs(url: str, seconds: float = 2.0, **body) -> bool:
    """A completion that gets no answer within ``seconds`` (the real decode waits for write-done forever)."""
    try:
        http("POST", f"{url}/v1/completions", {"model": MODEL, "prompt": "hello world", "max_tokens": 4, **body},
             timeout=seconds)
    except OSError:
        return True
    return False


def no_failure_lines(text: str) -> bool:
    return not any(word in text for word in ("Failed", "failed", "Timed out", "mismatch", "Error", "rror:"))


def test_handshake_refuse_hangs_the_request_and_logs_nothing(spawn):
    prefill, decode, router = pd(spawn, "127.0.26", {"ATOMSIM_HANDSHAKE": "refuse"},
                                 {"ATOMSIM_METRICS_REFRESH": "0"})
    wait_http("http://127.0.26.2:30000/readiness", proc=router)
    prefill.wait_line("Mooncake write listener bound to tcp://*:6301", timeout=5)
    assert not port_open("127.0.26.2", 6301)
    assert hangs("http://127.0.26.2:30000")
    decode.wait_line("[CONSUMER] write_request sent for req 0 (transfer_id=0) to stage 0/1 at tcp://127.0.26.2:6301",
                     timeout=5)
    status, metrics = http("GET", "http://127.0.26.3:8020/metrics")
    assert b"atom:requests_parked_kv_load 1.0" in metrics, "the decode parks the request, as ATOM does"
    assert "Write-done received" not in decode.text()
    for name, text in (("prefill", prefill.text()), ("decode", decode.text()),
                       ("router", router.text().split("Starting server on", 1)[1])):
        assert no_failure_lines(text), f"{name} printed a failure line: {text[-2000:]}"


def test_handshake_break_logs_mooncakes_failure_and_head_sends_no_write_done(spawn):
    prefill, decode, router = pd(spawn, "127.0.27", {"ATOMSIM_HANDSHAKE": "break"})
    wait_http("http://127.0.27.2:30000/readiness", proc=router)
    assert hangs("http://127.0.27.2:30000")
    text = prefill.wait_line("[PRODUCER] transfer failed for req 0 (transfer_id=0); not sending write-done", timeout=5)
    assert_in_order(text, ["[PRODUCER] Received write_request for req 0",
                           "[PRODUCER] block RDMA chunk error -1 for req 0", "[PRODUCER] block transfer failed for req 0",
                           "[PRODUCER] transfer failed for req 0"])
    assert "[PRODUCER] write-done sent" not in text
    assert "Write-done received" not in decode.text() and no_failure_lines(decode.text())


def test_handshake_break_at_the_pin_answers_from_the_wrong_bytes(spawn):
    pin = {"ATOMSIM_ATOM_REV": "pin"}
    prefill, decode, router = pd(spawn, "127.0.32", {"ATOMSIM_HANDSHAKE": "break", **pin}, pin)
    spawn.worker("good-prefill", "127.0.33.2", 8010, "kv_producer", **pin)
    spawn.worker("good-decode", "127.0.33.3", 8020, "kv_consumer", **pin)
    healthy_r = spawn.router("good-router", "127.0.33.2", 30000, ["http://127.0.33.2:8010"],
                             ["http://127.0.33.3:8020"], "--prometheus-port", "29101")
    wait_http("http://127.0.32.2:30000/readiness", proc=router)
    wait_http("http://127.0.33.2:30000/readiness", proc=healthy_r)
    status, body = completion("http://127.0.32.2:30000")
    assert status == 200, body
    status, good = completion("http://127.0.33.2:30000")
    assert status == 200
    assert json.loads(body)["choices"][0]["text"] != json.loads(good)["choices"][0]["text"], "garbage in, garbage out"
    assert_in_order(prefill.text(), ["[PRODUCER] block transfer failed for req 0", "[PRODUCER] write-done sent for req 0"])
    assert_in_order(decode.text(), ["[CONSUMER] Sending write_request for req 0 (transfer_id=0) to tcp://127.0.32.2:6301",
                                    "[CONSUMER] write_request sent for req 0 to tcp://127.0.32.2:6301",
                                    "[CONSUMER] Write-done received for req 0, done_recving now: {0}"])
    assert no_failure_lines(decode.text())


def test_handshake_lose_times_out_on_the_producer_only(spawn):
    p_ip, d_ip = "127.0.28.2", "127.0.28.3"
    prefill = spawn.worker("prefill", p_ip, 8010, "kv_producer", ATOMSIM_HANDSHAKE="lose")
    decode = spawn.worker("decode", d_ip, 8020, "kv_consumer")
    wait_http(f"http://{p_ip}:8010/health", proc=prefill)
    wait_http(f"http://{d_ip}:8020/health", proc=decode)
    status, body = completion(f"http://{p_ip}:8010", max_tokens=1, kv_transfer_params={"do_remote_decode": True})
    assert status == 200
    params = json.loads(body)["kv_transfer_params"]
    assert hangs(f"http://{d_ip}:8020", kv_transfer_params=params)
    prefill.wait_line("[PRODUCER] Timed out waiting for prefill data for transfer_id=0 (req_id=0). Available keys: []",
                      timeout=5)
    assert "Write-done received" not in decode.text() and no_failure_lines(decode.text())


def test_flood_rate_is_roughly_right(spawn):
    worker = spawn.worker("prefill", "127.0.23.7", 8010, None, ATOMSIM_FLOOD="200")
    wait_http("http://127.0.23.7:8010/health", proc=worker)
    before = worker.text().count("Engine Core: running=0 reqs")
    time.sleep(2.0)
    lines = worker.text().count("Engine Core: running=0 reqs") - before
    assert 250 <= lines <= 550, lines


def test_only_targets_one_of_two_prefills(spawn):
    env = {"ATOMSIM_CRASH_AT": "ready", "ATOMSIM_ONLY": "127.0.29.4"}
    healthy = spawn.worker("prefill0", "127.0.29.2", 8010, "kv_producer", **env)
    broken = spawn.worker("prefill1", "127.0.29.4", 8010, "kv_producer", **env)
    assert broken.wait_exit(15) == 1
    wait_http("http://127.0.29.2:8010/health", proc=healthy)
    # ip:port form: same address, only the matching server port is hit
    a = spawn.worker("a", "127.0.29.5", 8010, None, ATOMSIM_NEVER_BIND="1", ATOMSIM_ONLY="127.0.29.5:8011")
    b = spawn.worker("b", "127.0.29.5", 8011, None, ATOMSIM_NEVER_BIND="1", ATOMSIM_ONLY="127.0.29.5:8011")
    wait_http("http://127.0.29.5:8010/health", proc=a)
    b.wait_line("EngineCore fully initialized and ready")
    time.sleep(0.5)
    assert not port_open("127.0.29.5", 8011)


def test_crash_at_serving_and_crash_after(spawn):
    first = spawn.worker("first", "127.0.23.8", 8010, None, ATOMSIM_CRASH_AT="serving")
    wait_http("http://127.0.23.8:8010/health", proc=first)
    try:
        completion("http://127.0.23.8:8010")
    except OSError:
        pass
    assert first.wait_exit(10) == 1
    first.wait_line("RuntimeError: EngineCore encountered an issue", timeout=5)

    later = spawn.worker("later", "127.0.23.9", 8010, None, ATOMSIM_CRASH_AFTER="0.5")
    wait_http("http://127.0.23.9:8010/health", proc=later)
    assert later.wait_exit(10) == 1
    assert_in_order(later.text(), ["Server started successfully", "died unexpectedly", "Traceback"])


def test_router_faults(spawn):
    p_ip, d_ip = "127.0.23.10", "127.0.23.11"
    spawn.worker("prefill", p_ip, 8010, "kv_producer")
    spawn.worker("decode", d_ip, 8020, "kv_consumer")
    urls = ([f"http://{p_ip}:8010"], [f"http://{d_ip}:8020"])
    never = spawn.router("never", p_ip, 30000, *urls, ATOMSIM_NEVER_BIND="1")
    never.wait_line("Router ready | workers:")
    time.sleep(0.5)
    assert never.popen.poll() is None and not port_open(p_ip, 30000)
    assert "Starting server on" not in never.text()
    crash = spawn.router("crash", p_ip, 30001, *urls, ATOMSIM_CRASH_AT="workers:4")
    assert crash.wait_exit(15) == 4
    assert_in_order(crash.text(), ["Workers initialized: 2 total, 2 healthy", 'Error: "Failed to create router'])


def test_dead_prefill_gives_502_with_atomesh_message(spawn):
    _, _, router = pd(spawn, "127.0.31", {"ATOMSIM_CRASH_AT": "serving"})
    wait_http("http://127.0.31.2:30000/readiness", proc=router)
    status, body = completion("http://127.0.31.2:30000")
    assert status == 502 and b"Prefill server error" in body
    router.wait_line("ERROR mesh::routers::http_pd_router: ATOM prefill http://127.0.31.2:8010 request_id=xfer-",
                     timeout=5)
    router.wait_line("failed: error sending request for url (http://127.0.31.2:8010/v1/completions)", timeout=5)
