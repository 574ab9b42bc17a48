"""The simulated ATOM and AToMesh command lines accept the real spellings and nothing else."""

from __future__ import annotations

import subprocess

import pytest
from atomdeck.sim.router_args import build_parser as router_parser
from atomdeck.sim.router_args import parse as parse_router
from atomdeck.sim.router_args import split_prefill_args
from atomdeck.sim.worker_args import build_parser
from hypothesis import given
from hypothesis import strategies as st

from .simhelpers import MODEL, Spawner, worker_argv


def parse_worker(argv: list[str]):
    return build_parser().parse_args(argv)


def test_production_prefill_argv_parses_with_atom_meanings():
    argv = worker_argv(8010, "kv_producer", "10.0.0.20")[3:]
    args = parse_worker(argv)
    assert args.model == MODEL
    assert args.server_port == 8010
    assert args.port == 8006, "--port is the engine's internal port, not the HTTP port"
    assert args.tensor_parallel_size == 8
    assert args.kv_cache_dtype == "fp8"
    assert args.enable_prefix_caching is False
    assert args.trust_remote_code is True
    assert '"kv_role":"kv_producer"' in args.kv_transfer_config


def test_recipe_flags_parse():
    args = parse_worker([
        "--model", MODEL, "-tp", "8", "--enable-dp-attention", "--enable-tbo", "--enable-expert-parallel",
        "--method", "mtp", "--num-speculative-tokens", "3", "--cudagraph-capture-sizes", "[1,2,4,8,16,24]",
        "--max-num-seqs", "256", "--max-model-len", "10240", "--max-num-batched-tokens", "32768",
        "--gpu-memory-utilization", "0.85", "--scheduler-delay-factor", "0.5",
        "--online_quant_config", '{"global_quant_config": "ptpc_fp8"}', "--enable_prefix_caching",
    ])
    assert args.enable_tbo == "prefill", "a bare --enable-tbo means prefill"
    assert args.method == "mtp" and args.num_speculative_tokens == 3
    assert args.cudagraph_capture_sizes == "[1,2,4,8,16,24]", "one string, parsed later"
    assert args.online_quant_config == {"global_quant_config": "ptpc_fp8"}
    assert args.enable_prefix_caching is True
    assert parse_worker(["--enable-tbo", "all"]).enable_tbo == "all"
    assert parse_worker(["--tensor-parallel-size", "4"]).tensor_parallel_size == 4


@pytest.mark.parametrize("bad", [
    ["--kv-cache-dtype", "fp8"],            # ATOM registers only the underscore spelling
    ["--kv_cache_dtype", "fp16"],           # not a choice
    ["--no-enable-prefix-caching"],         # hyphenated negative of --enable_prefix_caching
    ["--server_port", "8010"],
    ["--tp", "8"],                          # only -tp or --tensor-parallel-size
    ["--kv-transfer", "{}"],                # abbreviations are refused
    ["--enable-tbo", "decode"],
    ["--method", "medusa"],
    ["--served-model", "x"],
])
def test_misspelled_or_unknown_flags_exit_2(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_worker(["--model", MODEL, *bad])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_worker_process_rejects_hyphenated_kv_cache_dtype(tmp_path):
    spawner = Spawner(tmp_path)
    argv = [a if a != "--kv_cache_dtype" else "--kv-cache-dtype" for a in worker_argv(8010, None, "127.0.0.1")]
    result = subprocess.run(argv, env=spawner.env(), capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "unrecognized arguments: --kv-cache-dtype" in result.stderr
    assert "Loading tokenizer" not in result.stdout


def test_worker_process_rejects_unknown_flag(tmp_path):
    spawner = Spawner(tmp_path)
    result = subprocess.run(worker_argv(8010, None, "127.0.0.1", "--no-such-flag"), env=spawner.env(),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in result.stderr


def test_prefill_entries_are_split_like_atomesh():
    prefills, rest = split_prefill_args([
        "launch", "--prefill", "http://a:8010", "9001", "--prefill", "http://b:8010", "none",
        "--prefill", "http://c:8010", "--decode", "http://d:8020", "--pd-disaggregation"])
    assert prefills == [("http://a:8010", 9001), ("http://b:8010", None), ("http://c:8010", None)]
    assert rest == ["launch", "--decode", "http://d:8020", "--pd-disaggregation"]


def test_router_defaults_are_atomesh_defaults():
    args, prefills = parse_router(["launch", "--pd-disaggregation", "--prefill", "http://p:8010",
                                   "--decode", "http://d1:8020", "--decode", "http://d2:8020"])
    assert prefills == [("http://p:8010", None)]
    assert args.decode == ["http://d1:8020", "http://d2:8020"]
    assert (args.port, args.policy, args.backend, args.prometheus_port) == (30000, "cache_aware", "sglang", 29000)
    assert (args.worker_startup_timeout_secs, args.request_timeout_secs, args.shutdown_grace_period_secs) == \
        (1800, 1800, 180)
    assert router_parser().parse_args(["--worker-urls", "http://a:1", "http://b:2"]).worker_urls == \
        ["http://a:1", "http://b:2"]


@pytest.mark.parametrize("bad,message", [
    (["--bogus"], "error: unexpected argument '--bogus' found"),
    (["--policy", "least_load"], "error: invalid value 'least_load' for '--policy'"),
    (["--backend", "trtllm"], "error: invalid value 'trtllm'"),
])
def test_router_process_rejects_bad_flags(tmp_path, bad, message):
    spawner = Spawner(tmp_path)
    result = subprocess.run(["atomesh", "launch", "--host", "0.0.0.0", *bad], env=spawner.env(),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Atomesh starting" not in result.stdout


urls = st.from_regex(r"http://127\.0\.[0-9]{1,3}\.[0-9]{1,3}:[0-9]{4}", fullmatch=True)


@given(st.lists(st.tuples(urls, st.one_of(st.none(), st.integers(1, 65535))), min_size=1, max_size=4),
       st.lists(urls, max_size=3), st.booleans())
def test_prefill_split_round_trips(prefills, decodes, none_word):
    argv = ["launch", "--pd-disaggregation"]
    for url, port in prefills:
        argv += ["--prefill", url] + ([str(port)] if port is not None else (["none"] if none_word else []))
    for url in decodes:
        argv += ["--decode", url]
    got, rest = split_prefill_args(argv)
    assert got == prefills
    assert rest == ["launch", "--pd-disaggregation"] + [t for u in decodes for t in ("--decode", u)]
