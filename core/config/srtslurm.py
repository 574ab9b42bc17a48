"""Import an srt-slurm recipe for ATOM (schema 1 `backend:`/`resources:` or schema 2 `engine:`/`roles:`).

Every key of the file is mapped to the atomdeck recipe, or reported: refused (an error, by name and
line: atomdeck cannot do what it asks, or would do it differently), not carried (a warning: it has no
effect on what runs, or atomdeck does it its own way) or set in the cluster file (it belongs to the
cluster side). An unknown key is refused, as srt-slurm #429 asks. docs/srt-slurm.md has the table.

Where the facts come from (read, not copied): NVIDIA/srt-slurm `src/srtctl/backends/atom.py` at
1a749ed1 (worker argv), `core/runtime.py` and `core/schema.py` at c88ef731 (model path, mounts,
defaults), SemiAnalysisAI/srt-slurm `src/srtctl/frontends/{atomesh,static_router,infera,atom}.py`,
`core/roles.py`, `core/migrate.py` (the schema 1 -> 2 key moves) and `cli/mixins/worker_stage.py`
(worker env order: role env, then the global `environment`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, get_args

from .errors import ConfigError, ConfigIssue
from .recipe import ARG_KEY, Policy, Recipe, normalize_flag
from .srtslurm_keys import (
    ATOMESH_DEFAULT_POLICY,
    FRONTEND_DEFAULTS_OK,
    ROUTER_MANAGED,
    SA_BENCH_CARRIED,
    TOP_LEVEL,
)
from .srtslurm_read import Imported, _int, _Reader
from .srtslurm_roles import _env, _layout, _restart, _role_args, _role_env, _roles_v1, _roles_v2
from .yamlio import YamlDoc, parse_yaml, read_yaml

# -- model, container, mounts -------------------------------------------------------------------------


def _model(r: _Reader, out: dict) -> None:
    r.section("model")
    path = r.take("model", "path")
    if not isinstance(path, str) or not path:
        r.error(("model", "path"), "is required: an `hf:<repo>` id or a model directory")
    elif "$" in path:
        r.error(("model", "path"), "uses an environment variable that srt-slurm expands on the login node; "
                                   "write the value itself")
    elif path.startswith("hf:"):
        out["model"] = {"path": path[3:]}  # passed to --model literally (runtime.worker_model_arg)
    else:
        # srt-slurm mounts a local model directory at /model and passes `--model /model` (core/runtime.py)
        out["model"] = {"path": "/model"}
        out.setdefault("container_mounts", []).append(f"{path}:/model")
    container = r.take("model", "container")
    if isinstance(container, str) and container:
        out["image"] = container
        if "/" not in container and ":" not in container and not container.endswith(".sqsh"):
            r.cluster(("model", "container"),
                      f"'{container}' looks like an alias srt-slurm resolves through srtslurm.yaml `containers:`; "
                      f"atomdeck uses image: literally, so set image: to the .sqsh or registry image it names")
    elif container is not None:
        r.error(("model", "container"), f"must be an image name or path, got {container!r}")
    if r.has("model", "precision"):
        r.take("model", "precision")
        r.warn(("model", "precision"), "not carried: srt-slurm only reports it (job name, status); nothing runs "
                                       "differently")
    if r.has("model", "stage_dir"):
        r.take("model", "stage_dir")
        r.error(("model", "stage_dir"), "atomdeck does not stage models to node-local disk; remove it and point "
                                        "model.path at the shared copy")


def _mounts(r: _Reader, out: dict) -> None:
    mounts = out.setdefault("container_mounts", [])
    table = r.take("container_mounts")
    if table is not None:
        if not isinstance(table, dict):
            r.error(("container_mounts",), "must be a mapping of host path to container path")
        else:
            for host, dest in table.items():
                if "{" in str(host) or "{" in str(dest):
                    r.error(("container_mounts", host), "uses a srt-slurm placeholder ({job_id}, {log_dir}, ...) "
                                                        "that only srt-slurm fills in; write the path itself")
                else:
                    mounts.append(f"{host}:{dest}")
    extra = r.take("extra_mount")
    if extra is not None:
        if not isinstance(extra, list) or not all(isinstance(m, str) and ":" in m for m in extra):
            r.error(("extra_mount",), "must be a list of HOST:CONTAINER mounts")
        else:
            mounts.extend(extra)
    if not mounts:
        out.pop("container_mounts")


# -- frontend -------------------------------------------------------------------------------------------


def _frontend(r: _Reader, out: dict, replace: str | None) -> None:
    front = r.section("frontend")
    ftype = r.take("frontend", "type", default="dynamo")
    path = ("frontend", "type")
    if ftype == "infera" and replace != "atomesh":
        r.error(path, "Infera is a different router (python -m infera.server: workers found through etcd, "
                      "KV-aware routing from the workers' KV events); atomdeck runs AToMesh only. Import with "
                      "--frontend atomesh to put the same workers behind AToMesh instead")
        _skip_frontend(r, front)
        return
    if ftype == "infera":
        r.warn(path, "replaced by AToMesh (--frontend atomesh): the workers are the same; routing is AToMesh's")
        for key in front:
            if key != "type" and key not in FRONTEND_DEFAULTS_OK:
                r.take("frontend", key)
                r.warn(("frontend", key), "not carried: an Infera setting (--frontend atomesh replaced Infera)")
        _frontend_common(r, front, out)
        out.setdefault("router", {})["policy"] = ATOMESH_DEFAULT_POLICY
        return
    if ftype == "atom":
        r.warn(path, "srt-slurm serves the one aggregate worker directly, without a router; atomdeck puts AToMesh "
                     "in front of it (the worker's command is the same; clients use the router's port)")
    elif ftype != "atomesh":
        r.error(path, f"{ftype!r} is not a frontend atomdeck runs; use atomesh (AToMesh), the router ATOM workers "
                      "run behind")
        _skip_frontend(r, front)
        return
    _frontend_common(r, front, out)
    router = out.setdefault("router", {})
    router["policy"] = ATOMESH_DEFAULT_POLICY  # srt-slurm passes no --policy: AToMesh's own default applies
    args = r.take("frontend", "args")
    if args is not None and not isinstance(args, dict):
        r.error(("frontend", "args"), "must be a mapping of AToMesh flags to values")
    elif args:
        _router_args(r, args, out)
    env = r.take("frontend", "env")
    if isinstance(env, dict) and env:
        router["env"] = _env(r, ("frontend", "env"), env)


def _skip_frontend(r: _Reader, front: dict) -> None:
    for key in front:
        r.take("frontend", key)


def _frontend_common(r: _Reader, front: dict, out: dict) -> None:
    for key, ok in FRONTEND_DEFAULTS_OK.items():
        if key not in front:
            continue
        value = r.take("frontend", key)
        if value == ok:
            continue
        if key == "enable_multiple_frontends":
            r.warn(("frontend", key), "atomdeck runs one router (srt-slurm would add nginx and more frontends)")
        elif key in ("orchestrator_placement", "placement"):
            if value not in ("head", {"node": "head"}):
                r.error(("frontend", key), "atomdeck runs the router on the first prefill (or worker) node, "
                                           "srt-slurm's head; set router.node in the imported recipe to move it")
        else:
            r.error(("frontend", key), "atomdeck runs the router on a worker node; it does not reserve one for it")


def _router_args(r: _Reader, args: dict, out: dict) -> None:
    router = out.setdefault("router", {})
    extra: dict[str, Any] = {}
    for key, value in args.items():
        kpath = ("frontend", "args", key)
        flag = str(key).replace("_", "-")  # as srt-slurm spells it (static_router.get_frontend_args_list)
        canon = normalize_flag(flag)
        if canon in ROUTER_MANAGED:
            r.error(kpath, f"is managed by srt-slurm and by atomdeck ({ROUTER_MANAGED[canon]}); remove it")
        elif canon == "policy":
            if value in get_args(Policy):
                router["policy"] = value
            else:
                r.error(kpath, f"atomdeck's router.policy is one of {', '.join(get_args(Policy))}, got {value!r}")
        elif canon == "log-level":
            if value in ("debug", "info", "warn", "error"):
                router["log_level"] = value
            else:
                r.error(kpath, f"must be debug, info, warn or error, got {value!r}")
        elif canon == "prometheus-port":
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
                out.setdefault("ports", {})["router_prometheus"] = value
            else:
                r.error(kpath, f"must be a port number, got {value!r}")
        elif isinstance(value, (list, dict)):
            r.error(kpath, "srt-slurm repeats the flag for each list item, atomdeck passes one flag with several "
                           "values; write a single value")
        elif not ARG_KEY.match(flag) or flag.startswith("-"):
            r.error(kpath, "is not an AToMesh flag name")
        else:
            extra[flag] = False if value is None else value
    if extra:
        router["args"] = extra


# -- the rest -------------------------------------------------------------------------------------------


def _engine(r: _Reader, schema: int, out: dict) -> tuple:
    """Engine type, connector and Mooncake transport; returns the path of the engine block."""
    if schema == 1:
        base: tuple = ("backend",)
        r.section("backend")
        etype = r.take("backend", "type", default="sglang")
    else:
        base = ("engine",)
        engine = r.get("engine")
        if isinstance(engine, str):
            r.take("engine")
            etype = engine
        else:
            r.section("engine")
            etype = r.take("engine", "type")
    if etype != "atom":
        r.error((*base, "type") if r.has(*base, "type") else base,
                f"engine {etype!r}: atomdeck imports ATOM recipes only (type: atom)")
    connector = r.take(*base, "connector") if isinstance(r.get(*base), dict) else None
    if connector not in (None, "mooncake"):
        r.error((*base, "connector"), f"atomdeck's workers transfer KV through Mooncake only, got {connector!r}")
    if isinstance(r.get(*base), dict) and r.has(*base, "mooncake_protocol"):
        proto = r.take(*base, "mooncake_protocol")
        if proto in ("rdma", "tcp"):
            out["mooncake"] = {"protocol": proto}
        elif proto is not None:
            r.error((*base, "mooncake_protocol"), f"must be rdma or tcp, got {proto!r}")
    if isinstance(r.get(*base), dict) and r.has(*base, "mooncake_ib_device"):
        device = r.take(*base, "mooncake_ib_device")
        if isinstance(device, str) and device:
            out.setdefault("mooncake", {})["ib_device"] = device
            r.warn((*base, "mooncake_ib_device"),
                   "carried as mooncake.ib_device (kv-transfer-config ib_device); no srt-slurm source that reads "
                   "this key was found (atom.py at 1a749ed1 has none), so where srt-slurm puts it is not known")
        else:
            r.error((*base, "mooncake_ib_device"), f"must be an RDMA device name, got {device!r}")
    if isinstance(r.get(*base), dict) and r.has(*base, "enable_kv_events"):
        if r.take(*base, "enable_kv_events"):
            r.warn((*base, "enable_kv_events"), "not carried: KV events feed a KV-aware router (Infera); "
                                                "AToMesh reads none")
    return base


def _health(r: _Reader, out: dict) -> None:
    r.section("health_check")
    attempts = _int(r, ("health_check", "max_attempts"), 1)
    interval = _int(r, ("health_check", "interval_seconds"), 1)
    # srt-slurm waits max_attempts * interval_seconds for the workers (defaults 180 x 10 s, core/schema.py)
    out["health"] = {"worker_timeout_s": (attempts or 180) * (interval or 10)}


def _benchmark(r: _Reader, out: dict) -> None:
    bench = r.section("benchmark")
    btype = r.take("benchmark", "type", default="manual")
    if "sweep" in bench:
        r.take("benchmark", "sweep")
        r.error(("benchmark", "sweep"), "atomdeck runs one deployment per recipe; import each point of the sweep "
                                        "as its own recipe (srtctl writes them out)")
    if btype == "manual":
        pass
    elif btype != "sa-bench":
        for key in bench:
            r.take("benchmark", key)
        r.warn(("benchmark", "type"), f"not carried: benchmark type {btype!r} runs srt-slurm's own runner; "
                                      "atomdeck's `bench` sweeps concurrencies against the router (run your command "
                                      "against the router's URL)")
        return
    spec: dict[str, Any] = {}
    for key in bench:
        if key in ("type", "sweep"):
            continue
        path = ("benchmark", key)
        value = r.take(*path)
        if key in ("isl", "osl"):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                spec[key] = value
            else:
                r.error(path, f"must be a whole number of at least 1, got {value!r}")
        elif key == "concurrencies":
            conc = _concurrencies(value)
            if conc is None:
                r.error(path, "must be a list of whole numbers or an 'x'-separated text such as \"4x8\"")
            else:
                spec["concurrencies"] = conc
        elif key == "req_rate" and str(value) == "inf":
            pass
        elif key in SA_BENCH_CARRIED:
            r.warn(path, f"not carried: {SA_BENCH_CARRIED[key]}")
        else:
            r.error(path, "atomdeck's benchmark has no such setting (it has concurrencies, isl and osl); remove it")
    if spec:
        out["benchmark"] = spec


def _concurrencies(value: Any) -> list[int] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    elif isinstance(value, str):
        try:
            value = [int(x) for x in value.split("x")]
        except ValueError:
            return None
    if not isinstance(value, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1
                                              for c in value):
        return None
    return list(value)


def _resources(r: _Reader) -> int | None:
    r.section("resources")
    gpn = _int(r, ("resources", "gpus_per_node"), 1)
    if gpn is not None:
        r.cluster(("resources", "gpus_per_node"), f"gpus_per_node: {gpn} (atomdeck reads the GPUs per node "
                                                  "from the cluster file and Slurm, not the recipe)")
    if r.has("resources", "gpu_type"):
        r.take("resources", "gpu_type")
        r.warn(("resources", "gpu_type"), "not carried: srt-slurm only reports it; atomdeck runs on the nodes "
                                          "the cluster has")
    for key in ("spread_workers", "het_jobs"):
        if r.has("resources", key):
            if r.take("resources", key):
                r.error(("resources", key), "atomdeck fills nodes in rank order in one allocation; remove it")
    return gpn


def _slurm_side(r: _Reader) -> None:
    slurm = r.section("slurm")
    names = {"account": "account: {v}", "partition": "partition: {v}", "time_limit": "slurm.time_limit: '{v}'"}
    for key in slurm:
        value = r.take("slurm", key)
        if key in names:
            r.cluster(("slurm", key), names[key].format(v=value))
        else:
            r.error(("slurm", key), "unknown srt-slurm key")
    for block in ("sbatch_directives", "srun_options"):
        table = r.take(block)
        if table is None:
            continue
        if not isinstance(table, dict):
            r.error((block,), "must be a mapping of option names to values")
            continue
        for key, value in table.items():
            opt = f"--{key}" + (f"={value}" if value not in ("", None) else "")
            if block == "sbatch_directives":
                r.cluster((block, key), f"slurm.extra_sbatch: ['{opt}'] (an #SBATCH directive of the allocation)")
            elif str(key).startswith("container-"):
                r.cluster((block, key), f"{opt}: a pyxis option of every srun step; set it in the cluster's "
                                        "container section (runtime: pyxis)")
            else:
                r.cluster((block, key), f"{opt}: an option of every srun step; atomdeck's cluster file has no "
                                        "place for extra srun options yet, so it is not passed")


def _top_level(r: _Reader) -> None:
    for key in list(r.doc.data):
        if key in TOP_LEVEL:
            kind, why = TOP_LEVEL[key]
            r.take(key)
            r.note(kind, (key,), why)


def import_doc(doc: YamlDoc, replace_frontend: str | None = None) -> Imported:
    """Convert a parsed srt-slurm recipe; `replace_frontend='atomesh'` runs an Infera recipe behind AToMesh."""
    if not isinstance(doc.data, dict):
        raise ConfigError([ConfigIssue(doc.source, "", "is not an srt-slurm recipe (a mapping of keys to values)")])
    r = _Reader(doc)
    schema = r.take("schema", default=1)
    if schema not in (1, 2):
        r.error(("schema",), f"srt-slurm recipe schema {schema!r} is not one atomdeck reads (1 or 2)")
        return Imported(doc.source, 0, None, r.notes)
    if any(str(k) == "base" or str(k).startswith(("override_", "zip_override_")) for k in doc.data):
        r.error(("base",) if "base" in doc.data else (), "an srt-slurm override/sweep file: resolve it with "
                                                         "srtctl first and import each variant")
        return Imported(doc.source, schema, None, r.notes)
    out: dict[str, Any] = {"engine_defaults": False}
    name = r.take("name")
    out["name"] = name if isinstance(name, str) and name else Path(doc.source).stem
    _top_level(r)
    _model(r, out)
    base = _engine(r, schema, out)
    gpn = _resources(r)
    if schema == 1:
        roles = _roles_v1(r, base)
        for key in ("atom_config",):
            if r.has(*base, key):
                r.section(*base, key)
    else:
        if r.has("backend"):
            r.take("backend")
            r.error(("backend",), "a schema 2 recipe names its engine with engine: (backend: is schema 1)")
        roles = _roles_v2(r)
    raw_env = r.take("environment")
    glob: dict[str, str] = {}
    if isinstance(raw_env, dict):
        glob = _env(r, ("environment",), raw_env)
    elif raw_env is not None:
        r.error(("environment",), "must be a mapping of variable names to values")
    if glob:
        out["env"] = glob
    _layout(r, roles, gpn, out)
    for role, item in roles.items():
        key = "aggregate" if role == "agg" else role
        args, env = _role_args(r, item), _role_env(r, item, glob)
        if key in out:
            if args:
                out[key]["args"] = args
                served = args.get("served-model-name") or args.get("served_model_name")
                if isinstance(served, str) and "model" in out:
                    out["model"]["served_name"] = served
            if env:
                out[key]["env"] = env
            if item.critical[1] and item.critical[0] is False:
                out[key]["critical"] = False
            if item.restart[1] and item.restart[0] not in (None, "never"):
                restart = _restart(r, item.restart)
                if restart is not None:
                    out[key]["restart"] = restart
    _frontend(r, out, replace_frontend)
    _mounts(r, out)
    _health(r, out)
    _benchmark(r, out)
    _slurm_side(r)
    for path in r.unread():
        r.error(path, "unknown srt-slurm key (or one that does not apply to ATOM); remove it")
    if any(n.kind == "error" for n in r.notes):
        return Imported(doc.source, schema, None, r.notes)
    try:
        recipe = Recipe.model_validate(out)
    except Exception as e:  # a value atomdeck's recipe refuses (a policy name, a port): name it
        from pydantic import ValidationError

        if not isinstance(e, ValidationError):
            raise
        for err in e.errors(include_url=False):
            r.error(tuple(str(p) for p in err["loc"]), f"cannot be carried into the atomdeck recipe: {err['msg']}")
        return Imported(doc.source, schema, None, r.notes)
    return Imported(doc.source, schema, recipe, r.notes)


def import_file(path: Path | str, replace_frontend: str | None = None) -> Imported:
    return import_doc(read_yaml(Path(path)), replace_frontend)


def import_text(text: str, source: str = "<srt-slurm>", replace_frontend: str | None = None) -> Imported:
    return import_doc(parse_yaml(text, source), replace_frontend)


def worker_timeout_parts(seconds: float) -> tuple[int, int]:
    """(max_attempts, interval_seconds) whose product is the wait, for export: 10 s steps when they fit."""
    whole = math.ceil(seconds)
    for interval in (10, 5, 1):
        if whole % interval == 0:
            return whole // interval, interval
    return whole, 1
