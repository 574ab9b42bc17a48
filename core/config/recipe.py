"""Recipe: what to serve and how (model, roles, ports, router), loaded from YAML.

A recipe never names nodes' IPs or launch details: those come from the cluster and the plan.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from .errors import ConfigError, ConfigIssue
from .yamlio import YamlDoc, parse_yaml, read_yaml, validate

ArgScalar = str | int | float | bool
WorkerRole = Literal["prefill", "decode", "worker"]
ArgValue = ArgScalar | list[str | int | float]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ARG_KEY = re.compile(r"^-{0,2}[A-Za-z0-9][A-Za-z0-9_.-]*$")

# Worker flags the orchestrator owns (srt-slurm's rule: compare after stripping dashes and _ -> -).
WORKER_OWNED = {
    "model": "set model.path instead",
    "host": "atomdeck always binds 0.0.0.0",
    "server-port": "set ports.{role}_http instead",
    "tp": "set {role}.tp instead",
    "tensor-parallel-size": "set {role}.tp instead",
    "kv-transfer-config": "atomdeck writes it from mooncake.* and ports.handshake",
}
ROUTER_OWNED = {
    "host": "atomdeck always binds 0.0.0.0",
    "port": "set ports.router instead",
    "backend": "AToMesh must run with --backend atom; atomdeck sets it",
    "pd-disaggregation": "set mode: disagg or mode: aggregate instead",
    "prefill": "prefill URLs come from the plan",
    "decode": "decode URLs come from the plan",
    "worker-urls": "worker URLs come from the plan",
    "policy": "set router.policy instead",
    "log-level": "set router.log_level instead",
    "prometheus-port": "set ports.router_prometheus instead",
    "worker-startup-timeout-secs": "set health.worker_timeout_s instead: the router waits for the workers as long "
                                   "as atomdeck does, plus health.router_timeout_s",
}


def normalize_flag(key: str) -> str:
    """The canonical form used to compare flag spellings: no leading dashes, '_' -> '-', lower case."""
    return key.lstrip("-").replace("_", "-").lower()


def flag_of(key: str) -> str:
    """The literal command-line flag for a recipe args key (spelling kept exactly as written)."""
    return key if key.startswith("-") else f"--{key}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


def _env_check(value: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not ENV_NAME.match(k):
            raise ValueError(f"environment variable name {k!r} is not valid; use letters, digits and _")
        if v is None or isinstance(v, (dict, list)):
            raise ValueError(f"environment variable {k} must have a text or number value, got {v!r}")
        if isinstance(v, bool):
            v = "1" if v else "0"
        out[k] = str(v)
    return out


def _args_check(value: dict[str, Any]) -> dict[str, Any]:
    for k, v in value.items():
        if not isinstance(k, str) or not ARG_KEY.match(k):
            raise ValueError(f"argument name {k!r} is not a flag name; use e.g. max-num-seqs or kv_cache_dtype")
        if v is None or isinstance(v, dict):
            raise ValueError(f"argument {k} needs a value (text, number, true/false or a list), got {v!r}")
    return value


class _EnvArgs(_Strict):
    """Validators shared by everything that carries process env and extra args."""

    @field_validator("env", check_fields=False)
    @classmethod
    def _env(cls, v: dict) -> dict:
        return _env_check(v)

    @field_validator("args", check_fields=False)
    @classmethod
    def _args(cls, v: dict) -> dict:
        return _args_check(v)


class RestartPolicy(_Strict):
    """What to do when a worker of the role dies (or stops answering), as srt-slurm's roles.<role>.restart (its
    PR #451): relaunch it in place (same node, GPUs, ports) at most `max_restarts` times over the run, waiting
    `backoff_seconds` first, doubled per relaunch up to `max_backoff_seconds`. `unresponsive_seconds` (atomdeck's):
    also relaunch a worker that stays unresponsive that long. After the last relaunch it stops and says why."""

    policy: Literal["never", "on-failure", "always"] = "on-failure"
    max_restarts: int = Field(3, ge=0, validation_alias=AliasChoices("max_restarts", "max"))
    backoff_seconds: float = Field(10.0, ge=0, validation_alias=AliasChoices("backoff_seconds", "backoff_s"))
    max_backoff_seconds: float = Field(300.0, ge=0)
    unresponsive_seconds: float | None = Field(None, gt=0, description="relaunch a worker unresponsive this long")

    def backoff(self, attempt: int) -> float:
        """The wait before relaunch number `attempt` (1-based): doubled each time, capped."""
        return min(self.max_backoff_seconds, self.backoff_seconds * 2 ** max(0, attempt - 1))


class RoleSpec(_EnvArgs):
    """One role's workers (prefill, decode, or aggregate workers)."""

    workers: int = Field(1, ge=0)
    tp: int = Field(8, ge=1)
    per_node: int = Field(1, ge=1, description="workers sharing one node (co-location)")
    dp_attention: bool = False
    expert_parallel: bool = False
    mtp: int | None = Field(None, ge=1, description="speculative tokens for --method mtp; unset = off")
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, Any] = Field(default_factory=dict)
    restart: RestartPolicy | None = Field(None, description="relaunch a worker that dies: never (default), "
                                          "on-failure, always, or a mapping with max_restarts, backoff_seconds, ...")
    critical: bool = Field(True, description="false: a worker of this role that dies (and is not relaunched) "
                                             "makes the run degraded, not failed")

    @field_validator("restart", mode="before")
    @classmethod
    def _restart(cls, v: Any) -> Any:
        return {"policy": v} if isinstance(v, str) else v

    def nodes_needed(self) -> int:
        return -(-self.workers // self.per_node) if self.workers else 0


class Ports(_Strict):
    prefill_http: int = Field(8010, ge=1, le=65535)
    decode_http: int = Field(8020, ge=1, le=65535)
    worker_http: int = Field(8000, ge=1, le=65535)
    router: int = Field(30000, ge=1, le=65535)
    handshake: int = Field(6301, ge=1, le=65535)
    router_prometheus: int = Field(29100, ge=1, le=65535)
    engine: int = Field(8006, ge=1, le=65535, description="ATOM's internal --port (co-located workers)")


Policy = Literal["random", "round_robin", "cache_aware", "power_of_two", "prefix_hash"]


class RouterSpec(_EnvArgs):
    type: str = "atomesh"
    policy: Policy = "random"
    log_level: Literal["debug", "info", "warn", "error"] = "info"
    node: str | None = None
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, Any] = Field(default_factory=dict)



