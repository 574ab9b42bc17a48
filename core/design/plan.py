"""Plan: a recipe laid out on chosen nodes: endpoints, the router, every port, and the barrier.

Pure and deterministic: the same recipe, cluster, inventory and choice give the same plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..config.cluster import Cluster
from ..config.errors import PlanError
from ..config.recipe import Recipe
from .findings import Finding, Severity
from .inventory import Node

Role = Literal["prefill", "decode", "worker", "router"]


@dataclass(frozen=True)
class Endpoint:
    """One ATOM worker (a logical endpoint; it always fits on one node)."""

    name: str  # "prefill-0"
    role: Role
    index: int  # index within its role
    node: str
    host: str  # the address the router and peers use
    slot: int  # index among the workers sharing this node
    http_port: int
    tp: int
    handshake_port: int | None  # first port of this worker's handshake block (disagg only)
    gpus: tuple[int, ...] = ()  # visible GPUs when workers share a node; () = all
    engine_port: int | None = None  # ATOM's internal --port, set only for co-located workers

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def handshake_ports(self) -> tuple[int, ...]:
        """Producer listeners: handshake_port + dp_rank*tp_size + tp_rank, one per GPU rank."""
        if self.role != "prefill" or self.handshake_port is None:
            return ()
        return tuple(range(self.handshake_port, self.handshake_port + self.tp))


@dataclass(frozen=True)
class RouterPlacement:
    node: str
    host: str
    port: int
    prometheus_port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class BarrierCell:
    """A (node, port) pair that must open before the deployment is up."""

    node: str
    host: str
    port: int
    role: Role
    kind: Literal["http", "handshake", "router", "extra"]
    owner: str | None  # the process that opens it

    @property
    def key(self) -> str:
        return f"{self.node}:{self.port}"


@dataclass(frozen=True)
class Selection:
    """Which nodes serve which role, in rank order (prefill nodes first, then decode)."""

    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    router: str | None = None

    def all(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.prefill + self.decode + self.workers))

    def role_of(self, node: str) -> Role | Literal[""]:
        if node in self.prefill:
            return "prefill"
        if node in self.decode:
            return "decode"
        if node in self.workers:
            return "worker"
        return "router" if node == self.router else ""


@dataclass
class Plan:
    recipe: Recipe
    cluster: Cluster
    selection: Selection
    nodes: tuple[Node, ...]  # selected nodes in rank order
    endpoints: tuple[Endpoint, ...]
    router: RouterPlacement
    barrier: tuple[BarrierCell, ...]
    overrides: frozenset[str] = field(default_factory=frozenset)  # unhealthy nodes chosen on purpose

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def role_endpoints(self, role: str) -> list[Endpoint]:
        return [e for e in self.endpoints if e.role == role]

    def on_node(self, node: str) -> list[Endpoint]:
        return [e for e in self.endpoints if e.node == node]

    def endpoint(self, name: str) -> Endpoint:
        for e in self.endpoints:
            if e.name == name:
                return e
        raise KeyError(name)

    @property
    def shape(self) -> str:
        """A short name for the layout, e.g. '2P1D TP8' or '3x agg TP8'."""
        r = self.recipe
        if r.mode == "aggregate":
            return f"{r.aggregate.workers}x agg TP{r.aggregate.tp}"
        dpa = " DPA" if r.prefill.dp_attention or r.decode.dp_attention else ""
        return f"{r.prefill.workers}P{r.decode.workers}D{dpa} TP{r.prefill.tp}"


def nodes_needed(recipe: Recipe) -> dict[str, int]:
    return {role: spec.nodes_needed() for role, spec in recipe.roles()}


def _usable(node: Node, cluster: Cluster) -> bool:
    return node.healthy and cluster.exclusion(node.name) is None


def node_verdict(node: Node, cluster: Cluster) -> str:
    """Why a node may not be chosen ('' when it may): the exclusion rule first, then Slurm's state."""
    rule = cluster.exclusion(node.name)
    if rule:
        return f"excluded by cluster rule '{rule.node}': {rule.reason}"
    return node.why_unhealthy()


