"""Export an atomdeck recipe as an srt-slurm recipe for ATOM behind AToMesh (schema 2, or 1 on request).

What runs must stay what runs: a recipe that takes flags from atomdeck's model catalog and defaults
(engine_defaults: true) has them written out as each role's args, so srt-slurm's ATOM backend (which
passes a role's args and nothing else) starts the same workers. What srt-slurm has no place for is
reported (docs/srt-slurm.md), never dropped silently. `import` of the result gives back the same recipe
for a recipe that came from an import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from .recipe import Recipe, RoleSpec
from .srtslurm import worker_timeout_parts
from .srtslurm_keys import ROLE_MODE
from .srtslurm_read import Kind, Note

if TYPE_CHECKING:
    from .catalog import Catalog

# atomdeck's keys that have no place in an srt-slurm recipe, with the reason, when they differ from the default
_NOT_CARRIED = {
    "health.router_timeout_s": "srt-slurm waits for the router as part of health_check",
    "health.smoke_timeout_s": "srt-slurm sends no smoke request",
    "health.smoke_prompt": "srt-slurm sends no smoke request",
    "health.smoke_max_tokens": "srt-slurm sends no smoke request",
    "health.extra_ports": "srt-slurm waits for the router's /workers only",
    "router.node": "srt-slurm runs the router on its head node (the first worker node)",
    "placement": "srt-slurm takes the nodes Slurm allocates (pin them with sbatch_directives.nodelist)",
    "ports": "srt-slurm allocates its own ports (workers from 6100, Mooncake handshake from 5400, router 8000)",
}
_ROLE_KEY = {"prefill": "prefill", "decode": "decode", "worker": "agg"}
_OWNED_ENV = ("ATOM_HOST_IP", "PYTHONUNBUFFERED", "HIP_VISIBLE_DEVICES")


@dataclass
class Exported:
    data: dict
    notes: list[Note] = field(default_factory=list)

    @property
    def errors(self) -> list[Note]:
        return [n for n in self.notes if n.kind == "error"]

    def text(self, header: str = "") -> str:
        lines = [f"# {line}" if line else "#" for line in header.splitlines()]
        body = yaml.safe_dump(self.data, sort_keys=False, default_flow_style=False, width=100)
        return ("\n".join(lines) + "\n" if lines else "") + body


def _materialized(recipe: Recipe, role: str, spec: RoleSpec, catalog: Catalog | None) -> tuple[dict, dict]:
    """(args, env) of one role's worker as atomdeck would start it, without what atomdeck and srt-slurm own."""
    from ..design.plan import Endpoint, Plan, RouterPlacement, Selection
    from ..engines import engine as get_engine
    from ..engines.args import canonical, is_flag
    from .catalog import GENERIC
    from .cluster import Cluster

    cluster = Cluster(name="srt-slurm", launcher="slurm")
    ep = Endpoint(name=f"{role}-0", role=role, index=0, node="node", host="0.0.0.0", slot=0,  # type: ignore[arg-type]
                  http_port=recipe.http_port(role), tp=spec.tp,
                  handshake_port=recipe.ports.handshake if recipe.mode == "disagg" else None)
    plan = Plan(recipe, cluster, Selection(), (), (ep,), RouterPlacement("node", "0.0.0.0", 1, 2), ())
    model = catalog.lookup(recipe)[1] if catalog is not None else GENERIC
    eng = get_engine(recipe.engine)
    groups: list[list[str]] = []
    for token in eng.options(plan, ep, model).tokens():
        if is_flag(token):
            groups.append([token])
        else:
            groups[-1].append(token)
    args: dict[str, Any] = {}
    owned = {"model", "host", "server-port", "port", "tensor-parallel-size", "kv-transfer-config"}
    for flag, *values in groups:
        if canonical(flag) in owned:
            continue
        key = flag[2:] if flag.startswith("--") else flag
        args[key] = True if not values else _number(values[0]) if len(values) == 1 else [_number(v) for v in values]
    env = {k: v for k, v in eng.env(plan, ep, model).items() if k not in _OWNED_ENV}
    return args, env


def _number(text: str) -> Any:
    """'16' -> 16, '0.85' -> 0.85: numbers read as numbers in the written file (str() gives the same flag back)."""
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        if str(value) == text:
            return value
    return text


