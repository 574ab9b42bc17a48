"""Adding a worker to a live run (issue 38): a decode (or, with the router restarted, a prefill) of the run's recipe
on a free node the operator picks, or on a free `per_node` slot of a node the run already uses. The grown design is
linted as for a launch, the node checked as for a launch (healthy, no other run on it, its ports free), the run
directory's design rewritten (so status, down, a reattach and the Runs screen know the worker), the worker started
through the run's launcher, watched up, and registered with the router through its worker API.

AToMesh asks a prefill for its tp_size only when it starts (atom/mesh/src/routers/http_pd_router.rs,
fetch_atom_prefill_info): a prefill registered later at a new URL gets every request routed to it refused
("Failed to enrich decode kv: tp_size missing for prefill", placement/backend/atom.rs). So a prefill is added by
restarting the router with it on its command line: clients see the router's gap, and the confirmation says so.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..config.errors import AtomdeckError
from ..design.edit import set_field
from ..design.inventory import Node
from ..design.lint import by_name_findings, lint_plan
from ..design.plan import Plan, Selection, build_plan
from ..design.workspace import render_for_run
from .actions import _node_reachable, start_one, wait_ready
from .actor import ActionFailed, ActionResult, Actor, check_live
from .drain import RouterSide
from .events import Event
from .inuse import check_nodes_free
from .ports import check_ports_free
from .runfiles import added_event, write_design, write_spec

if TYPE_CHECKING:
    from .actor import Run

PREFILL_NEEDS_ROUTER = ("AToMesh learns a prefill's tp_size only when it starts (http_pd_router.rs "
                        "fetch_atom_prefill_info): a prefill added to a running router gets every request routed to "
                        "it refused. Add it with --restart-router: the router restarts with it, and clients see a gap "
                        "of a few seconds")


def grow(run: Run, role: str, node: str | None, inventory: list[Node]) -> tuple[Plan, str, str, bool]:
    """The run's design with one more worker of `role`: (the plan, the new worker's name, its node, whether the
    node is new to the run). Raises naming what to change."""
    plan = run.plan
    spec = next((sp for r, sp in plan.recipe.roles() if r == role), None)
    if spec is None:
        raise AtomdeckError(f"the recipe of run {run.id} has no {role} role")
    removed = [e for e in plan.role_endpoints(role) if (p := run.state.procs.get(e.name)) is not None and p.removed
               and (node is None or e.node == node)]
    if removed:  # a slot a removed worker left: the worker comes back there, under its name, as designed
        return plan, removed[0].name, removed[0].node, False
    index = len(plan.role_endpoints(role))
    nodes = list({"prefill": plan.selection.prefill, "decode": plan.selection.decode}[role])
    slot_free = index % spec.per_node != 0
    if slot_free:
        target = nodes[index // spec.per_node]
        if node is not None and node != target:
            raise AtomdeckError(f"{role}-{index} goes on the free slot of {target} ({role}.per_node is "
                                f"{spec.per_node}); leave out --node, or name {target}")
        fresh = False
    else:
        used = set(plan.selection.all())
        by_name = {n.name: n for n in inventory}
        if node is None:
            free = [n.name for n in inventory if n.name not in used and n.healthy and
                    not any(r.node == n.name for r in plan.cluster.exclude)]
            if not free:
                raise AtomdeckError(f"no free healthy node for {role}-{index} on {plan.cluster.name}: every node is "
                                    f"used by the run, excluded or unhealthy; name one with --node")
            node = free[0]
        elif node in used:
            raise AtomdeckError(f"{node} is already used by run {run.id} ({role}.per_node {spec.per_node} has no free "
                                f"slot there); pick a node the run does not use")
        elif node not in by_name:
            raise AtomdeckError(f"{node} is not a node of {plan.cluster.name}; its nodes: "
                                f"{', '.join(sorted(by_name))}")
        if plan.cluster.launcher == "slurm":
            raise AtomdeckError(f"{node} is not in Slurm job {run.rd.meta().get('job_id', '?')}'s allocation, and a "
                                f"running job's allocation cannot grow; a worker can be added here only on a free "
                                f"{role}.per_node slot of a node the job holds")
        nodes.append(node)
        target, fresh = node, True
    recipe = set_field(plan.recipe, f"{role}.workers", spec.workers + 1)
    sel = plan.selection
    selection = Selection(tuple(nodes) if role == "prefill" else sel.prefill,
                          tuple(nodes) if role == "decode" else sel.decode, sel.workers, sel.router)
    known = {n.name: n for n in plan.nodes}
    for n in inventory:
        known.setdefault(n.name, n)
    grown = build_plan(recipe, plan.cluster, list(known.values()), selection, plan.overrides,
                       run.rd.meta().get("node_ips"))
    return grown, f"{role}-{index}", target, fresh


async def add(run: Run, role: str, node: str | None = None, *, restart_router: bool = False,
              who: str = "", inventory: list[Node] | None = None) -> ActionResult:
    """Add one worker of `role` to the live run (see the module)."""
    from .intents import source
    from .inventory import fetch_inventory

    check_live(run)
    if role not in ("prefill", "decode"):
        raise AtomdeckError(f"add takes --role prefill or --role decode (not {role!r})")
    if role == "prefill" and not restart_router:
        raise AtomdeckError(PREFILL_NEEDS_ROUTER)
    if inventory is None:
        inventory, _ = await fetch_inventory(run.cluster)
    plan, name, target, fresh = grow(run, role, node, inventory)
    again = name in run.state.procs and run.state.procs[name].removed
    meta = run.rd.meta()
    processes = render_for_run(plan, _catalog(), run.id, meta.get("job_id"), str(run.rd.path / "logs"))
    spec = next(p for p in processes if p.name == name)
    findings = by_name_findings(plan.selection, list(plan.nodes)) + lint_plan(plan, processes)
    errors = [f for f in findings if f.severity == "error"]  # (the run launched without any: these are the new)
    if errors:
        raise AtomdeckError(f"{name} on {target} would not pass lint: " +
                            "; ".join(f"{f.rule}: {f.message}" for f in errors))
    with Actor(run, "add", name, who or source("CLI"), {"role": role, "node": target}) as act:
        router = RouterSide(run)
        try:
            act.step("planning", f"{name} on {target}" + (" (a node new to the run)" if fresh else
                                                          " (a free slot of a node the run uses)"))
            await _node_reachable(run, target)
            if fresh:
                try:
                    await check_nodes_free(replace(plan, selection=Selection((), (target,), (), target)),
                                           lambda: _probe_launcher(run))
                except AtomdeckError as e:
                    raise ActionFailed(f"{target} is in use: {e}") from None
            try:
                await check_ports_free(plan, [spec], _probe_launcher(run))
            except AtomdeckError as e:
                raise ActionFailed(str(e)) from None
            if again:  # its slot in the design is still there: only the state takes it back
                run.emit(added_event(plan, name))
            else:
                _record(run, plan, processes, name)
            h = await start_one(run, act, name, None)
            run.emit(Event("proc.started", name, "", f"pid {h.pid} on {h.node}", {"pid": h.pid}))
            run.watchers.adopt([name])
            await wait_ready(run, act, name, h)
            if role == "prefill":
                await _restart_router_with_it(run, act, router)
            else:
                await router.register(act, name)
                await router.smoke_through(act, name)
        except ActionFailed as e:
            return act.end("failed", f"{e}; `atomdeck remove {run.id} {name}` takes it out again")
        finally:
            await router.close()
        return act.end("done", f"{name} serving on {target} after {time.monotonic() - act.t0:.1f}s")


def _catalog():
    """The model catalog a launch renders with (the workspace's): the added worker gets its flags as the others."""
    from ..config.catalog import load_catalog
    from ..config.paths import catalog_path

    path = catalog_path()
    return load_catalog(path) if path.is_file() else None


def _probe_launcher(run: Run):
    from .run import make_launcher

    return make_launcher(run.cluster, "preflight", "/", {})


def _record(run: Run, plan: Plan, processes: list, name: str) -> None:
    """The grown design where every session reads it (the run directory), then this session's run."""
    write_design(run.rd, plan)
    run.plan = plan
    run.processes[name] = next(p for p in processes if p.name == name)
    write_spec(run.rd, run.processes[name])
    run.emit(added_event(plan, name))


async def _restart_router_with_it(run: Run, act: Actor, router: RouterSide) -> None:
    """The router restarted with the new prefill on its command line (see the module): an action of its own on
    the router, so that every session calls its exit a stop."""
    from .actions import restart

    act.step("router", "restarting the router with the new prefill on its command line (clients see a gap)")
    done = await restart(run, "router", who=f"{act.intent.source}, adding {act.intent.target}")
    if done.outcome != "done":
        raise ActionFailed(f"the router's restart {done.outcome}: {done.detail}")