def _pick_hint(name: str, inventory: list[Node], cluster: Cluster) -> str:
    """What to pick instead of an unknown node: only nodes that can be used, a close name first."""
    import difflib

    usable = [n.name for n in inventory if _usable(n, cluster)]
    close = difflib.get_close_matches(name, usable, n=1, cutoff=0.75)
    lead = f"did you mean {close[0]}? " if close else ""
    return f"{lead}usable nodes: {', '.join(usable)}" if usable else "no node of the cluster is usable now"


def _check_names(names: list[str], key: str, by_name: dict[str, Node], cluster: Cluster,
                 overrides: frozenset[str], findings: list[Finding]) -> list[str]:
    """Findings for duplicate, unknown and unusable names (pointing at `key`); returns the unknown ones."""
    for n in sorted({n for n in names if names.count(n) > 1}):
        findings.append(Finding("node-duplicate", "error", f"node {n} is chosen more than once",
                                key, "list each node once", n))
    unknown = [n for n in dict.fromkeys(names) if n not in by_name]
    for n in unknown:
        findings.append(Finding("node-unknown", "error", f"node {n} is not in cluster {cluster.name}",
                                key, _pick_hint(n, list(by_name.values()), cluster), n))
    for n in dict.fromkeys(names):
        if n in by_name and node_verdict(by_name[n], cluster):
            sev: Severity = "warning" if n in overrides else "error"
            rule = "node-excluded" if cluster.exclusion(n) else "node-unhealthy"
            fix = "the override is on; watch this node closely" if sev == "warning" else \
                "pick a healthy node, or override explicitly if you know it is fine"
            findings.append(Finding(rule, sev, f"node {n} is {node_verdict(by_name[n], cluster)}", key, fix, n))
    return unknown


_PLACEMENT_KEY = {"prefill": "prefill", "decode": "decode", "worker": "workers"}


def _place_by_role(recipe: Recipe, cluster: Cluster, inventory: list[Node], overrides: frozenset[str],
                   findings: list[Finding]) -> dict[str, tuple[str, ...]] | None:
    """Each role's nodes from its own `placement.<role>` list; a role left empty gets usable nodes."""
    assert recipe.placement is not None
    by_name = {n.name: n for n in inventory}
    need = nodes_needed(recipe)
    lists = {role: list(getattr(recipe.placement, key)) for role, key in _PLACEMENT_KEY.items()}
    ok = True
    for role, names in lists.items():
        if names and role not in need:
            findings.append(Finding("placement-role", "error",
                                    f"this {recipe.mode} recipe has no {role} workers to place",
                                    f"placement.{_PLACEMENT_KEY[role]}",
                                    f"remove it, or place {', '.join(_PLACEMENT_KEY[r] for r in need)}"))
            ok = False
    seen: dict[str, str] = {}
    for role, count in need.items():
        names, key = lists[role], f"placement.{_PLACEMENT_KEY[role]}"
        if not names:
            continue
        spec = recipe.role(role)
        if len(names) != count:
            findings.append(Finding(
                "placement-count", "error",
                f"{key} lists {len(names)} node(s) but {spec.workers} {role} worker(s) at {spec.per_node} "
                f"per node need {count}", key, f"list exactly {count} node(s) for {role}"))
            ok = False
        if _check_names(names, key, by_name, cluster, overrides, findings):
            ok = False
        for n in dict.fromkeys(names):
            if n in seen:
                findings.append(Finding("node-duplicate", "error",
                                        f"node {n} is placed as both {seen[n]} and {role}", key,
                                        "give each role its own nodes", n))
                ok = False
            seen[n] = role
    if not ok:
        return None
    sel: dict[str, tuple[str, ...]] = {}
    spare = [n.name for n in inventory if n.name not in seen and (_usable(n, cluster) or n.name in overrides)]
    for role, count in need.items():
        if lists[role]:
            sel[role] = tuple(lists[role])
            continue
        sel[role], spare = tuple(spare[:count]), spare[count:]
        if len(sel[role]) < count:
            key = f"placement.{_PLACEMENT_KEY[role]}"
            findings.append(Finding(
                "too-few-nodes", "error",
                f"{role} needs {count} node(s) but only {len(sel[role])} usable node(s) are left after placement",
                key, f"list {count} node(s) for {role}, or lower {role}.workers"))
            return None
    return sel


