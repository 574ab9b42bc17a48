"""The shims answer --help like the real programs: argparse help for ATOM, clap-style help for AToMesh."""

from __future__ import annotations

import re
import subprocess

from atomdeck.sim.router_args import build_parser as router_parser
from atomdeck.sim.worker_args import build_parser as worker_parser

from .simhelpers import Spawner


def run(tmp_path, argv: list[str]) -> subprocess.CompletedProcess:
    env = Spawner(tmp_path).env()
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def flags_in(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", text))


def enforced(parser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def test_worker_help_lists_exactly_the_flags_its_parser_enforces(tmp_path):
    done = run(tmp_path, ["python3", "-m", "atom.entrypoints.openai_server", "--help"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: openai_server.py [-h] --model MODEL") or done.stdout.startswith(
        "usage: openai_server.py [-h] [--model MODEL]")
    assert "ATOM OpenAI API Server" in done.stdout
    # the option column of argparse's help: "  -tp TENSOR_PARALLEL_SIZE, --tensor-parallel-size ..."
    shown = set()
    for line in done.stdout.splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line)
        if m:
            shown |= {part.split()[0] for part in m.group(1).split(", ")}
    want = enforced(worker_parser())
    assert shown == want, shown ^ want
    assert "--kv_cache_dtype" in shown and "--kv-cache-dtype" not in shown, "the spelling ATOM accepts"
    assert done.stderr == "" and "Loading tokenizer" not in done.stdout, "help starts nothing"


def test_router_help_is_clap_style_and_lists_its_flags(tmp_path):
    for argv in (["atomesh", "launch", "--help"], ["atomesh", "launch", "-h"], ["atomesh", "--help"]):
        done = run(tmp_path, argv)
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert out.startswith("ATOM Mesh - High-performance inference gateway\n\nUsage: atomesh launch [OPTIONS]\n")
        assert "\nOptions:\n" in out and "  -h, --help\n" in out and "Atomesh starting" not in out
        shown = flags_in(out)
        assert shown == enforced(router_parser()) | {"--prefill", "-h", "--help", "-V", "--version"}, \
            shown ^ (enforced(router_parser()) | {"--prefill", "-h", "--help", "-V", "--version"})
        assert "      --prometheus-port <PROMETHEUS_PORT>\n          [default: 29000]\n" in out
        assert "[possible values: sglang, vllm, atom]" in out
        assert "      --pd-disaggregation\n" in out, "a switch takes no value"
    bad = run(tmp_path, ["atomesh", "launch", "--no-such-flag"])
    assert bad.returncode == 2 and "error: unexpected argument '--no-such-flag' found" in bad.stderr
