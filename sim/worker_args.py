"""ATOM's command line for ``python3 -m atom.entrypoints.openai_server``, spelled as ATOM spells it.

Mirrors ``EngineArgs.add_cli_args`` (atom/model_engine/arg_utils.py) plus the server flags
``main()`` adds. ATOM mixes hyphens and underscores (``--kv_cache_dtype``,
``--enable_prefix_caching``/``--no-enable_prefix_caching``, ``--online_quant_config``); a plain
argparse parser accepts only the registered spelling, so ``--kv-cache-dtype`` fails with exit 2.
Abbreviations are refused too, so a truncated flag cannot slip through.
"""

from __future__ import annotations

import argparse
import json

DP_LB_STRATEGIES = ("round_robin", "least_requests", "least_tokens")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="ATOM OpenAI API Server", allow_abbrev=False)
    add = p.add_argument
    add("--model", type=str, default="Qwen/Qwen3-0.6B", help="Model name or path.")
    add("--served-model-name", type=str, default=None,
        help="Override the model name returned by the API (default: the --model value).")
    add("--trust-remote-code", action="store_true", help="Trust remote code when loading model.")
    add("--tensor-parallel-size", "-tp", type=int, default=1, help="Tensor parallel size.")
    add("--pipeline-parallel-size", "-pp", type=int, default=1, help="Pipeline parallel size.")
    add("--prefill-context-parallel-size", "-pcp", type=int, default=1, help="Prefill context parallel size.")
    add("--data-parallel-size", "-dp", type=int, default=1, help="Data parallel size.")
    add("--data-parallel-size-local", type=int, default=None, help="Data-parallel ranks on this node.")
    add("--data-parallel-rank", type=int, default=0, help="First global data-parallel rank of this node.")
    add("--data-parallel-master-ip", type=str, default="127.0.0.1", help="IP of global DP rank 0.")
    add("--data-parallel-master-port", type=int, default=29500, help="DP rendezvous port.")
    add("--data-parallel-base-port", type=int, default=None, help="Model-runner rendezvous port.")
    add("--decode-context-parallel-size", "-dcp", type=int, default=1, help="Decode context parallel size.")
    add("--enforce-eager", action="store_true", help="Enforce eager mode execution.")
    add("--enable_prefix_caching", action=argparse.BooleanOptionalAction, default=True,
        help="Enable prefix caching (default: enabled). Use --no-enable_prefix_caching to disable.")
    add("--port", type=int, default=8006, help="Engine internal port")
    add("--kv_cache_dtype", choices=["bf16", "fp8"], type=str, default="bf16",
        help="KV cache type. Default is 'bf16'.")
    add("--index-cache-dtype", "--index_cache_dtype", choices=["bf16", "fp8", "fp4"], type=str, default=None,
        help="Index cache type. Defaults to --kv_cache_dtype.")
    add("--block-size", type=int, default=16, help="KV cache block size.")
    add("--max-model-len", type=int, default=None, help="Maximum model context length.")
    add("--cudagraph-capture-sizes", type=str, default="[1,2,4,8,16,32,48,64,128,256,512]",
        help="Sizes to capture cudagraph. Example: [1,2,4,8,16]")
    add("--level", type=int, default=3, help="The level of compilation (0-3).")
    add("--cudagraph-mode", type=str, default="FULL",
        choices=["NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE", "AF_PIECEWISE"], help="CUDA graph runtime mode.")
    add("--load_dummy", nargs="?", const="empty", default=None, choices=["empty", "zero", "xavier"],
        help="Use dummy weights instead of reading the checkpoint.")
    add("--enable-expert-parallel", action="store_true", help="Enable expert parallel(EP MoE).")
    add("--fake-eplb", action="store_true", help="Synthetic uniform MoE router logits.")
    add("--torch-profiler-dir", type=str, default=None, help="Directory to save torch profiler traces")
    add("--enable-dp-attention", action="store_true", help="Enable DP attention.")
    add("--dp-load-balance", type=str, default="least_requests", choices=list(DP_LB_STRATEGIES),
        help="Strategy used to route a request to a DP engine rank.")
    add("--enable-tbo", nargs="?", const="prefill", default=None, choices=["prefill", "all"],
        help="Enable TBO (Two-Batch Overlap): '--enable-tbo' or 'prefill' for prefill only, 'all' for both.")
    add("--all2all-backend", nargs="?", const="high-throughput", default=None,
        choices=["high-throughput", "low-latency", "rccl", "none"], help="Routed MoE transport.")
    add("--moe-backend", type=str, default="standard", choices=["standard", "mega"], help="MoE implementation.")
    add("--method", type=str, default=None, choices=["mtp", "eagle3", "dspark"], help="Speculative method")
    add("--num-speculative-tokens", type=int, default=1, help="Number of speculative tokens per iteration")
    add("--draft-model", type=str, default=None, help="Path to a standalone draft-model checkpoint.")
    add("--spec-decode-acceptance-length", type=float, default=None, help="Force a mean acceptance length.")
    add("--spec-decode-acceptance-rate", type=float, default=None, help="Force a mean acceptance rate.")
    add("--max-num-batched-tokens", type=int, default=16384, help="Maximum number of tokens to batch together")
    add("--long-prefill-token-threshold", type=int, default=0, help="Cap on one request's per-step prefill.")
    add("--attn-prefill-chunk-size", type=int, default=16384, help="MLA chunked-prefill budget in tokens.")
    add("--state-checkpoint-interval-tokens", type=int, default=8192, help="State checkpoint interval.")
    add("--state-checkpoint-demand", action=argparse.BooleanOptionalAction, default=True,
        help="Let a refused hit place a checkpoint of its own.")
    add("--enable_chunked_prefill", action=argparse.BooleanOptionalAction, default=True,
        help="Enable chunked prefill (default: enabled). Use --no-enable_chunked_prefill to disable.")
    add("--enable-log-stats", action=argparse.BooleanOptionalAction, default=True,
        help="Log the periodic engine-status line.")
    add("--throughput-log-interval", type=float, default=10.0, help="Seconds between engine-status lines.")
    add("--cache-hit-rate-window", type=int, default=1000, help="Requests in the hit-rate window.")
    add("--max-num-seqs", type=int, default=512, help="Maximum number of sequences to batch together")
    add("--gpu-memory-utilization", type=float, default=0.9, help="GPU memory utilization (0.0 to 1.0)")
    add("--kv-transfer-config", type=str, default="{}", help="KV transfer config as JSON string.")
    add("--scheduler-delay-factor", type=float, default=0.0,
        help="Apply a delay (of delay factor multiplied by previous prompt latency) before scheduling next prompt.")
    add("--mark-trace", action="store_true", help="Enable graph_marker nodes for tracing.")
    add("--enable-rapidserve", action="store_true", help="Enable intra-GPU prefill/decode disaggregation.")
    add("--disagg-prefill-max-num-seqs", type=int, default=None, help="Max sequences per prefill batch.")
    add("--disagg-constrained", action="store_true", help="CU-masked streams with --enable-rapidserve.")
    add("--online_quant_config", type=json.loads, default=None, help="Online quantization config as a JSON string.")
    add("--hf-overrides", type=json.loads, default=None, help="JSON object of HF config attributes to override.")
    add("--dspark-config", type=json.loads, default=None, help="DSpark dynamic config as a JSON dict.")
    dcp = p.add_argument_group("DCP options")
    dcp.add_argument("--dcp-config", type=json.loads, default=None, help="DCP knobs as one JSON dict.")
    eplb = p.add_argument_group("EPLB options")
    eplb.add_argument("--eplb-enable", "--enable-eplb", action="store_true", help="Enable EPLB.")
    eplb.add_argument("--eplb-config", type=json.loads, default=None, help="EPLB config as a JSON dict.")
    # Server flags added by main() after the engine flags.
    add("--host", type=str, default="0.0.0.0", help="Server host")
    add("--server-port", type=int, default=8000,
        help="Server port (note: --port is used for internal engine communication)")
    add("--tool-call-parser", type=str, default="auto", help="Tool call parser.")
    add("--timeout-keep-alive", type=int, default=5, help="Seconds to hold an idle keep-alive connection.")
    add("--disable-uvicorn-access-log", action="store_true", help="Stop uvicorn logging a line per request.")
    add("--chat-template", type=str, default=None, help="Override the tokenizer's chat template.")
    add("--default-chat-template-kwargs", type=str, default=None,
        help="Default kwargs for chat template rendering (JSON string).")
    add("--request-log", type=str, default=None, help="Path to JSONL file for logging all API requests")
    return p


def resolve_kv_config(raw: dict) -> tuple[dict, str | None]:
    """The Mooncake sub-config and the role to report (``multi`` surfaces its producer)."""
    if raw.get("kv_connector") != "multi":
        return raw, raw.get("kv_role")
    subs = [c for c in raw.get("connectors", []) if isinstance(c, dict)]
    mooncake = next((c for c in subs if c.get("kv_connector") == "mooncake"), {})
    role = next((c["kv_role"] for c in subs if c.get("kv_role") == "kv_producer"), None)
    if role is None:
        role = next((c["kv_role"] for c in subs if c.get("kv_role")), None)
    return mooncake, role