class ModelSpec(_Strict):
    path: Annotated[str, Field(min_length=1)]
    served_name: str | None = Field(None, description="the name clients will request; default: path")
    catalog: str | None = None

    @property
    def client_name(self) -> str:
        return self.served_name if self.served_name is not None else self.path


class MooncakeSpec(_Strict):
    protocol: Literal["rdma", "tcp"] | None = Field(None, description="unset: ATOM's default (rdma)")
    ib_device: str | None = None
    num_worker_threads: int | None = Field(None, ge=1)


class ExtraPort(_Strict):
    role: Literal["prefill", "decode", "router", "worker", "all"]
    port: int = Field(ge=1, le=65535)


class HealthSpec(_Strict):
    worker_timeout_s: float = Field(2500, gt=0)
    router_timeout_s: float = Field(300, gt=0)
    smoke_timeout_s: float = Field(120, gt=0)
    smoke_prompt: str = "The capital of France is"
    smoke_max_tokens: int = Field(8, ge=1)
    extra_ports: list[ExtraPort] = Field(default_factory=list)


class BenchmarkSpec(_Strict):
    concurrencies: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)
    isl: int | None = Field(None, ge=1)
    osl: int | None = Field(None, ge=1)


class Placement(_Strict):
    prefill: list[str] = Field(default_factory=list)
    decode: list[str] = Field(default_factory=list)
    workers: list[str] = Field(default_factory=list)


