"""The CLI verbs. Each returns the process exit code."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from ..design.commands import ProcessSpec, shell_line
from ..design.export import plan_json
from ..design.findings import Finding
from ..design.lint import Assessment
from ..design.plan import node_verdict
from ..design.workspace import Workspace, load_workspace, offline_nodes
from ..run.gpustate import NodeGpuState, node_cell
from ..run.inventory import fetch_inventory


def _csv(text: str | None) -> list[str] | None:
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


def _emit_json(data) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def prepare(args: argparse.Namespace) -> tuple[Workspace, Assessment]:
    """Load recipe and cluster, get the inventory, and assess the requested layout."""
    ws = load_workspace(args.recipe, args.cluster)
    nodes = _csv(args.nodes)
    inventory, note = asyncio.run(fetch_inventory(ws.cluster, args.offline))
    if not inventory and nodes:  # a Slurm cluster planned offline by name
        inventory, note = offline_nodes(nodes), "offline: planned by node name; states not checked"
    ws.inventory, ws.inventory_note = inventory, note
    overrides = frozenset(_csv(args.override) or ())
    return ws, ws.assess(nodes, overrides)


def _findings_text(findings: list[Finding]) -> list[str]:
    if not findings:
        return ["Findings: none"]
    errs = sum(1 for f in findings if f.severity == "error")
    lines = [f"Findings: {errs} error(s), {len(findings) - errs} warning(s)"]
    for f in sorted(findings, key=lambda f: (f.severity != "error", f.rule)):
        where = f" [{f.node}]" if f.node else ""
        lines.append(f"  {f.severity.upper():7} {f.rule}{where}: {f.message}")
        lines.append(f"          change {f.key}: {f.fix}")
    return lines


def _process_text(p: ProcessSpec) -> list[str]:
    return [f"  [{p.name} on {p.node} ({p.host}), ports {', '.join(map(str, _compact(p.ports)))}]",
            f"    {shell_line(p.launch_argv)}"]


def _compact(ports: list[int]) -> list[str]:
    """[6301, 6302, 6303] -> ['6301-6303']."""
    out: list[str] = []
    for p in sorted(ports):
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == p - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{p}"
        elif out and "-" not in out[-1] and int(out[-1]) == p - 1:
            out[-1] = f"{out[-1]}-{p}"
        else:
            out.append(str(p))
    return out


def plan_text(ws: Workspace, a: Assessment) -> str:
    lines = [f"Recipe {a.recipe.name} on cluster {a.cluster.name} ({a.cluster.launcher})"]
    if ws.inventory_note:
        lines.append(f"  note: {ws.inventory_note}")
    if a.plan is None:
        lines.append("No plan could be made.")
        lines += _findings_text(a.findings)
        return "\n".join(lines)
    plan = a.plan
    lines.append(f"Layout {plan.shape}; router on {plan.router.node} :{plan.router.port}; "
                 f"served model '{a.recipe.model.path}'")
    lines.append("Nodes:")
    for n in plan.nodes:
        eps = ", ".join(f"{e.name} :{e.http_port}" for e in plan.on_node(n.name))
        if plan.router.node == n.name:
            eps += f", router :{plan.router.port}"
        lines.append(f"  {n.name:16} {n.addr:15} {plan.selection.role_of(n.name):8} {eps}")
    lines.append(f"Barrier ({len(plan.barrier)} cells):")
    by_node: dict[str, list[int]] = {}
    for c in plan.barrier:
        by_node.setdefault(c.node, []).append(c.port)
    for node, ports in by_node.items():
        lines.append(f"  {node:16} {', '.join(_compact(ports))}")
    lines.append("Commands:")
    for p in a.processes:
        lines += _process_text(p.redacted())
    lines += _findings_text(a.findings)
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    ws, a = prepare(args)
    if getattr(args, "json", False):
        _emit_json(plan_json(a))
    else:
        print(plan_text(ws, a))
    return 0 if a.plan is not None else 1


def cmd_lint(args: argparse.Namespace) -> int:
    ws, a = prepare(args)
    if args.json:
        _emit_json({"ok": a.ok, "findings": [f.to_json() for f in a.findings]})
    else:
        print(f"Lint {a.recipe.name} on {a.cluster.name}" + (f" ({a.plan.shape})" if a.plan else ""))
        if ws.inventory_note:
            print(f"  note: {ws.inventory_note}")
        print("\n".join(_findings_text(a.findings)))
    return 0 if a.ok else 1


def cmd_nodes(args: argparse.Namespace) -> int:
    from ..config.clusters import load
    from .contexts import design_cluster

    cluster = load(design_cluster(args))[0]
    nodes, note = asyncio.run(fetch_inventory(cluster, args.offline))
    gpus: dict[str, NodeGpuState] = {}
    gpu_note = ""
    if getattr(args, "gpus", False):
        from ..run.nodegpus import read_nodes

        gpus, gpu_note = asyncio.run(read_nodes(cluster, [(n.name, n.addr) for n in nodes]))
    rows: list[dict[str, Any]] = []
    for n in nodes:
        verdict = node_verdict(n, cluster)
        row = {"name": n.name, "addr": n.addr, "state": n.state, "gpus": n.gpus,
               "partitions": list(n.partitions), "reason": n.reason, "usable": not verdict, "why_not": verdict}
        if (ns := gpus.get(n.name)) is not None:
            free, total = ns.free_mb()
            row["vram"] = {"free_mb": free, "total_mb": total, "tool": ns.tool, "error": ns.error,
                           "held": ns.flag(), "per_gpu": [[g.index, g.used_mb, g.total_mb] for g in ns.gpus]}
        rows.append(row)
    if args.json:
        _emit_json({"cluster": cluster.name, "note": note, "nodes": rows,
                    **({"gpus_note": gpu_note} if getattr(args, "gpus", False) else {})})
        return 0
    print(f"Cluster {cluster.name} ({cluster.launcher}): {len(rows)} nodes, "
          f"{sum(r['usable'] for r in rows)} usable" + (f"  [{note}]" if note else ""))
    vram = bool(gpus)
    print(f"  {'NODE':16} {'ADDR':15} {'STATE':22} {'GPUS':>4}  " + (f"{'VRAM':11} " if vram else "")
          + f"{'PARTITION':10} WHY NOT / REASON")
    for r in rows:
        mark = " " if r["usable"] else "x"
        cell = f"{node_cell(gpus.get(r['name'])):11} " if vram else ""
        print(f"{mark} {r['name']:16} {r['addr']:15} {r['state']:22} {r['gpus']:>4}  {cell}"
              f"{','.join(r['partitions']):10} {r['why_not'] or r['reason']}")
    for name, ns in gpus.items():  # memory held by another job or an orphan, or why a node was not read
        if ns.flag() or (ns.error and not ns.gpus):
            print(f"  {name}: {ns.flag() or ns.error}")
    if gpu_note:
        print(f"  {gpu_note}")
    return 0
