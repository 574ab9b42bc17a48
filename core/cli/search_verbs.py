"""`atomdeck sweep RECIPE --layouts ... --nodes ...`: the layout search (core/measure/layouts.py). Each layout
brought up on the same nodes in turn (on Slurm in one allocation), benched, torn down and recorded; resumed when
run again; the Pareto of layouts and the best layout per GPU that meets the SLO."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from ..measure.errors import MeasureInputError
from .contexts import add_args, design_cluster


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="layout search: bring the recipe up in each layout in turn on the same nodes, "
                                     "bench each, recommend the best per GPU within the SLO")
    p.add_argument("recipe", help="recipe name (from recipes/) or path to a .yaml file")
    add_args(p, "design")
    p.add_argument("--nodes", "-w", required=True, help="comma-separated nodes, in rank order: each layout takes the "
                                                       "first it needs (prefill first)")
    p.add_argument("--layouts", required=True, metavar="LIST",
                   help="comma-separated xPyD layouts, optionally -tpN and -dpa/-nodpa (both roles), e.g. "
                        "1p1d,1p2d,2p1d,2p1d-dpa")
    p.add_argument("--concurrency", default=None, metavar="LIST", help="concurrency steps of each bench (default: "
                                                                      "recipe benchmark.concurrencies)")
    p.add_argument("--isl", type=int, default=None)
    p.add_argument("--osl", type=int, default=None)
    p.add_argument("--num-prompts", type=int, default=None, help="requests per step (default 64)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--slo", default=None, metavar="SLO",
                   help="what a step must meet to be recommended: KEY:MS pairs, e.g. ttft_ms:500,tpot_ms:20 (as "
                        "--goodput; a step meets it when 90%% of its requests are within every limit)")
    p.add_argument("--per-gpu", choices=("all", "decode"), default="all",
                   help="per GPU as srt-slurm (all GPUs, default) or InferenceX (decode GPUs)")
    p.add_argument("--job", default=None, help="run the search in this running Slurm job (left running); by default "
                                               "the search holds one allocation for all its layouts")
    p.add_argument("--fresh", action="store_true", help="start the search over (by default a search run again "
                                                        "skips the layouts it already did)")
    p.add_argument("--json", action="store_true")


def _fail(msg: str) -> int:
    print(f"atomdeck: error: {msg}", file=sys.stderr)
    return 2


def table(search) -> str:
    from ..measure.compare import rows, to_text

    out = [f"{'LAYOUT':14} {'STATUS':8} {'RUN':34} NOTE"]
    for e in search.entries:
        out.append(f"{e.layout:14} {e.status:8} {e.run[:34]:34} {e.reason[:100]}")
    reps = search.reports()
    if reps:
        out += ["", to_text(rows(reps, basis=search.spec.basis), search.spec.basis)]
    return "\n".join(out)


def bar(done: int, total: int, width: int = 30) -> str:
    n = int(width * done / total) if total else width
    return "[" + "#" * n + "." * (width - n) + f"] {done}/{total} steps"


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..config.errors import AtomdeckError
    from ..config.paths import find_recipe
    from ..config.recipe import load_recipe
    from ..measure.bench import default_workload
    from ..measure.layouts import Search, SearchSpec, parse_layouts
    from ..measure.stats import parse_slo
    from ..measure.workload import parse_concurrencies

    try:
        layouts = parse_layouts(args.layouts)
        slo = parse_slo(args.slo, "--slo") if args.slo else None
        conc = parse_concurrencies(args.concurrency) if args.concurrency else None
    except (MeasureInputError, ValueError) as e:
        return _fail(str(e))
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()]
    need = max(lay.prefill + lay.decode for lay in layouts)
    if len(nodes) < need:
        return _fail(f"--nodes: {len(nodes)} node(s) given, the biggest layout needs {need} (one node per worker); "
                     f"give {need} or drop the bigger layouts")
    try:
        recipe = load_recipe(find_recipe(args.recipe))
    except AtomdeckError as e:
        return _fail(str(e))
    w = default_workload(recipe, isl=args.isl, osl=args.osl, concurrencies=conc, num_prompts=args.num_prompts,
                         warmup=args.warmup)
    try:
        w.validate()
    except MeasureInputError as e:
        return _fail(str(e))
    spec = SearchSpec(recipe.name if args.recipe == recipe.name else args.recipe, design_cluster(args), nodes,
                      layouts, w, slo, args.job, args.per_gpu)
    try:
        search = Search.open(spec, fresh=args.fresh)
    except MeasureInputError as e:
        return _fail(str(e))
    t0 = time.time()
    print(f"sweep {search.id}: {len(layouts)} layouts ({', '.join(x.name for x in layouts)}) x "
          f"{','.join(map(str, w.concurrencies))} x {w.num_prompts} requests, {w.key}, on {', '.join(nodes)}"
          + (f"; resuming, done: {', '.join(search.resumed)}" if search.resumed else ""), file=sys.stderr, flush=True)
    said = [""]

    def progress(p) -> None:
        line = f"{bar(p.steps_done, p.steps_total)} {p.words}"
        if line != said[0]:
            said[0] = line
            print(f"[{time.time() - t0:6.1f}s] {line}", file=sys.stderr, flush=True)

    try:
        asyncio.run(search.run(progress))
    except KeyboardInterrupt:
        print(f"interrupted; run the same command again to go on ({search.dir / 'search.json'})", file=sys.stderr)
        return 130
    pick = search.recommendation()
    if args.json:
        print(json.dumps(search.to_json(), indent=2, default=str))
    else:
        print(table(search))
    words = (f"recommended: {pick.words(spec.basis)}" if pick else
             "no layout meets the SLO" if slo else "no layout gave a valid step")
    print(words + (f" (SLO {args.slo})" if slo else ""), file=sys.stderr)
    print(f"saved {search.dir / 'search.json'}", file=sys.stderr)
    failed = [e for e in search.entries if e.status != "done" or e.reason]
    return 1 if failed or pick is None else 0