def export_recipe(recipe: Recipe, schema: int = 2, catalog: Catalog | None = None,
                  gpus_per_node: int | None = None) -> Exported:
    """The srt-slurm recipe for `recipe`, with a note for everything it cannot hold."""
    notes: list[Note] = []

    def note(kind: Kind, key: str, message: str) -> None:
        notes.append(Note(kind, key, message))

    if schema not in (1, 2):
        note("error", "--schema", f"srt-slurm recipe schema {schema} does not exist; use 1 or 2")
        return Exported({}, notes)
    if recipe.engine != "atom":
        note("error", "engine", f"srt-slurm's ATOM backend runs ATOM, not {recipe.engine!r}")
    if recipe.router.type != "atomesh":
        note("error", "router.type", f"srt-slurm runs AToMesh (frontend.type: atomesh), not {recipe.router.type!r}")
    if not recipe.image:
        note("error", "image", "srt-slurm runs every process in a container (model.container); set image:")
    if recipe.mooncake.num_worker_threads:
        note("error", "mooncake.num_worker_threads", "srt-slurm's kv-transfer-config has no num_worker_threads; "
                                                     "remove it or run the recipe with atomdeck")

    mounts = list(recipe.container_mounts)
    model: dict[str, Any] = {}
    local = next((m for m in mounts if m.endswith(":/model") and m.count(":") == 1), None)
    if recipe.model.path == "/model" and local:
        model["path"] = local.split(":", 1)[0]  # srt-slurm mounts a local model dir at /model itself
        mounts.remove(local)
    else:
        model["path"] = f"hf:{recipe.model.path}"  # hf: ids are passed to --model literally
        if recipe.model.path.startswith("/"):
            note("warning", "model.path", f"written as hf:{recipe.model.path} so srt-slurm passes --model "
                                          f"{recipe.model.path} literally, as atomdeck does (a plain path would be "
                                          "mounted at /model); add the directory it lives in to container_mounts "
                                          "(atomdeck mounts the cluster's model dir, srt-slurm does not)")
    model["container"] = recipe.image or ""
    model["precision"] = "unknown"
    note("warning", "model.precision", "srt-slurm requires it and only reports it; written as 'unknown', set it")
    if recipe.model.served_name is not None:
        note("warning", "model.served_name", "srt-slurm serves the literal --model unless a role's args carry "
                                             "served-model-name; atomdeck's served_name is what its clients ask for")

    roles, glob, router_env = _roles(recipe, catalog, notes)
    per_node_gpus = max((spec.tp * spec.per_node for _, spec in recipe.roles()), default=1)
    gpn = gpus_per_node or per_node_gpus
    if gpn < per_node_gpus:
        note("error", "--gpus-per-node", f"{gpn} GPUs per node cannot hold {per_node_gpus} GPUs of workers")

    out: dict[str, Any] = {}
    if schema == 2:
        out["schema"] = 2
    out["name"] = recipe.name
    out["model"] = model
    resources: dict[str, Any] = {"gpus_per_node": gpn}
    proto = recipe.mooncake.protocol
    engine: dict[str, Any] = {"type": "atom"}
    if proto:
        engine["mooncake_protocol"] = proto
    if recipe.mooncake.ib_device:
        engine["mooncake_ib_device"] = recipe.mooncake.ib_device
        note("warning", "mooncake.ib_device", "written as mooncake_ib_device, which no srt-slurm source found reads "
                                              "(atom.py at 1a749ed1 has no such field); check your srt-slurm has it")
    if schema == 2:
        out["resources"] = resources
        out["engine"] = engine if len(engine) > 1 else "atom"
    else:
        for role, body in roles.items():
            resources[f"{role}_nodes"], resources[f"{role}_workers"] = body["nodes"], body["workers"]
            resources[f"gpus_per_{role}"] = body["gpus"]
        out["resources"] = resources
        backend: dict[str, Any] = dict(engine)
        for role, body in roles.items():
            if body.get("env"):
                backend[f"{ROLE_MODE[role]}_environment"] = body["env"]
        configs = {ROLE_MODE[role]: body["args"] for role, body in roles.items() if body.get("args")}
        if configs:
            backend["atom_config"] = configs
        out["backend"] = backend
    out["frontend"] = _frontend(recipe, router_env)
    if schema == 2:
        out["roles"] = roles
    if glob:
        out["environment"] = glob
    table = {m.split(":", 1)[0]: m.split(":", 1)[1] for m in mounts if m.count(":") == 1}
    extra = [m for m in mounts if m.count(":") != 1]
    if table:
        out["container_mounts"] = table
    if extra:
        out["extra_mount"] = extra
    attempts, interval = worker_timeout_parts(recipe.health.worker_timeout_s)
    if attempts * interval != recipe.health.worker_timeout_s:
        note("warning", "health.worker_timeout_s", f"srt-slurm counts whole seconds: written as {attempts * interval}")
    out["health_check"] = {"max_attempts": attempts, "interval_seconds": interval}
    b = recipe.benchmark
    if b.concurrencies or b.isl or b.osl:
        bench: dict[str, Any] = {"type": "sa-bench"}
        for key in ("isl", "osl"):
            if getattr(b, key) is not None:
                bench[key] = getattr(b, key)
        if b.concurrencies:
            bench["concurrencies"] = list(b.concurrencies)
        out["benchmark"] = bench
    _not_carried(recipe, note)
    return Exported(out, notes)