def choose_nodes(recipe: Recipe, cluster: Cluster, inventory: list[Node], requested: list[str] | None = None,
                 overrides: frozenset[str] = frozenset()) -> tuple[Selection | None, list[Finding]]:
    """Assign nodes to roles. `--nodes` are used in rank order (prefill first, then decode); a recipe's
    `placement` is per role; otherwise usable nodes are picked.

    Returns (None, findings) when no plan can be made (unknown nodes, too few nodes).
    """
    findings: list[Finding] = []
    by_name = {n.name: n for n in inventory}
    need = nodes_needed(recipe)
    total = sum(need.values())
    explicit = requested is not None and len(requested) > 0
    placed = recipe.placement is not None and any(
        getattr(recipe.placement, key) for key in _PLACEMENT_KEY.values())
    if not explicit and placed:
        by_role = _place_by_role(recipe, cluster, inventory, overrides, findings)
        if by_role is None:
            return None, findings
        return _with_router(recipe, by_role, findings)
    if explicit:
        assert requested is not None
        names = [n.strip() for n in requested if n.strip()]
        unknown = _check_names(names, "--nodes", by_name, cluster, overrides, findings)
        names = list(dict.fromkeys(names))
        if unknown:
            return None, findings
        chosen = names
        if len(chosen) > total:
            findings.append(Finding("node-unused", "warning",
                                    f"{len(chosen) - total} chosen node(s) are not needed: "
                                    f"{', '.join(chosen[total:])}", "--nodes",
                                    f"choose {total} node(s) for {_need_text(need)}"))
            chosen = chosen[:total]
    else:
        chosen = [n.name for n in inventory if _usable(n, cluster) or n.name in overrides][:total]
    if len(chosen) < total:
        usable = sum(1 for n in inventory if _usable(n, cluster))
        findings.append(Finding(
            "too-few-nodes", "error",
            f"the layout needs {total} node(s) ({_need_text(need)}) but only {len(chosen)} "
            f"{'were chosen' if explicit else 'are usable'} ({usable} usable of {len(inventory)} in {cluster.name})",
            "--nodes" if explicit else "prefill.workers / decode.workers",
            f"choose {total} nodes, or lower the worker counts (or raise per_node to co-locate workers)"))
        return None, findings
    sel: dict[str, tuple[str, ...]] = {}
    i = 0
    for role, count in need.items():
        sel[role] = tuple(chosen[i:i + count])
        i += count
    return _with_router(recipe, sel, findings)


def _with_router(recipe: Recipe, sel: dict[str, tuple[str, ...]],
                 findings: list[Finding]) -> tuple[Selection | None, list[Finding]]:
    chosen = list(dict.fromkeys(n for names in sel.values() for n in names))
    first = (sel.get("prefill") or sel.get("worker") or ("",))[0]
    router = recipe.router.node or first
    if router not in chosen:
        findings.append(Finding("router-node", "error", f"router node {router} is not one of the chosen nodes",
                                "router.node", f"set it to one of {', '.join(chosen)} or remove it"))
        return None, findings
    return Selection(prefill=sel.get("prefill", ()), decode=sel.get("decode", ()),
                     workers=sel.get("worker", ()), router=router), findings


def _need_text(need: dict[str, int]) -> str:
    return " + ".join(f"{n} {role}" for role, n in need.items())


