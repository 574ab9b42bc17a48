"""`atomdeck drill list` and `atomdeck drill NAME`: launch the demo with one simulator fault on one
process, and say what to look for."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: main.build_parser imports this module for every verb, the console too
    from ..config.drills import Drill

DEFAULT_RECIPE = "demo-2p1d"


def add_parser(sub) -> None:
    """The verb's arguments (called from main.build_parser)."""
    p = sub.add_parser("drill", help="practise a failure: launch the demo with one simulator fault",
                       description="`drill list` shows every fault; `drill NAME` launches the demo with that "
                                   "fault on one process and says what to look for.")
    p.add_argument("name", help="a drill name, or `list`")
    p.add_argument("--recipe", "-r", default=DEFAULT_RECIPE, help=f"recipe to run (default {DEFAULT_RECIPE})")
    from .contexts import add_args

    add_args(p, "design")
    p.add_argument("--on", default=None, metavar="PROCESS",
                   help="the process that gets the fault, e.g. prefill-1 (default: the one the drill is about)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _list_text(drills: list[Drill]) -> str:
    width = max(len(d.name) for d in drills)
    lines = [f"{len(drills)} drills (atomdeck drill NAME [--recipe {DEFAULT_RECIPE}] [--on PROCESS]):"]
    for d in drills:
        lines.append(f"  {d.name:{width}}  {d.applies:13}  {d.what}")
    return "\n".join(lines)


def cmd_drill(args: argparse.Namespace) -> int:
    from ..config.drills import find_drill, load_drills

    if args.name == "list":
        drills = load_drills()
        if args.json:
            print(json.dumps({"drills": [{"name": d.name, "what": d.what, "look_for": d.look_for,
                                          "applies": d.applies, "env": d.env} for d in drills]}, indent=2))
        else:
            print(_list_text(drills))
        return 0
    return _launch(find_drill(args.name), args)


def _launch(drill: Drill, args: argparse.Namespace) -> int:
    from ..config.clusters import load
    from ..design.drills import aim, drilled, refuse_without_simulator
    from ..run.run import Run
    from .contexts import design_cluster
    from .design_verbs import _findings_text, prepare
    from .output import fail as _fail

    refuse_without_simulator(load(design_cluster(args))[0])  # before asking Slurm anything
    plan_args = argparse.Namespace(recipe=args.recipe, cluster=args.cluster, nodes=None, override=None, offline=False)
    ws, a = prepare(plan_args)
    if a.plan is None:
        return _fail(args.json, 1, "lint", "nothing launched: no plan could be made",
                     [f.to_json() for f in a.findings], _findings_text(a.findings))
    target = aim(drill, a.plan, args.on)
    ws.recipe = drilled(ws.recipe, target)
    a = ws.assess()
    if not a.ok:
        return _fail(args.json, 1, "lint", "nothing launched: the recipe has errors",
                     [f.to_json() for f in a.findings], _findings_text(a.findings))

    async def go() -> Run:
        run = await Run.launch(ws, a)
        await run.close()
        return run

    run = asyncio.run(go())
    if args.json:
        print(json.dumps({"run": run.id, "drill": drill.name, "what": drill.what, "look_for": drill.look_for,
                          "process": target.process, "node": target.node, "env": target.env,
                          "key": target.key}, indent=2))
        return 0
    print(run.id, flush=True)
    err = sys.stderr
    print(f"drill {drill.name}: {target.process} on {target.node} {drill.what}", file=err)
    print(f"  set in {target.key}: " + " ".join(f"{k}={v}" for k, v in target.env.items()), file=err)
    print("  look for:", file=err)
    for item in drill.look_for:
        print(f"    - {item}", file=err)
    print(f"  watch it: atomdeck tui --run {run.id}   (or atomdeck status {run.id})", file=err)
    print(f"  stop it:  atomdeck down {run.id}", file=err)
    return 0
