"""The srt-slurm keys the import and export know, and what becomes of each (docs/srt-slurm.md has the table).

Facts from SemiAnalysisAI/srt-slurm `core/roles.py` (role and mode names), `core/schema.py` (top-level
keys and defaults), NVIDIA/srt-slurm `backends/atom.py` at 1a749ed1 (the flags it manages) and
SemiAnalysisAI/srt-slurm `frontends/{static_router,atomesh}.py` (the router flags it manages).
"""

from __future__ import annotations

from typing import Any, Literal

# role -> the engine's mode name in schema 1 (`<mode>_environment`, `atom_config.<mode>`)
ROLE_MODE = {"prefill": "prefill", "decode": "decode", "agg": "aggregated"}

# Worker flags srt-slurm's ATOM backend refuses in a role's args (it sets them itself), and so does atomdeck.
ATOM_RESERVED = {
    "model": "model.path is --model",
    "host": "both bind 0.0.0.0",
    "server-port": "both allocate the HTTP port",
    "tp": "the role's GPUs per worker are -tp",
    "tensor-parallel-size": "the role's GPUs per worker are -tp",
    "kv-transfer-config": "both write the Mooncake connector config",
}

# AToMesh flags srt-slurm builds (static_router.build_router_command, atomesh.get_managed_frontend_args)
# and atomdeck builds too.
ROUTER_MANAGED = {
    "host": "both bind 0.0.0.0",
    "port": "both allocate the router port",
    "pd-disaggregation": "it follows from the roles",
    "prefill": "the worker URLs come from the layout",
    "decode": "the worker URLs come from the layout",
    "worker-urls": "the worker URLs come from the layout",
    "backend": "AToMesh always runs with --backend atom",
    "worker-startup-timeout-secs": "atomdeck derives it from health.worker_timeout_s + health.router_timeout_s, "
                                   "which health_check sets",
}

# AToMesh's own --policy default (ROCm/ATOM atom/mesh/src/cliargs.rs): what runs when srt-slurm passes none.
ATOMESH_DEFAULT_POLICY = "cache_aware"

# frontend keys that may stay at these values (anything else about where the router runs is refused)
FRONTEND_DEFAULTS_OK: dict[str, Any] = {
    "enable_multiple_frontends": False,
    "orchestrator_placement": "head",
    "placement": {"node": "head"},
    "dedicated_node": False,
}

# sa-bench settings atomdeck's `bench` has no place for; they shape srt-slurm's client only
SA_BENCH_CARRIED = {
    "random_range_ratio": "atomdeck's bench sends fixed-length prompts (isl/osl)",
    "num_prompts_mult": "atomdeck's bench sizes each point itself",
    "num_warmup_mult": "atomdeck's bench warms up itself",
    "use_chat_template": "atomdeck's bench uses /v1/completions",
    "reuse_http_connections": "atomdeck's bench manages its connections",
    "env": "the benchmark client's environment is srt-slurm's",
}

Kind = Literal["error", "warning", "cluster"]

# Top-level blocks that configure srt-slurm itself: (what the import does, why)
TOP_LEVEL: dict[str, tuple[Kind, str]] = {
    "identity": ("warning", "not carried: srt-slurm checks it against a fingerprint of the running job; atomdeck "
                            "records what it launched in the run instead"),
    "output": ("warning", "not carried: atomdeck keeps logs in its own run directory"),
    "infra": ("warning", "not carried: etcd/NATS placement; AToMesh and ATOM use neither"),
    "observability": ("warning", "not carried: atomdeck scrapes the workers' and router's /metrics itself"),
    "telemetry": ("warning", "not carried: atomdeck scrapes the workers' and router's /metrics itself"),
    "post_eval": ("warning", "not carried: atomdeck runs no accuracy evaluation after a benchmark"),
    "reporting": ("warning", "not carried: srt-slurm's status reporting"),
    "enable_config_dump": ("warning", "not carried: atomdeck stores the plan it launched in the run"),
    "dynamo": ("error", "configures NVIDIA Dynamo, which an ATOM deployment behind AToMesh does not run; remove it"),
    "profiling": ("error", "atomdeck does not profile workers (nsys/torch) yet; remove it"),
    "host_setup": ("error", "atomdeck runs no commands on the bare hosts; run them before the launch"),
    "services": ("error", "atomdeck launches no side services next to the workers"),
    "setup_script": ("error", "atomdeck runs no setup script inside the container before the worker; bake it into "
                              "the image"),
}
