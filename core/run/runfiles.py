"""What a new run directory is given, before its first process starts: run.json (then the facts its launcher
learns, as they come), the recipe and the cluster (secrets masked), the selection and the inventory (enough for
`Run.open`, also when the launch dies half-way), then the plan and every command as rendered for this run."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..config.cluster import parse_cluster
from ..config.recipe import parse_recipe
from ..config.secrets import MASK, is_secret
from ..design.commands import ProcessSpec
from ..design.inventory import Node
from ..design.lint import Assessment
from ..design.plan import Plan, Selection, build_plan
from ..design.workspace import render_for_run
from .events import Event
from .rundir import RunDir, new_run_id


def new_run_dir(plan: Plan, job_id: str | None = None) -> tuple[RunDir, dict]:
    """A new run's directory for `plan`: run.json (launching; `job_id` an allocation it runs in) and the design's
    files, before anything on a node is touched. Returns the directory and its run.json as written."""
    rd = RunDir.create(new_run_id(plan.recipe.name))
    meta = RunDir.initial_meta(rd.id, plan.recipe.name, plan.cluster.name, plan.cluster.launcher)
    if job_id:
        meta["job_id"] = job_id
    rd.write_json("run.json", meta)
    write_design(rd, plan)
    return rd, meta


def record_facts(run_dir: Path, facts: dict) -> None:
    """A launcher's facts (a Slurm job id as soon as sbatch answers) go into run.json at once."""
    if (run_dir / "run.json").exists():
        RunDir(run_dir).update_meta(**facts)


def write_design(rd: RunDir, plan: Plan) -> None:
    """recipe.yaml, cluster.yaml, selection.json, inventory.json: what `Run.open` rebuilds the plan from."""
    rd.write_text("recipe.yaml", redacted_yaml(plan.recipe.model_dump(mode="json", exclude_defaults=True)))
    rd.write_text("cluster.yaml", redacted_yaml(plan.cluster.model_dump(mode="json")))
    sel = plan.selection
    rd.write_json("selection.json", {"prefill": sel.prefill, "decode": sel.decode, "workers": sel.workers,
                                     "router": sel.router, "overrides": sorted(plan.overrides)})
    rd.write_json("inventory.json", [{"name": n.name, "addr": n.addr, "states": n.states, "gpus": n.gpus,
                                      "partitions": n.partitions, "reason": n.reason} for n in plan.nodes])
    rd.require_saved()  # (and run.json, written before): without them no later session finds the run


def redacted_yaml(data: dict) -> str:
    """YAML of a recipe or cluster with the values of secret-looking env entries masked (run directories
    never hold secrets)."""
    def walk(obj, in_env: bool = False):
        if isinstance(obj, dict):
            return {k: (MASK if in_env and is_secret(str(k)) and v else walk(v, k == "env")) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return obj
    return yaml.safe_dump(walk(data), sort_keys=False, default_flow_style=False, width=100)


def write_plan_files(rd: RunDir, a: Assessment, processes: list[ProcessSpec]) -> None:
    """plan.json and commands.sh, with the commands rendered for this run (its addresses, its log paths). For the
    operator only (`Run.open` rebuilds the plan from the design): a directory that cannot take them now keeps them
    waiting, and the launch goes on."""
    from ..design.export import export_script, plan_json

    shown = Assessment(a.recipe, a.cluster, a.selection, a.plan, processes, a.findings)
    rd.write_json("plan.json", plan_json(shown))
    rd.write_text("commands.sh", export_script(shown))
    for p in processes:
        write_spec(rd, p)


def write_spec(rd: RunDir, p: ProcessSpec) -> None:
    """specs/NAME.json: the process exactly as it was started (secret values masked), what a restart by any later
    session starts again: the same argv and environment, whatever the catalog or the code renders by then."""
    import contextlib

    with contextlib.suppress(OSError):  # (a run directory made before specs/ existed)
        (rd.path / "specs").mkdir(mode=0o700, exist_ok=True)
    rd.write_json(f"specs/{p.name}.json", p.redacted().to_json())


def recorded_spec(rd: RunDir, name: str) -> ProcessSpec | None:
    """The process as it was started, secret values still masked (None for a run launched before specs/)."""
    from ..config.errors import AtomdeckError

    try:
        d = rd.read_json(f"specs/{name}.json")
    except AtomdeckError:
        return None
    try:
        d["conflicts"] = [tuple(c) for c in d.get("conflicts", [])]
        return ProcessSpec(**d)
    except TypeError:
        return None


def design_from_disk(rd: RunDir, meta: dict) -> tuple[Plan, list[ProcessSpec]]:
    """The run's plan and commands as its directory records them (a launch wrote them; an added worker rewrote
    them)."""
    recipe = parse_recipe(rd.read_text("recipe.yaml"), str(rd.path / "recipe.yaml"))
    cluster = parse_cluster(rd.read_text("cluster.yaml"), str(rd.path / "cluster.yaml"))
    sel = rd.read_json("selection.json")
    inventory = [Node(d["name"], d["addr"], tuple(d["states"]), d["gpus"], tuple(d["partitions"]), d["reason"])
                 for d in rd.read_json("inventory.json")]
    selection = Selection(tuple(sel["prefill"]), tuple(sel["decode"]), tuple(sel["workers"]), sel["router"])
    plan = build_plan(recipe, cluster, inventory, selection, frozenset(sel.get("overrides", ())),
                      meta.get("node_ips"))
    return plan, render_for_run(plan, None, rd.id, meta.get("job_id"), str(rd.path / "logs"))


def added_event(plan: Plan, name: str, seen: bool = False) -> Event:
    """The state's news of a worker added to a live run: its process, its barrier cells, its KV pairs."""
    ep = plan.endpoint(name)
    cells = [{"node": c.node, "host": c.host, "port": c.port, "role": c.role, "kind": c.kind, "owner": c.owner}
             for c in plan.barrier if c.owner == name]
    other = "decode" if ep.role == "prefill" else "prefill"
    pairs = [((name, o.name) if ep.role == "prefill" else (o.name, name)) for o in plan.role_endpoints(other)] \
        if ep.role in ("prefill", "decode") else []
    return Event("proc.added", name, ep.role, f"added on {ep.node}",
                 {"role": ep.role, "node": ep.node, "cells": cells, "pairs": pairs, "seen": seen})
