"""ATOM workers: `python3 -m atom.entrypoints.openai_server` with ATOM's own flag spellings."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .args import Options
from .registry import EngineBase, register_engine

if TYPE_CHECKING:
    from ..config.catalog import ModelEntry
    from ..design.plan import Endpoint, Plan

MODULE = "atom.entrypoints.openai_server"
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}


# InferenceX's decode ladder: 1,2,4,8 then 16..256 step 8, passed as one string.
CUDAGRAPH_SIZES = "[" + ",".join(str(s) for s in [1, 2, 4, 8, *range(16, 257, 8)]) + "]"


def kv_transfer_config(plan: Plan, ep: Endpoint) -> dict:
    """The Mooncake connector config, keys in srt-slurm's order; proxy_ip is the worker's own IP."""
    mc = plan.recipe.mooncake
    cfg: dict = {"kv_role": KV_ROLE[ep.role], "kv_connector": "mooncake", "proxy_ip": ep.host,
                 "handshake_port": ep.handshake_port}
    if mc.protocol:  # unset lets ATOM choose (rdma)
        cfg["protocol"] = mc.protocol
    if mc.ib_device:
        cfg["ib_device"] = mc.ib_device
    if mc.num_worker_threads:
        cfg["num_worker_threads"] = mc.num_worker_threads
    return cfg


def compact_json(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"))


@register_engine("atom")
class Atom(EngineBase):
    command = ("python3", "-m", MODULE)
    owned_flags = frozenset({"model", "host", "server-port", "tensor-parallel-size", "kv-transfer-config"})

    def max_num_seqs(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> int:
        conc = plan.recipe.benchmark.concurrencies
        if ep.role == "decode" and conc:
            return max(conc)
        return model.max_num_seqs

    def options(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> Options:
        """The flags in InferenceX's order (server_atom.sh); recipe args last, replacing in place."""
        r = plan.recipe
        spec = r.role(ep.role)
        o = Options(self.owned_flags)
        o.set("--model", r.model.path)
        o.set("--host", "0.0.0.0")
        o.set("--server-port", ep.http_port)
        if ep.engine_port is not None:
            o.set("--port", ep.engine_port)
        if not r.engine_defaults:
            return self._bare_options(plan, ep, o)
        o.set("--trust-remote-code")
        o.set("-tp", ep.tp)
        o.add_tokens(model.parallel_flags(ep.role, spec.dp_attention, spec.expert_parallel), "model catalog")
        if spec.mtp and model.mtp_flags:
            o.add_tokens([*model.mtp_flags, str(spec.mtp)], "model catalog")
        o.add_tokens(model.kv_cache_flags, "model catalog")
        o.set("--block-size", model.block_size)
        o.set("--gpu-memory-utilization", model.mem_frac_static)
        o.set("--max-num-seqs", self.max_num_seqs(plan, ep, model))
        if model.max_model_len:
            o.set("--max-model-len", model.max_model_len)
        if model.max_num_batched_tokens:
            o.set("--max-num-batched-tokens", model.max_num_batched_tokens)
        o.set("--no-enable_prefix_caching")
        quant = model.online_quant_dpa_config if spec.dp_attention and model.online_quant_dpa_config \
            else model.online_quant_config
        if quant:
            o.set("--online_quant_config", quant)
        if ep.role in KV_ROLE:
            o.set("--kv-transfer-config", compact_json(kv_transfer_config(plan, ep)))
        if ep.role == "decode":
            o.set("--cudagraph-capture-sizes", CUDAGRAPH_SIZES)
        o.add_tokens(model.extra_flags, "model catalog")
        o.add_recipe_args(spec.args, f"{'aggregate' if ep.role == 'worker' else ep.role}.args")
        return o

    def _bare_options(self, plan: Plan, ep: Endpoint, o: Options) -> Options:
        """engine_defaults: false: the flags atomdeck owns, then the role's args in their order, as srt-slurm's
        ATOM backend builds a worker (src/srtctl/backends/atom.py): no catalog entry, no default of atomdeck's."""
        o.set("-tp", ep.tp)
        if ep.role in KV_ROLE:
            o.set("--kv-transfer-config", compact_json(kv_transfer_config(plan, ep)))
        spec = plan.recipe.role(ep.role)
        o.add_recipe_args(spec.args, f"{'aggregate' if ep.role == 'worker' else ep.role}.args")
        return o

    def env(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> dict[str, str]:
        r = plan.recipe
        spec = r.role(ep.role)
        env = {"ATOM_HOST_IP": ep.host, "PYTHONUNBUFFERED": "1"}
        if r.engine_defaults:
            env.update(model.env)
            env.update(model.parallel_env(spec.dp_attention, spec.expert_parallel))
        if ep.gpus:
            env["HIP_VISIBLE_DEVICES"] = ",".join(str(g) for g in ep.gpus)
        env.update(plan.cluster.env)
        env.update(r.env)
        env.update(spec.env)
        env["ATOM_HOST_IP"] = ep.host  # the address peers must use; never left to a guess
        return env
