"""The headless CLI: plan, lint, nodes, up, status, watch, logs, down, runs, context, bench, compare, sweep,
import/export; `--json`; `--context`/`--cluster` on every verb (contexts.py).

`atomdeck` with no arguments opens the console on the demo cluster.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from ..config.errors import AtomdeckError, ConfigError
from .contexts import add_args as add_context_args
from .contexts import resolve as resolve_context
from .output import fail as _fail

# Shown by `atomdeck --help` and copied in README.md ("Exit codes"): one table for every verb.
EXIT_CODES = """\
exit codes (every verb):
  0  ok
  1  the thing asked for failed: lint errors, a run that failed or timed out, an unclean teardown
  2  bad input or configuration: unknown recipe/cluster/run, invalid YAML or keys, wrong arguments

--json (every verb): one JSON object on stdout and nothing else (`logs --json`: one object per
line); errors too, as {"error": {"kind", "message", "findings"}} with the same exit code."""

DEMO_CLUSTER = "local"
DEMO_RECIPE = "demo-1p1d"


def _csv(text: str | None) -> list[str] | None:
    return [n for n in text.split(",") if n.strip()] if text else None


class UsageError(AtomdeckError):
    """A command line argparse refused (exit 2), raised instead of printing so --json can answer in JSON."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        self.parser = parser
        super().__init__(message)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def _add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="recipe name (from recipes/) or path to a .yaml file")
    add_context_args(p, "design")
    p.add_argument("--nodes", "-w", default=None, help="comma-separated nodes in rank order (prefill first)")
    p.add_argument("--override", default=None, metavar="NODES",
                   help="allow these unhealthy/excluded nodes anyway (comma-separated); stays a warning")
    p.add_argument("--offline", action="store_true", help="do not ask Slurm for node states")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="atomdeck", description=__doc__.splitlines()[0], epilog=EXIT_CODES,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")

    p = sub.add_parser("plan", help="show the plan and every command that would run")
    _add_plan_args(p)
    p = sub.add_parser("lint", help="check a recipe on a cluster; exit 1 on errors")
    _add_plan_args(p)

    p = sub.add_parser("nodes", help="list the cluster's nodes with state, GPUs, partition and reason")
    add_context_args(p, "design")
    p.add_argument("--offline", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--gpus", action="store_true",
                   help="also read each node's GPUs (amd-smi): free VRAM, and memory held by another job or an orphan")

    p = sub.add_parser("up", help="launch a recipe; prints the run id")
    _add_plan_args(p)
    p.add_argument("--wait", action="store_true", help="wait until serving (exit 0) or failed (exit 1)")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait with --wait")
    p.add_argument("--job", default=None, help="use this existing Slurm job id instead of submitting one")

    p = sub.add_parser("status", help="stages, barrier, handshake and router of a run")
    p.add_argument("run", nargs="?", default=None, help="run id (default: the newest)")
    add_context_args(p, "run")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("watch", help="follow a run's events (health, metrics, checks) until Ctrl-C")
    p.add_argument("run", nargs="?", default=None, help="run id (default: the newest)")
    add_context_args(p, "run")
    p.add_argument("--json", action="store_true", help="one JSON event per line")

    p = sub.add_parser("logs", help="print a run's logs")
    p.add_argument("run")
    p.add_argument("--process", "-p", default=None, help="one process, e.g. prefill-0 or router")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--lines", "-n", type=int, default=None, help="only the last N lines")
    p.add_argument("--json", action="store_true", help="JSON lines: {process, node, text, offset} per log line")
    add_context_args(p, "run")

    p = sub.add_parser("down", help="stop every process of a run and verify; exit 0 only when clean")
    p.add_argument("run")
    p.add_argument("--grace", type=float, default=None, help="seconds between SIGTERM and SIGKILL")
    add_context_args(p, "run")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("runs", help="list the runs of every cluster, and mark a cluster that does not answer")
    add_context_args(p, "runs")
    p.add_argument("--offline", action="store_true", help="do not ask the clusters of live runs whether they answer")
    p.add_argument("--json", action="store_true")

    from .contexts import add_parser as add_context

    add_context(sub)

    from .drill_verbs import add_parser as add_drill

    add_drill(sub)
    from .forensics_verbs import add_parser as add_snapshot

    add_snapshot(sub)
    from .action_verbs import add_parsers as add_actions

    add_actions(sub)

    from .interop_verbs import add_parser as add_interop

    add_interop(sub)

    p = sub.add_parser("tui", help="open the console")
    add_context_args(p, "design")
    p.add_argument("--recipe", "-r", default=None)
    p.add_argument("--readonly", action="store_true", help="hide launch and teardown")
    p.add_argument("--offline", action="store_true", help="do not ask Slurm for node states")
    p.add_argument("--nodes", "-w", default=None, help="comma-separated nodes in rank order (prefill first)")
    p.add_argument("--override", default=None, metavar="NODES", help="allow these unhealthy/excluded nodes anyway")
    p.add_argument("--run", default=None, help="open on this run (reattach) instead of designing a new one")

    from .measure_verbs import add_parsers

    add_parsers(sub)
    from .search_verbs import add_parser as add_search

    add_search(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = "--json" in argv
    try:
        ap = build_parser()
        args, extra = ap.parse_known_args(argv)
        if extra:  # `snapshot RUN --json decode-0`: a verb's trailing list may follow its options, as an operator types
            if isinstance(getattr(args, "process", None), list) and not any(x.startswith("-") for x in extra):
                args.process += extra
            else:
                ap.error(f"unrecognized arguments: {' '.join(extra)}")
    except UsageError as e:
        if not as_json:
            e.parser.print_usage(sys.stderr)
        return _fail(as_json, 2, "usage", str(e), text=[f"{e.parser.prog}: error: {e}"])
    try:
        resolve_context(args)  # --context folded into --cluster: one name, checked once (contexts.py)
        if args.cmd is None or args.cmd == "tui":
            return _tui(args)
        if args.cmd in ("plan", "lint", "nodes"):
            from . import design_verbs as verbs
        elif args.cmd in ("bench", "compare"):
            from . import measure_verbs as verbs  # type: ignore[no-redef]
        elif args.cmd == "sweep":
            from . import search_verbs as verbs  # type: ignore[no-redef]
        elif args.cmd == "drill":
            from . import drill_verbs as verbs  # type: ignore[no-redef]
        elif args.cmd == "snapshot":
            from . import forensics_verbs as verbs  # type: ignore[no-redef]
        elif args.cmd in ("restart", "remove", "add"):
            from . import action_verbs as verbs  # type: ignore[no-redef]
        elif args.cmd in ("import", "export"):
            from . import interop_verbs as verbs  # type: ignore[no-redef]
        elif args.cmd in ("context", "ctx"):
            from . import contexts as verbs  # type: ignore[no-redef]

            args.cmd = "context"
        else:
            from . import run_verbs as verbs  # type: ignore[no-redef]
        return getattr(verbs, f"cmd_{args.cmd}")(args)
    except ConfigError as e:
        findings = [{"source": i.source, "key": i.path, "line": i.line, "message": i.message} for i in e.issues]
        return _fail(as_json, 2, "config", f"the configuration has {len(e.issues)} problem(s)", findings,
                     ["atomdeck: the configuration has problems:", *(f"  {i}" for i in e.issues)])
    except AtomdeckError as e:
        findings = getattr(e, "findings", None) or []
        found = [f.to_json() if hasattr(f, "to_json") else str(f) for f in findings]
        kind = "preflight" if found else "input"
        text = ["atomdeck: pre-flight failed, nothing was launched:", *(f"  {f}" for f in findings)] if found else None
        return _fail(as_json, 2, kind, str(e), found, text)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def _tui(args: argparse.Namespace) -> int:
    # The one place core loads the console. A broken console import must fail loudly, not fall back.
    from ...tui.app import run_console  # type: ignore[import-not-found]  # atomdeck.tui: mypy checks core/ alone

    kw: dict[str, Any] = {}
    nodes = [n.strip() for n in (getattr(args, "nodes", None) or "").split(",") if n.strip()]
    if nodes:
        kw["nodes"] = kw["named_nodes"] = nodes
    overrides = [n.strip() for n in (getattr(args, "override", None) or "").split(",") if n.strip()]
    if overrides:
        kw["overrides"] = overrides
    if getattr(args, "offline", False):
        kw["offline"] = True
    if getattr(args, "run", None):
        kw["run_id"] = args.run  # --run wins over --cluster: the console opens on that run
    return run_console(cluster=getattr(args, "cluster", None), recipe=getattr(args, "recipe", None),
                       readonly=getattr(args, "readonly", False), **kw)


if __name__ == "__main__":
    sys.exit(main())
