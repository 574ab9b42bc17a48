"""The roles of an srt-slurm recipe (schema 1 `resources:`+`backend:`, schema 2 `roles:`) as atomdeck's
prefill/decode/aggregate: counts, GPUs per worker (TP), workers per node, args and env.

Facts: SemiAnalysisAI/srt-slurm `core/roles.py` and `core/migrate.py` (where each schema keeps a role's
keys, and how schema 1 derives the GPUs per worker), NVIDIA/srt-slurm `backends/atom.py` at 1a749ed1
(args: sorted, `true` a bare flag, `false`/null dropped; `extra_args` never read), and
`cli/mixins/worker_stage.py` (env: the role's, then the global `environment`; `{node}` templating).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from .recipe import ARG_KEY, ENV_NAME, normalize_flag
from .srtslurm_keys import ATOM_RESERVED, ROLE_MODE
from .srtslurm_read import _Reader, _text

Role = Literal["prefill", "decode", "agg"]


# -- roles ----------------------------------------------------------------------------------------------


@dataclass
class _Role:
    """One role as both schemas spell it; each value keeps the path it was read from (for lines)."""

    name: Role
    nodes: tuple[Any, tuple] = (None, ())
    workers: tuple[Any, tuple] = (None, ())
    gpus: tuple[Any, tuple] = (None, ())
    args: tuple[Any, tuple] = (None, ())
    env: tuple[Any, tuple] = (None, ())
    restart: tuple[Any, tuple] = (None, ())
    critical: tuple[Any, tuple] = (None, ())

    def present(self) -> bool:
        return any(v[1] for v in (self.nodes, self.workers, self.gpus, self.args, self.env))


def _roles_v1(r: _Reader, backend: tuple) -> dict[str, _Role]:
    roles: dict[str, _Role] = {}
    for role, mode in ROLE_MODE.items():
        item = _Role(role)  # type: ignore[arg-type]
        for attr, key in (("nodes", f"{role}_nodes"), ("workers", f"{role}_workers"), ("gpus", f"gpus_per_{role}")):
            if r.has("resources", key):
                setattr(item, attr, (r.get("resources", key), ("resources", key)))
        if r.has(*backend, f"{mode}_environment"):
            item.env = (r.take(*backend, f"{mode}_environment"), (*backend, f"{mode}_environment"))
        if r.has(*backend, "atom_config", mode):
            item.args = (r.get(*backend, "atom_config", mode), (*backend, "atom_config", mode))
        if r.has(*backend, f"{mode}_extra_args"):
            r.take(*backend, f"{mode}_extra_args")
            r.error((*backend, f"{mode}_extra_args"),
                    "srt-slurm's ATOM backend never reads extra_args (the worker would start without them); "
                    f"write them as flags under atom_config.{mode}")
        if item.present():
            roles[role] = item
    return roles


def _roles_v2(r: _Reader) -> dict[str, _Role]:
    roles: dict[str, _Role] = {}
    for role in r.section("roles"):
        path = ("roles", role)
        if role not in ROLE_MODE:
            r.take(*path)
            r.error(path, f"is not a role; srt-slurm's roles are {', '.join(ROLE_MODE)}")
            continue
        spec = r.section(*path)
        item = _Role(role)
        for attr in ("nodes", "workers", "gpus", "args", "env"):
            if attr in spec:
                setattr(item, attr, (spec[attr], (*path, attr)))
        for key, why in (("extra_args", "srt-slurm's ATOM backend never reads extra_args (the worker would start "
                                        "without them); write them as flags under args"),
                         ("engine", "a per-role engine is not something atomdeck runs; one engine serves all roles")):
            if key in spec:
                r.take(*path, key)
                r.error((*path, key), why)
        if "kv_events" in spec:
            r.take(*path, "kv_events")
            if spec["kv_events"]:
                r.warn((*path, "kv_events"), "not carried: KV events feed a KV-aware router (Infera, Dynamo); "
                                             "AToMesh reads none")
        if "critical" in spec:  # srt-slurm PR #450: atomdeck's roles.<role>.critical, the same meaning
            r.take(*path, "critical")
            if isinstance(spec["critical"], bool):
                item.critical = (spec["critical"], (*path, "critical"))
            else:
                r.error((*path, "critical"), f"must be true or false, got {spec['critical']!r}")
        if "restart" in spec:  # srt-slurm PR #451: never | on-failure | always, or the mapping; the same keys
            r.take(*path, "restart")
            item.restart = (spec["restart"], (*path, "restart"))
        roles[role] = item
    return roles


def _role_args(r: _Reader, item: _Role) -> dict[str, Any]:
    raw, path = item.args
    if path:
        r.take(*path)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        r.error(path, f"must be a mapping of ATOM flags to values, got {raw!r}")
        return {}
    out: dict[str, Any] = {}
    for key in sorted(raw, key=str):  # srt-slurm passes them in sorted order (_config_to_cli_args)
        value, kpath = raw[key], (*path, key)
        canon = normalize_flag(str(key))
        if canon in ATOM_RESERVED:
            r.error(kpath, f"is managed by srt-slurm and by atomdeck ({ATOM_RESERVED[canon]}); remove it")
        elif canon == "extra-kv-connectors":
            r.error(kpath, "atomdeck's workers get one Mooncake connector; extra KV connectors (LMCache, ...) "
                           "are not supported")
        elif not isinstance(key, str) or key.startswith("-") or not ARG_KEY.match(key):
            r.error(kpath, "is not an ATOM flag name (srt-slurm writes it as --KEY); use e.g. max-num-seqs")
        elif isinstance(value, dict):
            r.error(kpath, "a mapping cannot be a flag value; write the JSON text ATOM expects as a string")
        elif isinstance(value, list) and not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                 for v in value):
            r.error(kpath, "a list value must hold text or numbers")
        else:
            out[key] = False if value is None else value  # null, like false, passes no flag
    return out


def _role_env(r: _Reader, item: _Role, glob: dict[str, str]) -> dict[str, str]:
    raw, path = item.env
    if path:
        r.take(*path)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        r.error(path, f"must be a mapping of variable names to values, got {raw!r}")
        return {}
    out = _env(r, path, raw)
    for k in list(out):
        if k in glob:  # srt-slurm applies the global environment after the role's: the role's value never counts
            if glob[k] != out[k]:
                r.warn((*path, k), f"srt-slurm applies the global environment after the role's env, so the worker "
                                   f"gets {k}={glob[k]} (from environment:), not {out[k]}")
            del out[k]
    return out


def _env(r: _Reader, path: tuple, raw: dict) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not ENV_NAME.match(k):
            r.error((*path, k), "is not an environment variable name")
        elif v is None or isinstance(v, (dict, list)):
            r.error((*path, k), f"must have a text value, got {v!r}")
        elif re.search(r"\{node(_id)?\}", str(v)):
            r.error((*path, k), "uses {node}/{node_id}, which srt-slurm fills in per node; atomdeck sets one value "
                                "per role: write it without the placeholder")
        else:
            out[k] = _text(v)
    return out


def _layout(r: _Reader, roles: dict[str, _Role], gpus_per_node: int | None, out: dict) -> None:
    """Counts, GPUs per worker (TP) and workers per node of each role."""
    disagg = [x for x in ("prefill", "decode") if x in roles]
    if "agg" in roles and disagg:
        r.error(roles["agg"].workers[1] or roles["agg"].nodes[1],
                "an aggregate role next to prefill/decode roles; atomdeck runs one or the other")
        return
    if not roles:
        r.error(("roles",) if r.has("roles") else ("resources",), "names no prefill/decode or agg workers")
        return
    if disagg and len(disagg) == 1:
        other = "decode" if disagg == ["prefill"] else "prefill"
        r.error(roles[disagg[0]].workers[1] or roles[disagg[0]].nodes[1],
                f"a disaggregated layout needs {other} workers too")
        return
    out["mode"] = "aggregate" if "agg" in roles else "disagg"
    for name, item in roles.items():
        key = "aggregate" if name == "agg" else name
        spec: dict[str, Any] = {}
        workers = _checked(r, item.workers, "workers", 1)
        gpus = _checked(r, item.gpus, "gpus", 1)
        nodes_raw, nodes_path = item.nodes
        if nodes_raw == "colocate" or (nodes_raw == 0 and name == "decode"):
            r.take(*nodes_path)
            r.error(nodes_path, "decode workers on the prefill nodes: atomdeck gives each role its own nodes; "
                                "give decode nodes of its own")
            continue
        nodes = _checked(r, item.nodes, "nodes", 1)
        if workers is None or nodes is None:
            continue
        if gpus is None:
            if gpus_per_node is None:
                r.error(nodes_path, "the GPUs per worker are not given (gpus / gpus_per_<role>) and cannot be derived "
                                    "without resources.gpus_per_node; set them")
                continue
            gpus = nodes * gpus_per_node // workers  # srt-slurm's own derivation (core/migrate.py)
        if gpus_per_node is not None and gpus > gpus_per_node:
            r.error(item.gpus[1] or nodes_path,
                    f"{gpus} GPUs per worker do not fit on one node of {gpus_per_node}: srt-slurm's ATOM backend, "
                    "like atomdeck, needs each worker on one node")
            continue
        per_node = -(-workers // nodes)
        if -(-workers // per_node) != nodes or (gpus_per_node is not None and per_node * gpus > gpus_per_node):
            r.error(nodes_path, f"{workers} worker(s) of {gpus} GPU(s) on {nodes} node(s) is not a layout atomdeck "
                                "can reproduce (it fills each node with the same number of workers); change nodes "
                                "or workers")
            continue
        spec["workers"], spec["tp"] = workers, gpus
        if per_node > 1:
            spec["per_node"] = per_node
        out[key] = spec


def _checked(r: _Reader, value: tuple[Any, tuple], what: str, minimum: int) -> int | None:
    raw, path = value
    if not path:
        return None
    r.take(*path)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        r.error(path, f"{what} must be a whole number of at least {minimum}, got {raw!r}")
        return None
    return raw


def _restart(r: _Reader, value: tuple) -> Any:
    """srt-slurm's restart policy (its PR #451: a word or a mapping), checked here so a bad key is named with its
    line in the srt-slurm file."""
    from pydantic import ValidationError

    from .recipe import RestartPolicy

    raw, path = value
    try:
        RestartPolicy.model_validate({"policy": raw} if isinstance(raw, str) else raw)
    except ValidationError as e:
        for err in e.errors():
            where = (*path, *(str(x) for x in err["loc"] if x != "policy" or not isinstance(raw, str)))
            r.error(where, f"{err['msg']} (srt-slurm's restart: never, on-failure, always, or policy, "
                           f"max_restarts, backoff_seconds, max_backoff_seconds)")
        return None
    return raw