class Recipe(_Strict):
    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    engine: str = "atom"
    engine_defaults: bool = Field(True, description="add the model catalog's and atomdeck's own engine flags and env; "
                                  "false: each worker gets only the flags atomdeck owns plus its role's args "
                                  "(srt-slurm's contract; `atomdeck import srt-slurm` sets it)")
    mode: Literal["disagg", "aggregate"] = "disagg"
    model: ModelSpec
    image: str | None = None
    container_mounts: list[str] = Field(default_factory=list, description="extra container mounts SRC:DST[:FLAGS] (pyxis --container-mounts, docker -v)")
    env: dict[str, Any] = Field(default_factory=dict, description="environment for every process")
    mooncake: MooncakeSpec = Field(default_factory=MooncakeSpec)
    prefill: RoleSpec = Field(default_factory=RoleSpec)
    decode: RoleSpec = Field(default_factory=RoleSpec)
    aggregate: RoleSpec = Field(default_factory=lambda: RoleSpec(workers=0))
    ports: Ports = Field(default_factory=Ports)
    router: RouterSpec = Field(default_factory=RouterSpec)
    health: HealthSpec = Field(default_factory=HealthSpec)
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec)
    placement: Placement | None = None

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict) -> dict:
        return _env_check(v)

    def roles(self) -> list[tuple[WorkerRole, RoleSpec]]:
        """The worker roles in rank order (InferenceX: prefill first, then decode)."""
        if self.mode == "aggregate":
            return [("worker", self.aggregate)]
        return [("prefill", self.prefill), ("decode", self.decode)]

    def role(self, name: str) -> RoleSpec:
        return self.aggregate if name == "worker" else getattr(self, name)

    def http_port(self, role: str) -> int:
        return {"prefill": self.ports.prefill_http, "decode": self.ports.decode_http,
                "worker": self.ports.worker_http}[role]

    def to_yaml(self) -> str:
        """The recipe as YAML, without keys left at their defaults."""
        import yaml

        data = self.model_dump(mode="json", exclude_defaults=True)
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)


def semantic_issues(recipe: Recipe, source: str = "<recipe>", doc: YamlDoc | None = None) -> list[ConfigIssue]:
    """Checks that need more than one field: reserved flags, role counts. Each names the key to change."""
    issues: list[ConfigIssue] = []

    def add(path: tuple, message: str) -> None:
        line = doc.line_of(path) if doc else None
        issues.append(ConfigIssue(source, ".".join(str(p) for p in path), message, line))

    for role, spec in (("prefill", recipe.prefill), ("decode", recipe.decode), ("aggregate", recipe.aggregate)):
        port_role = "worker" if role == "aggregate" else role
        for key in spec.args:
            owned = WORKER_OWNED.get(normalize_flag(key))
            if owned:
                add((role, "args", key), f"is managed by atomdeck; remove it ({owned.format(role=port_role)})")
    for key in recipe.router.args:
        owned = ROUTER_OWNED.get(normalize_flag(key))
        if owned:
            add(("router", "args", key), f"is managed by atomdeck; remove it ({owned})")
    if recipe.mode == "disagg":
        for role in ("prefill", "decode"):
            if recipe.role(role).workers < 1:
                add((role, "workers"), f"a disaggregated recipe needs at least one {role} worker; set it to 1 or more")
    elif recipe.aggregate.workers < 1:
        add(("aggregate", "workers"), "an aggregate recipe needs at least one worker; set it to 1 or more")
    return issues


def recipe_from_doc(doc: YamlDoc) -> Recipe:
    return validate(Recipe, doc, semantic_issues)


def load_recipe(path: Path | str) -> Recipe:
    """Load and validate a recipe file; every problem is reported with its key path and line."""
    return recipe_from_doc(read_yaml(Path(path)))


def parse_recipe(text: str, source: str = "<recipe>") -> Recipe:
    return recipe_from_doc(parse_yaml(text, source))


def check_recipe(recipe: Recipe) -> Recipe:
    """Re-validate a recipe edited in code (the console edits copies); raises ConfigError."""
    fresh = Recipe.model_validate(recipe.model_dump())
    issues = semantic_issues(fresh)
    if issues:
        raise ConfigError(issues)
    return fresh