def build_plan(recipe: Recipe, cluster: Cluster, inventory: list[Node], selection: Selection,
               overrides: frozenset[str] = frozenset(), node_ips: Mapping[str, str] | None = None) -> Plan:
    """Lay the recipe out on the selected nodes. Raises PlanError if the selection does not fit.

    `node_ips` are the addresses pre-flight learned from the nodes themselves: they win over the
    inventory's (a Slurm NodeAddr may be a name, or one of several addresses), except for `static`."""
    by_name = {n.name: n for n in inventory}
    missing = [n for n in selection.all() if n not in by_name]
    if missing:
        raise PlanError(f"nodes not in the inventory of {cluster.name}: {', '.join(missing)}")
    learned = dict(node_ips or {}) if cluster.node_ip.method != "static" else {}

    def host_of(name: str) -> str:
        if name in learned:
            return learned[name]
        node = by_name[name]
        return node.name if cluster.node_ip.method == "name" else (node.addr or node.name)

    endpoints: list[Endpoint] = []
    role_nodes = {"prefill": selection.prefill, "decode": selection.decode, "worker": selection.workers}
    for role, spec in recipe.roles():
        nodes = role_nodes[role]
        if len(nodes) < spec.nodes_needed():
            raise PlanError(f"{role} needs {spec.nodes_needed()} node(s), got {len(nodes)}")
        for i in range(spec.workers):
            node, slot = nodes[i // spec.per_node], i % spec.per_node
            colocated = spec.per_node > 1
            endpoints.append(Endpoint(
                name=f"{role}-{i}", role=role, index=i, node=node, host=host_of(node), slot=slot,
                http_port=recipe.http_port(role) + slot, tp=spec.tp,
                handshake_port=recipe.ports.handshake + slot * spec.tp if recipe.mode == "disagg" else None,
                gpus=tuple(range(slot * spec.tp, (slot + 1) * spec.tp)) if colocated else (),
                engine_port=recipe.ports.engine + slot if colocated and slot else None,
            ))
    assert selection.router is not None
    router = RouterPlacement(selection.router, host_of(selection.router), recipe.ports.router,
                             recipe.ports.router_prometheus)
    selected = tuple(by_name[n] for n in selection.all())
    return Plan(recipe, cluster, selection, selected, tuple(endpoints), router,
                barrier_for(recipe, tuple(endpoints), router, selection, host_of), frozenset(overrides))


def with_node_ips(plan: Plan, node_ips: Mapping[str, str] | None) -> Plan:
    """The plan laid out again with the addresses pre-flight learned from the nodes (ATOM_HOST_IP, proxy_ip,
    the URLs); the same plan when pre-flight learned none."""
    if not node_ips:
        return plan
    return build_plan(plan.recipe, plan.cluster, list(plan.nodes), plan.selection, plan.overrides, node_ips)


def barrier_for(recipe: Recipe, endpoints: tuple[Endpoint, ...], router: RouterPlacement, selection: Selection,
                host_of) -> tuple[BarrierCell, ...]:
    """Exactly the (node, port) pairs each role opens: never a prefill port on a decode node."""
    cells: list[BarrierCell] = []
    for e in endpoints:
        cells.append(BarrierCell(e.node, e.host, e.http_port, e.role, "http", e.name))
        cells.extend(BarrierCell(e.node, e.host, p, e.role, "handshake", e.name) for p in e.handshake_ports)
    cells.append(BarrierCell(router.node, router.host, router.port, "router", "router", "router"))
    for extra in recipe.health.extra_ports:
        targets: list[tuple[str, Role]]
        if extra.role == "router":
            targets = [(router.node, "router")]
        else:
            targets = [(n, selection.role_of(n) or "router") for n in selection.all()
                       if extra.role == "all" or selection.role_of(n) == extra.role]
        cells.extend(BarrierCell(n, host_of(n), extra.port, role, "extra", None) for n, role in targets)
    return tuple(dict.fromkeys(cells))
