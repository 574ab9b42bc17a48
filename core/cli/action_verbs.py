"""`atomdeck restart|remove|add`: act on one endpoint of a live run without tearing the rest down (issue 38). The
verb watches the run while it acts (as `up --wait` does), prints each step on stderr, and says how it ended."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from ..config.errors import AtomdeckError
from .contexts import add_args
from .output import fail

if TYPE_CHECKING:
    from ..run.actions import ActionResult
    from ..run.events import Event


def add_parsers(sub) -> None:
    p = sub.add_parser("restart", help="restart one process of a live run in place: drain, stop, start, ready, "
                                       "re-register",
                       description="Drain the worker through the router (its in-flight requests finish), stop it "
                                   "verified, start it again with the same command (on Slurm a new step of the run's "
                                   "allocation), wait until it is up and its KV pairs are reachable, register it with "
                                   "the router again and check a request reaches it. The router itself restarts "
                                   "without a drain: clients see the gap.")
    p.add_argument("run", help="run id")
    p.add_argument("process", help="e.g. decode-0, prefill-1, router")
    p.add_argument("--no-drain", action="store_true", help="stop at once: requests in flight to it fail")
    p.add_argument("--drain-timeout", type=float, default=None, metavar="S",
                   help="seconds to wait for its in-flight requests (default 60); then they are ended with it")
    _finish_flags(p, "restart")
    p.add_argument("--json", action="store_true", help="one JSON object")
    add_args(p, "run")

    p = sub.add_parser("remove", help="drain a worker, stop it and take it out of the run")
    p.add_argument("run")
    p.add_argument("process", help="a worker, e.g. decode-1")
    p.add_argument("--no-drain", action="store_true", help="stop at once: requests in flight to it fail")
    p.add_argument("--drain-timeout", type=float, default=None, metavar="S")
    _finish_flags(p, "removal")
    p.add_argument("--json", action="store_true")
    add_args(p, "run")

    p = sub.add_parser("add", help="add a worker to a live run: on a free node, or a free per_node slot",
                       description="Plan one more worker of the role (linted as for a launch), check its node "
                                   "(healthy, no other run on it, its ports free), start it, wait until it is up and "
                                   "its KV pairs are reachable, register it with the router. A prefill needs the "
                                   "router restarted (AToMesh learns a prefill's tp_size only when it starts).")
    p.add_argument("run")
    p.add_argument("--role", required=True, choices=["prefill", "decode"])
    p.add_argument("--node", default=None, help="the node (default: a free per_node slot, else a free healthy node)")
    p.add_argument("--restart-router", action="store_true",
                   help="(a prefill) restart the router with it on its command line: clients see a gap")
    p.add_argument("--json", action="store_true")
    add_args(p, "run")


def _finish_flags(p, what: str) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help=f"finish a {what} that was cut short (or failed)")
    g.add_argument("--rollback", action="store_true",
                   help="undo an action on it that was cut short: a worker only taken out of the router is "
                        "registered again; an added worker is stopped and removed")


def cmd_restart(args: argparse.Namespace) -> int:
    from ..run.actions import restart

    return _drained(args, restart)


def cmd_remove(args: argparse.Namespace) -> int:
    from ..run.actions import remove

    return _drained(args, remove)


def _drained(args: argparse.Namespace, action) -> int:
    """restart and remove: a drain with its timeout, or --resume, or --rollback."""
    from ..run.actions import DRAIN_TIMEOUT_S, rollback

    if args.drain_timeout is not None and args.drain_timeout < 0:
        return fail(args.json, 2, "usage", "--drain-timeout takes seconds >= 0, e.g. --drain-timeout 30")
    if args.rollback:
        return _act(args, lambda run: rollback(run, args.process))
    timeout = DRAIN_TIMEOUT_S if args.drain_timeout is None else args.drain_timeout
    return _act(args, lambda run: action(run, args.process, drain=not args.no_drain, drain_timeout=timeout,
                                         resume=args.resume))


def cmd_add(args: argparse.Namespace) -> int:
    from ..run.adding import add

    args.process = f"a new {args.role}"
    return _act(args, lambda run: add(run, args.role, args.node, restart_router=args.restart_router))


def _act(args: argparse.Namespace, action) -> int:
    from ..run.run import Run
    from .contexts import pick_run

    try:
        run = Run.open(pick_run(args, args.run))
    except AtomdeckError as e:
        return fail(args.json, 2, "input", str(e))
    t0 = time.monotonic()

    def show(e: Event) -> None:
        if e.kind == "action":
            print(f"[{time.monotonic() - t0:6.1f}s] {e.name:12} {e.value:12} {e.detail}", file=sys.stderr)

    run.listeners.append(show)

    async def go() -> ActionResult:
        watch = asyncio.create_task(run.watch())  # the process the action starts is followed by this watch
        try:
            return await action(run)
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            await run.close()

    try:
        result = asyncio.run(go())
    except AtomdeckError as e:
        return fail(args.json, 2, "input", str(e))
    except KeyboardInterrupt:
        from ..run.intents import how_to_finish, read_all

        cut = [it for it in read_all(run.rd.path).values() if it.cut_short and it.pid == os.getpid()]
        how = "; ".join(f"{it.kind} of {it.target}: {how_to_finish(run.id, it)}" for it in cut) or \
            "nothing of it was recorded yet"
        print(f"interrupted: the action was cut short: {how} (see `atomdeck status {run.id}`)", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({"run": run.id, "action": result.to_json(), "status": run.state.status,
                          "diagnosis": run.state.diagnosis}, default=str))
    else:
        print(f"{result.kind} of {result.target}: {result.outcome}: {result.detail}")
    return 0 if result.outcome in ("done", "rolled back") else 1