def _roles(recipe: Recipe, catalog: Catalog | None, notes: list[Note]) -> tuple[dict, dict, dict]:
    """(roles as schema 2 spells them, the global environment, the router's env)."""
    per_role: dict[str, tuple[RoleSpec, dict, dict]] = {}
    for role, spec in recipe.roles():
        key = _ROLE_KEY[role]
        if recipe.engine_defaults:
            args, env = _materialized(recipe, role, spec, catalog)
        else:
            args, env = dict(spec.args), {**recipe.env, **spec.env}  # what the worker gets (cluster env aside)
            for attr in ("dp_attention", "expert_parallel", "mtp"):
                if getattr(spec, attr):
                    notes.append(Note("warning", f"{'aggregate' if role == 'worker' else role}.{attr}",
                                      "not carried: with engine_defaults: false it adds no flag; its flags are "
                                      "the role's args"))
        per_role[key] = (spec, args, env)
    # srt-slurm applies the global environment after the role's: a variable a role sets differently from
    # `env` moves out of the global block into every role (and the router keeps the global value).
    glob = dict(recipe.env)
    clash = {k for _, _, env in per_role.values() for k, v in env.items() if k in glob and glob[k] != v}
    for k in clash:
        del glob[k]
    router_env = {**{k: recipe.env[k] for k in clash}, **recipe.router.env}
    roles: dict[str, Any] = {}
    for key, (spec, args, env) in per_role.items():
        body: dict[str, Any] = {"nodes": spec.nodes_needed(), "workers": spec.workers, "gpus": spec.tp}
        if args:
            body["args"] = dict(sorted(args.items()))
        role_env = {k: v for k, v in env.items() if k not in glob}
        if role_env:
            body["env"] = role_env
        if not spec.critical:
            body["critical"] = False
        if spec.restart is not None and spec.restart.policy != "never":
            body["restart"] = spec.restart.model_dump(exclude_defaults=True) or spec.restart.policy
        roles[key] = body
    return roles, glob, router_env


def _frontend(recipe: Recipe, router_env: dict) -> dict:
    front: dict[str, Any] = {"type": "atomesh", "enable_multiple_frontends": False}
    args: dict[str, Any] = {"policy": recipe.router.policy}  # AToMesh's own default is cache_aware, atomdeck's random
    if recipe.router.log_level != "info":
        args["log-level"] = recipe.router.log_level
    if recipe.ports.router_prometheus != 29100:
        args["prometheus-port"] = recipe.ports.router_prometheus
    args.update(recipe.router.args)
    front["args"] = args
    if router_env:
        front["env"] = router_env
    return front


def _not_carried(recipe: Recipe, note) -> None:
    defaults = Recipe.model_validate({"name": "x", "model": {"path": "x"}})
    for key, why in _NOT_CARRIED.items():
        head, _, tail = key.partition(".")
        mine, base = getattr(recipe, head), getattr(defaults, head)
        if tail:
            mine, base = getattr(mine, tail), getattr(base, tail)
        if head == "ports":  # the router's Prometheus port is carried as a frontend arg
            same = {"router_prometheus": 0}
            mine, base = mine.model_copy(update=same), base.model_copy(update=same)
        if head == "placement" and mine is not None and not any((mine.prefill, mine.decode, mine.workers)):
            continue
        if mine != base:
            note("warning", key, f"not carried: {why}")
