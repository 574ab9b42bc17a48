"""Recipes: every shipped one loads; every mistake is reported by key path, word for word."""

from __future__ import annotations

import pytest
from atomdeck.core.config.errors import ConfigError
from atomdeck.core.config.paths import shipped_recipes
from atomdeck.core.config.recipe import WORKER_OWNED, load_recipe, parse_recipe

BASE = "name: t\nmodel: {path: deepseek-ai/DeepSeek-V4-Pro}\n"


def issues(text: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_recipe(text, "r.yaml")
    return [str(i) for i in e.value.issues]


@pytest.mark.parametrize("path", shipped_recipes(), ids=lambda p: p.stem)
def test_shipped_recipes_load(path):
    r = load_recipe(path)
    assert r.name == path.stem
    assert r.model.client_name == r.model.path  # ATOM serves the literal --model


def test_defaults_follow_inferencex():
    r = parse_recipe(BASE)
    assert (r.ports.prefill_http, r.ports.decode_http, r.ports.router, r.ports.handshake,
            r.ports.router_prometheus) == (8010, 8020, 30000, 6301, 29100)
    assert r.router.policy == "random" and r.engine == "atom" and r.router.type == "atomesh"
    assert r.model.served_name is None and r.model.client_name == "deepseek-ai/DeepSeek-V4-Pro"


def test_unknown_key_suggests_the_right_one():
    assert issues(BASE + "prefill: {workerz: 2}\n") == [
        "r.yaml:3: prefill.workerz: unknown key; remove it; did you mean 'workers'?"]


def test_wrong_types_name_the_key_and_the_value():
    assert issues(BASE + "prefill:\n  tp: eight\ndecode:\n  dp_attention: maybe\n") == [
        "r.yaml:4: prefill.tp: must be a whole number, got 'eight'",
        "r.yaml:6: decode.dp_attention: must be true or false, got 'maybe'",
    ]


def test_choices_are_listed():
    assert issues(BASE + "router: {policy: fastest}\n") == [
        "r.yaml:3: router.policy: must be one of 'random', 'round_robin', 'cache_aware', 'power_of_two' "
        "or 'prefix_hash', got 'fastest'"]


def test_missing_model():
    assert issues("name: t\n") == ["r.yaml:1: model: is required; add it"]


def test_the_routers_worker_startup_timeout_follows_health_worker_timeout():
    """AToMesh's own default (1800 s) would give up on a model atomdeck still waits for (2500 s)."""
    from atomdeck.core.engines import frontend as get_frontend

    assert issues(BASE + "router:\n  args: {worker_startup_timeout_secs: 3600}\n") == [
        "r.yaml:4: router.args.worker_startup_timeout_secs: is managed by atomdeck; remove it (set "
        "health.worker_timeout_s instead: the router waits for the workers as long as atomdeck does, plus "
        "health.router_timeout_s)"]
    assert "worker-startup-timeout-secs" in get_frontend("atomesh").owned_flags
    from tests.unit.helpers import lab_assess

    a = lab_assess("health: {worker_timeout_s: 3000.5, router_timeout_s: 300}\n")
    router = next(p for p in a.processes if p.name == "router")
    i = router.argv.index("--worker-startup-timeout-secs")
    assert router.argv[i + 1] == "3301"  # never before atomdeck's own verdict (workers, then router)


@pytest.mark.parametrize("spelling", ["server-port", "--server_port", "Server_Port", "tp", "-tp",
                                      "tensor_parallel_size", "--tensor-parallel-size", "model", "host",
                                      "kv_transfer_config", "--kv-transfer-config"])
def test_reserved_worker_flags_refused_in_any_spelling(spelling):
    out = issues(BASE + f"decode:\n  args:\n    '{spelling}': 1\n")
    assert len(out) == 1
    assert out[0].startswith(f"r.yaml:5: decode.args.{spelling}: is managed by atomdeck; remove it (")


def test_reserved_flag_message_says_what_to_set_instead():
    assert issues(BASE + "prefill:\n  args: {server-port: 9000}\n") == [
        "r.yaml:4: prefill.args.server-port: is managed by atomdeck; remove it (set ports.prefill_http instead)"]
    assert issues(BASE + "router:\n  args: {backend: sglang}\n") == [
        "r.yaml:4: router.args.backend: is managed by atomdeck; remove it "
        "(AToMesh must run with --backend atom; atomdeck sets it)"]
    assert set(WORKER_OWNED) == {"model", "host", "server-port", "tp", "tensor-parallel-size", "kv-transfer-config"}


def test_native_spellings_pass_through():
    r = parse_recipe(BASE + "prefill:\n  args: {kv_cache_dtype: fp8, no-enable_prefix_caching: true}\n")
    assert r.prefill.args == {"kv_cache_dtype": "fp8", "no-enable_prefix_caching": True}


def test_env_names_and_values():
    assert issues(BASE + "env: {'BAD NAME': 1}\n") == [
        "r.yaml:3: env: environment variable name 'BAD NAME' is not valid; use letters, digits and _"]
    r = parse_recipe(BASE + "env: {A: 1, B: true, C: 'x y;$(z)'}\n")
    assert r.env == {"A": "1", "B": "1", "C": "x y;$(z)"}


def test_yaml_syntax_error_names_the_line():
    # issue 16: plain words first, the parser's own words kept at the end (they are what people search for)
    assert issues(BASE + "prefill: [1, 2\n") == [
        "r.yaml:4: (top level): is not valid YAML: the `[` opened on line 3 is not closed with `]` (or an item "
        "lacks a comma) before line 4 (parser: expected ',' or ']', but got '<stream end>')"]


def test_duplicate_keys_are_refused():
    out = issues(BASE + "prefill: {tp: 8}\nprefill: {tp: 4}\n")
    assert out == ["r.yaml:4: (top level): is not valid YAML: key 'prefill' appears twice (first on line 3); keep one"]


def test_not_a_mapping():
    assert issues("- a\n- b\n") == ["r.yaml: (top level): must be a mapping of keys to values, got ['a', 'b']"]


def test_roles_need_workers():
    assert issues(BASE + "decode: {workers: 0}\n") == [
        "r.yaml:3: decode.workers: a disaggregated recipe needs at least one decode worker; set it to 1 or more"]


def test_binary_file(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_bytes(b"\x00\x01\xff")
    with pytest.raises(ConfigError) as e:
        load_recipe(p)
    assert str(e.value) == f"{p}: (top level): is not UTF-8 text; give a YAML file"
    p.write_bytes(b"name: t\x00\n")
    with pytest.raises(ConfigError) as e:
        load_recipe(p)
    assert str(e.value) == f"{p}: (top level): is not a text file (contains NUL bytes); give a YAML file"


def test_to_yaml_round_trips():
    r = parse_recipe(BASE + "prefill: {workers: 2, args: {kv_cache_dtype: fp8}}\nbenchmark: {concurrencies: [4, 8]}\n")
    assert parse_recipe(r.to_yaml()) == r
