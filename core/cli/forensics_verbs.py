"""`atomdeck snapshot RUN [PROCESS ...]`: where every rank of every process is (issue 39): Python stacks (py-spy),
kernel state, TCP connections, queues and last lines, ranks with the same stack grouped and the odd ones first;
`--twice S` compares two snapshots S seconds apart; the bundle is a tar.gz in the run directory."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from .output import fail

if TYPE_CHECKING:  # (main.build_parser imports this module for every verb, the console too: nothing heavy here)
    from ..run.snapshot import Snapshot


def add_parser(sub) -> None:
    p = sub.add_parser("snapshot", help="where every rank of every process is: stacks, kernel state, connections",
                       description="Collect, for every process of a run and every rank of it on every node: Python "
                                   "stacks (py-spy), kernel state, TCP connections, queues and last log lines. Ranks "
                                   "with the same stack are grouped, the odd ones first.")
    p.add_argument("run", help="run id")
    p.add_argument("process", nargs="*", help="only these processes (default: every one)")
    p.add_argument("--twice", type=float, default=None, metavar="S",
                   help="take a second snapshot S seconds later: a rank whose stack did not change is stuck")
    p.add_argument("--install-py-spy", action="store_true",
                   help="copy atomdeck's py-spy to the nodes that lack it first (remote_dir/bin/py-spy)")
    p.add_argument("--no-bundle", action="store_true", help="do not write the tar.gz bundle")
    p.add_argument("--json", action="store_true", help="one JSON object")


def cmd_snapshot(args: argparse.Namespace) -> int:
    from ..config.errors import AtomdeckError
    from ..run.forensics import bundle, install_pyspy, take
    from ..run.run import Run
    from ..run.snapshot import compare

    run = Run.open(args.run)
    if args.twice is not None and args.twice <= 0:
        return fail(args.json, 2, "usage", "--twice takes a number of seconds greater than 0, e.g. --twice 5")

    async def go() -> tuple[Snapshot, Snapshot | None, list[str]]:
        try:
            said = await install_pyspy(run, args.process) if args.install_py_spy else []
            first = await take(run, args.process)
            second = None
            if args.twice:
                print(f"snapshot taken; the second in {args.twice:g} s ...", file=sys.stderr)
                await asyncio.sleep(args.twice)
                second = await take(run, args.process)
            return first, second, said
        finally:
            await run.close()

    try:
        first, second, said = asyncio.run(go())
    except AtomdeckError as e:
        return fail(args.json, 2, "input", str(e))
    shown = second or first
    if not args.no_bundle:
        bundle(shown, run.rd.path)
    moved = compare(first, second) if second else None
    if args.json:
        out = shown.to_json()
        out["compare"] = moved
        out["installed"] = said
        print(json.dumps(out, default=str))
    else:
        for line in said:
            print(line)
        print(snapshot_text(shown, moved, args.twice))
    return 1 if any(v != "ok" for v in shown.nodes.values()) else 0


def snapshot_text(s: Snapshot, moved: dict[str, list[str]] | None = None, twice: float | None = None) -> str:
    from ..run.snapshot import fold, fold_keys

    ranks = sum(len(p.stacked()) for p in s.procs)
    lines = [f"snapshot of run {s.run}: {len(s.procs)} processes, {ranks} python processes and ranks, "
             f"{len(s.nodes)} node(s), {s.took_s:.2f} s"]
    for node, word in sorted(s.nodes.items()):
        if word != "ok":
            lines.append(f"  {node}: {word}")
    for node, word in sorted(s.pyspy.items()):
        if "/" not in word or word.startswith(("missing", "ptrace")):
            lines.append(f"  py-spy on {node}: {word}")
    odd = [g for g in s.groups if g.odd]
    if odd:
        lines.append("odd ones out:")
        lines += [f"  {g.process} {fold(g.members)}: in {g.where}" for g in odd]
    for p in s.procs:
        head = f"{p.name} on {p.node}"
        extra = []
        q = p.queues
        if "requests_running" in q:
            extra.append(f"{q['requests_running']:.0f} running, {q.get('requests_waiting', 0):.0f} waiting")
        elif p.queues.get("error"):
            extra.append(p.queues["error"])
        if p.router_in_flight is not None:
            extra.append(f"router: {p.router_in_flight:.0f} in flight to it")
        lines.append(head + (f" ({'; '.join(extra)})" if extra else "") + (f": {p.error}" if p.error else ""))
        for g in (g for g in s.groups if g.process == p.name):
            lines.append(f"  {fold(g.members)}: in {g.where}" + ("   <- odd one out" if g.odd else ""))
        for r in p.ranks:
            if r.state in ("D", "T", "t", "Z"):
                lines.append(f"  {r.label}: state {r.state}")
            for c in r.connections:
                if c.peer_name:
                    state = {"ESTAB": "established"}.get(c.state, c.state.lower())
                    lines.append(f"  {r.label}: {state} connection to {c.peer_name}")
        if p.last_lines:
            lines.append(f"  last: {p.last_lines[-1][:150]}")
    if moved is not None:
        lines.append(f"compared with a snapshot {twice:g} s earlier:")
        lines.append(f"  stuck (same stack, work in flight): {fold_keys(moved['stuck']) or 'none'}")
        lines.append(f"  moved: {fold_keys(moved['moved']) or 'none'}")
        lines.append(f"  idle (same stack, nothing in flight): {fold_keys(moved['idle']) or 'none'}")
        if moved["gone"]:
            lines.append(f"  gone since: {fold_keys(moved['gone'])}")
    if s.bundle:
        lines.append(f"bundle: {s.bundle}")
    return "\n".join(lines)
