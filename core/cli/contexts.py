"""--cluster / --context on every verb, and `atomdeck context` (list the clusters, set the current one).

One rule, three kinds of verb (README.md "Several clusters" says the same):
  - verbs that plan or launch (plan, lint, nodes, up, sweep, drill, tui): the cluster they work on. Named with
    --cluster NAME|FILE or --context NAME, else the clusters file's `current:`, else the demo (local).
  - verbs on runs (status, watch, logs, down, snapshot, restart, remove, add, bench, compare): a run carries its
    own cluster (its directory keeps the cluster file it was launched with), so without a flag any run is taken.
    With one, a RUN named must be on that cluster (else exit 2, naming the run's cluster), and a RUN left out (status,
    watch) is the newest run on it. The current context never narrows them.
  - runs: every cluster's runs, each with its cluster; with a flag, only that cluster's.
  - import/export convert files: --context names the cluster whose gpus_per_node an export splits workers by
    (instead of --gpus-per-node), and an import lints the recipe it wrote on that cluster (offline).
--context takes a name only (as kubectl's); --cluster also takes the path of a cluster file. Both at once
must name the same cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ..config import clusters
from ..config.errors import AtomdeckError

HELP = {
    "design": "the cluster to work on: a name (clusters file, then cluster files) or a cluster file; "
              "default: the current context",
    "run": "only runs on this cluster (a RUN given must be on it; without RUN: the newest on it)",
    "runs": "only this cluster's runs (default: every cluster's)",
    "convert": "take GPUs per node from this cluster (export) / lint the result on it (import)",
}


def add_args(p: argparse.ArgumentParser, kind: str) -> None:
    p.add_argument("--cluster", "-c", default=None, metavar="NAME|FILE", help=HELP[kind])
    p.add_argument("--context", default=None, metavar="NAME",
                   help="a cluster by name, as kubectl's --context (same as --cluster NAME)")


def resolve(args: argparse.Namespace) -> None:
    """Fold --context into args.cluster (the cluster named on the command line, or None), and check it names a
    cluster, on every verb before it does anything (a name runs were launched on counts: it filters them)."""
    if not (hasattr(args, "context") or hasattr(args, "cluster")):
        return
    args.cluster = spec = clusters.choose(getattr(args, "cluster", None), getattr(args, "context", None))
    if spec is None:
        return
    try:
        clusters.find(spec)
    except AtomdeckError:
        if not _runs_on(spec):
            raise


def _runs_on(name: str) -> bool:
    from ..run.run import Run

    return any(m.get("cluster") == name for m in Run.list())


def design_cluster(args: argparse.Namespace) -> str:
    """The cluster a planning verb works on: the one named, else the current context."""
    return getattr(args, "cluster", None) or clusters.current_context()


def run_filter(args: argparse.Namespace) -> str | None:
    """The cluster name runs must be on (None: any). A name no longer defined is still a filter when runs
    were launched on it."""
    spec = getattr(args, "cluster", None)
    if spec is None:
        return None
    try:
        return clusters.load(spec)[0].name
    except AtomdeckError:
        if _runs_on(spec):
            return spec
        raise


def pick_run(args: argparse.Namespace, run_id: str | None) -> str | None:
    """The run a verb on runs acts on, under the rule above (None: the newest of all, as before)."""
    from ..run.run import Run
    from ..run.rundir import RunDir

    name = run_filter(args)
    if name is None:
        return run_id
    if run_id is None:
        on = [m for m in Run.list() if m.get("cluster") == name]
        if not on:
            raise AtomdeckError(f"no runs on cluster {name}; `atomdeck runs` lists every cluster's")
        return str(on[-1]["id"])
    rd = RunDir.find(run_id)
    there = rd.meta().get("cluster")
    if there != name:
        raise AtomdeckError(f"run {rd.id} is on cluster {there}, not {name}; drop --context/--cluster or name "
                            f"a run on {name} (`atomdeck runs --context {name}`)")
    return rd.id


# ------------------------------------------------------------------------------------------- the verb
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("context", aliases=["ctx"],
                       help="list the clusters (contexts), or make one current: `atomdeck context NAME`")
    p.add_argument("name", nargs="?", default=None, help="make this cluster the current context")
    p.add_argument("--check", action="store_true", help="ask each listed cluster whether it answers (all at once)")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds per cluster with --check")
    p.add_argument("--json", action="store_true")


def cmd_context(args: argparse.Namespace) -> int:
    if args.name is not None:
        path = clusters.set_current(args.name)
        if args.json:
            print(json.dumps({"current": args.name, "file": str(path)}, indent=2))
        else:
            print(f"current context: {args.name} (written to {path})")
        return 0
    refs = clusters.contexts()
    current = clusters.current_context()
    rows: list[dict] = []
    loaded = {}
    for r in refs:
        try:
            loaded[r.name] = clusters.load(str(r.path) if not r.in_clusters_file else r.name)[0]
            problem = ""
        except AtomdeckError as e:
            problem = str(e).splitlines()[0]
        c = loaded.get(r.name)
        rows.append({"name": r.name, "current": r.name == current, "launcher": c.launcher if c else "?",
                     "source": r.source, "description": c.description if c else "", "problem": problem})
    if args.check:  # the shipped examples (other than the demo) are not asked: they are nobody's cluster
        from ..run.reach import TIMEOUT_S, check_all

        timeout = args.timeout if args.timeout and args.timeout > 0 else TIMEOUT_S
        asked = [c for name, c in loaded.items() if name == clusters.DEFAULT_CONTEXT or not _shipped(refs, name)]
        found = asyncio.run(check_all(asked, timeout))
        for row in rows:
            rr = found.get(str(row["name"]))
            row["answers"] = rr.answers if rr else None
            row["reach"] = rr.detail if rr else row["problem"] or "a shipped example: not asked"
    if args.json:
        print(json.dumps({"current": current, "file": str(clusters.clusters_file()), "contexts": rows}, indent=2))
        return 0
    w = max([7, *(len(r["name"]) for r in rows)])
    head = f"   {'CONTEXT':{w}} {'LAUNCHER':8} " + ("ANSWERS  " if args.check else "") + "SOURCE"
    print(head)
    for row in rows:
        mark = " * " if row["current"] else "   "
        ans = ""
        if args.check:
            ans = f"{ {True: 'yes', False: 'NO', None: '-'}[row['answers']]:8} "
        print(f"{mark}{row['name']:{w}} {row['launcher']:8} {ans}{row['source']}")
        if row["problem"]:
            print(f"   {'':{w}} problem: {row['problem']}")
        elif args.check and row["answers"] is False:
            print(f"   {'':{w}} {row['reach']}")
    print(f"(* the current context; `atomdeck context NAME` changes it in {clusters.clusters_file()})",
          file=sys.stderr)
    return 0


def _shipped(refs: list[clusters.ClusterRef], name: str) -> bool:
    from ..config.paths import recipes_dir

    ref = next(r for r in refs if r.name == name)
    return not ref.in_clusters_file and ref.path.resolve().is_relative_to(recipes_dir().resolve())
