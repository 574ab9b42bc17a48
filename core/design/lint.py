"""Lint: the known classes of launch mistakes, caught before anything runs.

Each rule is a function registered under a stable id; `assess` runs node selection, builds the
plan when it can, renders the commands and runs every plan rule. Rules never do I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..config.catalog import Catalog
from ..config.cluster import Cluster
from ..config.errors import AtomdeckError
from ..config.recipe import Recipe, RoleSpec
from ..engines import ENGINES, FRONTENDS, known
from ..engines.args import canonical
from .commands import LaunchContext, ProcessSpec, render
from .container import container_findings
from .findings import Finding, has_errors
from .inventory import Node
from .plan import Plan, Selection, build_plan, choose_nodes

Rule = Callable[[Plan, list[ProcessSpec], Catalog | None], list[Finding]]
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        RULES[rule_id] = fn
        return fn
    return deco


@dataclass
class Assessment:
    """Everything known before launch: the plan (if one could be made), its processes, the findings."""

    recipe: Recipe
    cluster: Cluster
    selection: Selection | None
    plan: Plan | None
    processes: list[ProcessSpec] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.plan is not None and not has_errors(self.findings)

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def launchable(self) -> Plan:
        """The plan to launch; raises naming every error when there is no plan or it has errors."""
        if self.plan is None or not self.ok:
            errs = "; ".join(f"{f.rule}: {f.message}" for f in self.errors()) or "no plan"
            raise AtomdeckError(f"the plan has errors, nothing was launched: {errs}")
        return self.plan


def assess(recipe: Recipe, cluster: Cluster, inventory: list[Node], nodes: list[str] | None = None,
           overrides: frozenset[str] = frozenset(), catalog: Catalog | None = None,
           ctx: LaunchContext | None = None, disabled: frozenset[str] = frozenset()) -> Assessment:
    """Choose nodes, plan, render and lint in one pass. Never raises for a user mistake."""
    selection, findings = choose_nodes(recipe, cluster, inventory, nodes, overrides)
    findings += exclusion_findings(cluster, inventory)
    findings = [f for f in findings if f.rule not in disabled]
    findings += [f for f in recipe_findings(recipe, cluster, catalog) if f.rule not in disabled]
    if selection is not None:
        findings += by_name_findings(selection, inventory)
    if selection is None:
        return Assessment(recipe, cluster, None, None, [], findings)
    plan = build_plan(recipe, cluster, inventory, selection, overrides)
    procs = render(plan, catalog, ctx)
    findings += lint_plan(plan, procs, catalog, disabled)
    return Assessment(recipe, cluster, selection, plan, procs, _dedupe(findings))


def lint_plan(plan: Plan, procs: list[ProcessSpec], catalog: Catalog | None = None,
              disabled: frozenset[str] = frozenset()) -> list[Finding]:
    """Every lint rule on a plan and its rendered processes (a launch's, or a live run's grown by a worker)."""
    findings: list[Finding] = []
    for rule_id, fn in RULES.items():
        if rule_id not in disabled:
            findings += fn(plan, procs, catalog)
    return findings


def _dedupe(findings: list[Finding]) -> list[Finding]:
    return list(dict.fromkeys(findings))


def exclusion_findings(cluster: Cluster, inventory: list[Node]) -> list[Finding]:
    """An exclusion rule that matches no node of the cluster is a typo that silently excludes nothing."""
    import difflib
    import fnmatch

    names = [n.name for n in inventory if n.source != "offline"]
    if not names:  # planned by name only: the cluster's nodes are not known
        return []
    out = []
    for i, rule_ in enumerate(cluster.exclude):
        if any(fnmatch.fnmatchcase(n, rule_.node) for n in names):
            continue
        close = difflib.get_close_matches(rule_.node, names, n=1, cutoff=0.75)
        out.append(Finding("exclude-unknown", "warning",
                           f"the cluster's exclusion rule for '{rule_.node}' matches no node of {cluster.name}, "
                           f"so it excludes nothing ({rule_.reason})", f"cluster exclude[{i}].node",
                           f"did you mean {close[0]}?" if close else
                           "name a node the cluster has (atomdeck nodes lists them), or remove the rule"))
    return out


def by_name_findings(selection: Selection, inventory: list[Node]) -> list[Finding]:
    """A node added by name next to a real inventory is not known to the cluster: say so once per node."""
    if all(n.source == "offline" for n in inventory):
        return []  # planning by name only: the inventory note says it already
    by_name = {n.name for n in inventory if n.source == "offline"}
    return [Finding("node-by-name", "warning", f"{name} was added by name: the cluster does not list it, so its "
                    "state, GPUs and address are not checked", "--nodes",
                    "make sure it is up and reachable, or pick a node the cluster lists", name)
            for name in selection.all() if name in by_name]


def recipe_findings(recipe: Recipe, cluster: Cluster, catalog: Catalog | None) -> list[Finding]:
    """Rules that need no plan: model name, engine/frontend pairing, TP vs node size."""
    out: list[Finding] = []
    engines, frontends = known()
    if recipe.engine not in ENGINES:
        out.append(Finding("frontend-backend", "error", f"engine '{recipe.engine}' is not supported",
                           "engine", f"use one of: {', '.join(engines)}"))
    fe = FRONTENDS.get(recipe.router.type)
    if fe is None:
        out.append(Finding("frontend-backend", "error", f"router '{recipe.router.type}' is not supported",
                           "router.type", f"use one of: {', '.join(frontends)}"))
    elif fe.backend != recipe.engine:
        out.append(Finding("frontend-backend", "error",
                           f"router {fe.name} needs backend {fe.backend} but the workers run {recipe.engine}",
                           "engine", f"set engine: {fe.backend}, or use a router that fronts {recipe.engine}"))
    if recipe.model.served_name is not None and recipe.model.served_name != recipe.model.path:
        out.append(Finding(
            "served-model-name", "error",
            f"clients will ask for '{recipe.model.served_name}' but ATOM serves the literal --model value "
            f"'{recipe.model.path}' (the router answers 503 for any other name)",
            "model.served_name", f"remove it, or set it to '{recipe.model.path}'"))
    unused = ["aggregate"] if recipe.mode == "disagg" else ["prefill", "decode"]
    for section in unused:
        if getattr(recipe, section) != type(recipe).model_fields[section].get_default(call_default_factory=True):
            out.append(Finding("mode-sections", "warning",
                               f"the {section} section is ignored: the recipe's mode is {recipe.mode}",
                               "mode", f"remove {section}, or set mode: "
                                       f"{'aggregate' if section == 'aggregate' else 'disagg'}"))
    for role, spec in recipe.roles():
        key = "aggregate" if role == "worker" else role
        gpn = cluster.gpus_per_node
        if spec.tp > gpn:
            out.append(Finding("tp-gpus", "error",
                               f"{role} TP{spec.tp} does not fit on one node of {gpn} GPUs (an ATOM endpoint "
                               f"must fit on one node)", f"{key}.tp", f"set it to {gpn} or less"))
        elif spec.tp * spec.per_node > gpn:
            out.append(Finding("tp-gpus", "error",
                               f"{spec.per_node} {role} workers of TP{spec.tp} need {spec.tp * spec.per_node} GPUs "
                               f"on one node, which has {gpn}", f"{key}.per_node",
                               f"set it to {max(1, gpn // spec.tp)} or lower {key}.tp"))
        elif spec.tp * spec.per_node < gpn:
            out.append(Finding("tp-gpus", "warning",
                               f"{role} workers use {spec.tp * spec.per_node} of {gpn} GPUs per node; "
                               f"{gpn - spec.tp * spec.per_node} stay idle", f"{key}.tp",
                               f"set {key}.tp to {gpn // spec.per_node}, or co-locate with {key}.per_node"))
    if catalog is not None and not recipe.model.catalog and recipe.engine_defaults:  # false: no catalog is read
        entry_key, _ = catalog.lookup(recipe)
        if entry_key is None:
            out.append(Finding("model-catalog", "warning",
                               f"no catalog entry matches model {recipe.model.path}; ATOM defaults are used "
                               "(no kv-cache dtype, DP-attention or MTP flags)", "model.catalog",
                               f"name an entry of {catalog.source} or add one for this model"))
    for where, env in (("env", recipe.env), ("prefill.env", recipe.prefill.env), ("decode.env", recipe.decode.env),
                       ("aggregate.env", recipe.aggregate.env), ("cluster env", cluster.env)):
        level = env.get("ATOM_LOG_LEVEL", "").upper()
        if level in ("WARNING", "WARN", "ERROR", "CRITICAL"):
            out.append(Finding("log-level", "warning",
                               f"ATOM_LOG_LEVEL={level} hides ATOM's startup stages, so atomdeck cannot tell "
                               "loading from hung", f"{where}.ATOM_LOG_LEVEL", "remove it or set it to INFO"))
    return out + container_findings(recipe, cluster)


@rule("barrier-role-port")
def _barrier_role_port(plan: Plan, procs: list[ProcessSpec], _c: Catalog | None) -> list[Finding]:
    """Every barrier cell must be a port that some process on that node really opens."""
    opened: dict[str, set[int]] = defaultdict(set)
    for p in procs:
        opened[p.node].update(p.ports)
    out = []
    for cell in plan.barrier:
        if cell.port not in opened[cell.node]:
            roles = sorted({p.role for p in procs if p.node == cell.node}) or ["nothing"]
            what = " and ".join(roles)
            out.append(Finding(
                "barrier-role-port", "error",
                f"the barrier waits for port {cell.port} on {cell.node}, but that node runs {what}, which never "
                f"opens it (the start would hang until the timeout)",
                "health.extra_ports" if cell.kind == "extra" else "ports",
                f"wait only for ports the node's role opens: {sorted(opened[cell.node])}", cell.node))
    return out


@rule("reserved-flag")
def _reserved(plan: Plan, procs: list[ProcessSpec], _c: Catalog | None) -> list[Finding]:
    out = []
    for p in procs:
        for flag, source in p.conflicts:
            out.append(Finding("reserved-flag", "error",
                               f"{source} tries to set {flag} for {p.name}, which atomdeck owns; it was ignored",
                               source, f"remove {flag} from {source}"))
    return out


@rule("frontend-backend")
def _backend_flag(plan: Plan, procs: list[ProcessSpec], _c: Catalog | None) -> list[Finding]:
    fe = FRONTENDS.get(plan.recipe.router.type)
    router = next((p for p in procs if p.role == "router"), None)
    if fe is None or router is None:
        return []
    values = [router.argv[i + 1] for i, t in enumerate(router.argv[:-1]) if canonical(t) == "backend"]
    if values != [fe.backend]:
        return [Finding("frontend-backend", "error",
                        f"the router command passes --backend {' '.join(values) or '(none)'}; "
                        f"{fe.name} must get exactly --backend {fe.backend}", "router.args",
                        f"remove any backend setting; atomdeck passes --backend {fe.backend}")]
    return []


@rule("port-collision")
def _ports(plan: Plan, procs: list[ProcessSpec], _c: Catalog | None) -> list[Finding]:
    out = []
    by_node: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for p in procs:
        for port, use, _field in _port_uses(plan, p):
            by_node[p.node][port].append(use)
    for node, ports in by_node.items():
        for port, users in sorted(ports.items()):
            if len(users) > 1:
                out.append(Finding("port-collision", "error",
                                   f"port {port} on {node} is wanted by {' and '.join(users)}", "ports",
                                   "give each a distinct port (ports.* in the recipe)", node))
    return out


def _port_uses(plan: Plan, p: ProcessSpec) -> list[tuple[int, str, str]]:
    """Each port a process listens on: (port, what it is for, the recipe field that sets it)."""
    if p.role == "router":
        return [(plan.router.port, "the router", "ports.router"),
                (plan.router.prometheus_port, "the router's prometheus", "ports.router_prometheus")]
    ep = plan.endpoint(p.name)
    uses = [(ep.http_port, f"{p.name} HTTP", f"ports.{p.role}_http")]
    if ep.handshake_ports:
        block = f"{p.name} handshake block {ep.handshake_ports[0]}-{ep.handshake_ports[-1]}"
        uses += [(port, block, "ports.handshake") for port in ep.handshake_ports]
    if ep.engine_port is not None:
        uses.append((ep.engine_port, f"{p.name} engine port", "ports.engine"))
    return uses


# Every Mooncake transfer engine takes two listening ports (its RPC port and its TCP transport's) at random
# in this range, on every address of its node; MC_MIN_RPC_PORT / MC_MAX_RPC_PORT in its environment move it.
MOONCAKE_RPC_PORTS = (15000, 17000)


def mooncake_rpc_range(env: dict[str, str]) -> tuple[int, int]:
    lo, hi = MOONCAKE_RPC_PORTS
    try:
        return int(env.get("MC_MIN_RPC_PORT", lo)), int(env.get("MC_MAX_RPC_PORT", hi))
    except ValueError:
        return lo, hi


@rule("mooncake-port-range")
def _mooncake_range(plan: Plan, procs: list[ProcessSpec], _c: Catalog | None) -> list[Finding]:
    """A port some process listens on lies in the range where a Mooncake transfer engine on the same node
    picks its own ports at random: now and then that worker or the other process fails to bind."""
    ranges: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for p in procs:
        if p.role in ("prefill", "decode"):  # the workers that start a transfer engine (disaggregated)
            ranges[p.node].add(mooncake_rpc_range(p.env))
    hits: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)  # recipe field -> {use: the range it is in}
    for p in procs:
        for port, use, key in _port_uses(plan, p):
            inside = next(((lo, hi) for lo, hi in ranges.get(p.node, ()) if lo <= port <= hi), None)
            if inside is not None:
                hits[key].setdefault(use, inside)
    out = []
    for key, found in hits.items():
        uses = list(found)
        lo, hi = found[uses[0]]
        more = f" and {len(uses) - 1} more" if len(uses) > 1 else ""
        out.append(Finding(
            "mooncake-port-range", "warning",
            f"{uses[0]}{more} {'lie' if more else 'lies'} inside {lo}-{hi}, where every Mooncake transfer engine "
            f"on the node binds two ports at random: now and then a worker fails at start with 'address already "
            f"in use'", key,
            f"use a port outside {lo}-{hi} (ATOM's defaults are below it), or set MC_MIN_RPC_PORT and "
            f"MC_MAX_RPC_PORT in the workers' env to a range no port of the run uses"))
    return out


@rule("max-num-seqs")
def _max_seqs(plan: Plan, procs: list[ProcessSpec], _c: Catalog | None) -> list[Finding]:
    conc = plan.recipe.benchmark.concurrencies
    if not conc:
        return []
    out = []
    for p in procs:
        if p.role != "decode":
            continue
        seqs = [p.argv[i + 1] for i, t in enumerate(p.argv[:-1]) if canonical(t) == "max-num-seqs"]
        if seqs and seqs[-1].isdigit() and int(seqs[-1]) < max(conc):
            out.append(Finding("max-num-seqs", "error",
                               f"{p.name} runs --max-num-seqs {seqs[-1]}, below the largest benchmark "
                               f"concurrency {max(conc)} (requests would queue)", "decode.args.max-num-seqs",
                               f"remove it (atomdeck uses {max(conc)}) or set it to {max(conc)} or more"))
            break
    return out


# What a role's switches must put on the worker's command line. DP attention also shapes the plan (one
# Mooncake handshake listener per DP rank, so the barrier expects tp of them): a worker started without
# the flag opens one and the barrier hangs.
PARALLEL_FLAGS = (("dp_attention", "DP attention", "--enable-dp-attention", "tp_dp_flags"),
                  ("expert_parallel", "expert parallelism", "--enable-expert-parallel", "ep_dp_flags"),
                  ("mtp", "MTP", "--method", "mtp_flags"))


@rule("parallel-flags")
def _parallel_flags(plan: Plan, procs: list[ProcessSpec], catalog: Catalog | None) -> list[Finding]:
    """A role asks for DP attention, EP or MTP but no flag for it reaches the command (the model catalog
    has no entry for the model, or its entry gives no such flags): the switch would be silently dropped."""
    recipe = plan.recipe
    entry = catalog.lookup(recipe)[0] if catalog is not None else None
    where = f"the model catalog entry '{entry}'" if entry else f"no model catalog entry (model {recipe.model.path})"
    specs: dict[str, RoleSpec] = dict(recipe.roles())
    out, seen = [], set()
    for p in procs:
        spec = specs.get(p.role)
        if spec is None or p.role in seen:
            continue
        key = "aggregate" if p.role == "worker" else p.role
        for attr, what, flag, catalog_key in PARALLEL_FLAGS:
            if getattr(spec, attr) and flag not in p.argv:
                seen.add(p.role)
                out.append(Finding("parallel-flags", "error",
                                   f"{key} asks for {what} but {p.name}'s command has no {flag}: {where} gives no "
                                   f"flags for it, so the workers would run without it", f"{key}.{attr}",
                                   f"add {catalog_key} to the model's catalog entry (or name one with "
                                   f"model.catalog), pass {flag} in {key}.args, or turn {key}.{attr} off"))
    return out


@rule("node-ip")
def _node_ip(plan: Plan, procs: list[ProcessSpec], _c: Catalog | None) -> list[Finding]:
    """ATOM advertises ATOM_HOST_IP and Mooncake's proxy_ip to its peers: an IP address (InferenceX takes
    `hostname -I`). A node known only by name (offline planning, or a Slurm NodeAddr equal to the name)
    puts the name there instead; it works only where every peer resolves it to the right interface."""
    import ipaddress

    out = []
    for node in sorted({ep.node: ep.host for ep in plan.endpoints}.items()):
        name, host = node
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            out.append(Finding("node-ip", "warning",
                               f"{name}'s address is the name '{host}', not an IP: ATOM_HOST_IP and the Mooncake "
                               "proxy_ip will carry it (the peers must resolve it to the RDMA-reachable interface)",
                               "cluster.nodes", f"give {name} its IP (Slurm NodeAddr, or nodes: - {{name: {name}, "
                                                "addr: IP}} in the cluster file)", node=name))
    return out
