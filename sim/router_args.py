"""AToMesh's command line (``atomesh launch ...``), parsed the way the Rust binary does.

``--prefill URL [BOOTSTRAP_PORT|none]`` is not a clap argument: main() pulls it out of argv
first (a following number is the bootstrap port, ``none`` means no port, anything else is left
alone). The rest follows atom/mesh/src/cliargs.rs; clap rejects unknown flags with exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from . import atomlog

POLICIES = ["random", "round_robin", "cache_aware", "power_of_two", "prefix_hash"]


def split_prefill_args(argv: list[str]) -> tuple[list[tuple[str, int | None]], list[str]]:
    """Return (prefill entries, argv without them), as parse_prefill_args/filter_prefill_args do."""
    prefills: list[tuple[str, int | None]] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--prefill" and i + 1 < len(argv):
            url, port = argv[i + 1], None
            i += 2
            if i < len(argv) and not argv[i].startswith("--"):
                if argv[i].isdigit() and int(argv[i]) < 65536:
                    port = int(argv[i])
                    i += 1
                elif argv[i].lower() == "none":
                    i += 1
            prefills.append((url, port))
        else:
            rest.append(argv[i])
            i += 1
    return prefills, rest


class ClapParser(argparse.ArgumentParser):
    """argparse with clap's error text and exit code."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            first = message.split(": ", 1)[1].split()[0]
            text = f"error: unexpected argument '{first}' found"
        elif "invalid choice" in message:
            arg = message.split(":", 1)[0].replace("argument ", "")
            value = message.split("invalid choice: ", 1)[1].split(" (")[0].strip("'")
            choices = message.split("choose from ", 1)[1].rstrip(")").replace("'", "")
            text = f"error: invalid value '{value}' for '{arg}'\n  [possible values: {choices}]"
        else:
            text = f"error: {message}"
        atomlog.err(f"{text}\n\nUsage: atomesh launch [OPTIONS]\n\nFor more information, try '--help'.")
        sys.exit(2)


def build_parser() -> ClapParser:
    p = ClapParser(prog="atomesh launch", description="ATOM Mesh - High-performance inference gateway",
                   allow_abbrev=False, add_help=False)
    add = p.add_argument
    def flag(name: str) -> None:
        add(name, action="store_true")
    add("--host", default="0.0.0.0")
    add("--port", type=int, default=30000)
    add("--worker-urls", nargs="*", default=[])
    add("--policy", default="cache_aware", choices=POLICIES)
    add("--cache-threshold", type=float, default=0.3)
    add("--balance-abs-threshold", type=int, default=64)
    add("--balance-rel-threshold", type=float, default=1.5)
    add("--eviction-interval", type=int, default=120)
    add("--max-tree-size", type=int, default=67108864)
    add("--prefix-token-count", type=int, default=256)
    add("--prefix-hash-load-factor", type=float, default=1.25)
    flag("--dp-aware")
    flag("--pd-disaggregation")
    add("--decode", action="append", default=[])
    add("--prefill-policy", choices=POLICIES, default=None)
    add("--decode-policy", choices=POLICIES, default=None)
    add("--worker-startup-timeout-secs", type=int, default=1800)
    add("--worker-startup-check-interval", type=int, default=30)
    add("--log-dir", default=None)
    add("--log-level", default="info", choices=["debug", "info", "warn", "error"])
    flag("--json-log")
    add("--prometheus-port", type=int, default=29000)
    add("--prometheus-host", default="0.0.0.0")
    add("--prometheus-duration-buckets", nargs="*", type=float, default=[])
    add("--request-id-headers", nargs="*", default=[])
    add("--request-timeout-secs", type=int, default=1800)
    add("--shutdown-grace-period-secs", type=int, default=180)
    add("--max-payload-size", type=int, default=536870912)
    add("--max-concurrent-requests", type=int, default=-1)
    add("--queue-size", type=int, default=100)
    add("--queue-timeout-secs", type=int, default=60)
    add("--rate-limit-tokens-per-second", type=int, default=None)
    add("--retry-max-retries", type=int, default=5)
    add("--retry-initial-backoff-ms", type=int, default=50)
    add("--retry-max-backoff-ms", type=int, default=30000)
    add("--retry-backoff-multiplier", type=float, default=1.5)
    add("--retry-jitter-factor", type=float, default=0.2)
    flag("--disable-retries")
    add("--cb-failure-threshold", type=int, default=10)
    add("--cb-success-threshold", type=int, default=3)
    add("--cb-timeout-duration-secs", type=int, default=60)
    add("--cb-window-duration-secs", type=int, default=120)
    flag("--disable-circuit-breaker")
    add("--health-failure-threshold", type=int, default=3)
    add("--health-success-threshold", type=int, default=2)
    add("--health-check-timeout-secs", type=int, default=5)
    add("--health-check-interval-secs", type=int, default=60)
    add("--health-check-endpoint", default="/health")
    flag("--disable-health-check")
    add("--model-path", default=None)
    add("--tokenizer-path", default=None)
    add("--chat-template", default=None)
    flag("--tokenizer-cache-enable-l0")
    add("--tokenizer-cache-l0-max-entries", type=int, default=10000)
    flag("--tokenizer-cache-enable-l1")
    add("--tokenizer-cache-l1-max-memory", type=int, default=52428800)
    add("--reasoning-parser", default=None)
    add("--tool-call-parser", default=None)
    add("--backend", "--runtime", dest="backend", default="sglang", choices=["sglang", "vllm", "atom"])
    add("--api-key", default=None)
    return p


def _value_name(action: argparse.Action) -> str:
    return action.dest.upper()


def clap_help(parser: argparse.ArgumentParser | None = None) -> str:
    """``atomesh launch --help`` in clap's long-help layout, from the flags this parser enforces."""
    parser = parser or build_parser()
    lines = [parser.description or "", "", f"Usage: {parser.prog} [OPTIONS]", "", "Options:"]

    def entry(names: str, details: list[str]) -> None:
        lines.append(f"      {names}")
        lines.extend(f"          {d}" for d in details)
        lines.append("")

    entry("--prefill <URL> [<BOOTSTRAP_PORT>]",
          ["Prefill server URL, optionally followed by its bootstrap port or 'none' (repeatable)"])
    for action in parser._actions:
        flags = ", ".join(action.option_strings)
        if action.nargs == 0:
            names = flags
        elif action.nargs == "*":
            names = f"{flags} [<{_value_name(action)}>...]"
        else:
            names = f"{flags} <{_value_name(action)}>"
        details = []
        if action.choices:
            details.append(f"[possible values: {', '.join(map(str, action.choices))}]")
        default = action.default
        if action.nargs != 0 and default not in (None, [], ""):
            details.append(f"[default: {default}]")
        entry(names, details)
    lines.append("  -h, --help")
    lines.append("          Print help (see a summary with '-h')")
    lines.append("")
    lines.append("  -V, --version")
    lines.append("          Print version")
    return "\n".join(lines)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[tuple[str, int | None]]]:
    """Parse ``atomesh [launch|start] ...`` (no subcommand works too, as in clap)."""
    prefills, rest = split_prefill_args(argv)
    if rest and rest[0] in ("launch", "start"):
        rest = rest[1:]
    args = build_parser().parse_args(rest)
    return args, prefills
