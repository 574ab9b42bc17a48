"""Aim a drill (one simulator fault) at one process of a plan: the recipe edit that does it.

The fault's variables go into the env of that process's role only (recipe `prefill.env`,
`decode.env`, `aggregate.env` or `router.env`), with ATOMSIM_ONLY=<address>:<port> so that of
several workers of the role only the chosen one acts on them (sim/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.cluster import Cluster
from ..config.drills import Drill
from ..config.errors import AtomdeckError
from ..config.recipe import Recipe
from .edit import set_field
from .plan import Plan

_ENV_KEY = {"prefill": "prefill.env", "decode": "decode.env", "worker": "aggregate.env", "router": "router.env"}


@dataclass(frozen=True)
class Aim:
    process: str  # e.g. decode-0
    node: str
    role: str
    env: dict[str, str]  # what goes into the role's env, ATOMSIM_ONLY included
    key: str  # the recipe key that carries it


def refuse_without_simulator(cluster: Cluster) -> None:
    if not cluster.simulator.enabled:
        raise AtomdeckError(f"cluster {cluster.name} runs the real ATOM and AToMesh, not atomdeck's simulator: "
                            "drills inject the simulator's faults; run them on --cluster local (or a lab "
                            "cluster with simulator.enabled: true)")


def _default_target(drill: Drill, plan: Plan) -> str:
    roles = [e.role for e in plan.endpoints]
    if drill.applies == "router":
        return "router"
    if drill.applies == "prefill":
        return next(e.name for e in plan.endpoints if e.role == "prefill")
    # a worker fault: the decode (the side the fault matrix talks about), or the first worker
    return next((e.name for e in plan.endpoints if e.role == "decode"), plan.endpoints[0].name if roles else "router")


def aim(drill: Drill, plan: Plan, process: str | None = None) -> Aim:
    """Which process gets the fault (default: the one the drill is about) and the env that does it."""
    name = process or _default_target(drill, plan)
    if name == "router":
        if drill.applies not in ("router", "worker+router"):
            raise AtomdeckError(f"drill {drill.name} is a {drill.applies} fault; the router does not read it")
        role, host, node, port = "router", plan.router.host, plan.router.node, plan.router.port
    else:
        ep = next((e for e in plan.endpoints if e.name == name), None)
        if ep is None:
            known = ", ".join([e.name for e in plan.endpoints] + ["router"])
            raise AtomdeckError(f"this plan has no process {name}; it has: {known}")
        if drill.applies == "router" or (drill.applies == "prefill" and ep.role != "prefill"):
            raise AtomdeckError(f"drill {drill.name} is a {drill.applies} fault; {name} is a {ep.role}")
        role, host, node, port = ep.role, ep.host, ep.node, ep.http_port
    env = {**drill.env, "ATOMSIM_ONLY": f"{host}:{port}"}
    return Aim(name, node, role, env, _ENV_KEY[role])


def drilled(recipe: Recipe, a: Aim) -> Recipe:
    """The recipe with the drill's env added to the aimed role's env."""
    current = dict(getattr(recipe, a.key.split(".")[0]).env)
    return set_field(recipe, a.key, {**current, **a.env})
