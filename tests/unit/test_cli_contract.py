"""One CLI contract (issue 16): --json is one JSON object on stdout on every verb, errors included,
with the documented exit codes; `tui --run` always opens that run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .test_cli import atomdeck

ROOT = Path(__file__).resolve().parents[2]


def one_object(stdout: str) -> dict:
    """stdout must be exactly one JSON document, and an object."""
    data = json.loads(stdout)  # raises on anything around the document
    assert isinstance(data, dict), data
    return data


@pytest.mark.parametrize("args", [
    ["plan", "demo-1p1d"], ["lint", "demo-1p1d"], ["nodes"], ["runs"],
])
def test_every_verb_answers_one_json_object(args):
    p = atomdeck(*args, "--json")
    assert p.returncode == 0, p.stderr
    one_object(p.stdout)


def test_runs_json_is_an_object_holding_a_list():
    assert one_object(atomdeck("runs", "--json", check=True).stdout) == {"runs": []}


@pytest.mark.parametrize("args,kind,code", [
    (["plan", "no-such-recipe"], "input", 2),
    (["lint", "demo-1p1d", "--cluster", "nowhere"], "input", 2),
    (["status", "no-such-run"], "input", 2),
    (["down", "no-such-run"], "input", 2),
    (["logs", "no-such-run"], "input", 2),
    (["nodes", "--no-such-flag"], "usage", 2),
    (["logs"], "usage", 2),
    (["runs", "stray"], "usage", 2),
    (["snapshot", "no-such-run", "--no-bundle", "decode-0"], "input", 2),  # processes may follow the options
    (["up", "demo-1p1d", "--nodes", "demo-n06,demo-n01"], "lint", 1),
])
def test_errors_under_json_are_json_on_stdout_with_the_same_exit_code(args, kind, code):
    p = atomdeck(*args, "--json")
    assert p.returncode == code, p.stdout + p.stderr
    err = one_object(p.stdout)["error"]
    assert err["kind"] == kind and err["message"]
    assert isinstance(err["findings"], list)
    assert "Traceback" not in p.stderr
    # the same mistake without --json is text on stderr, nothing on stdout, same exit code
    plain = atomdeck(*args)
    assert plain.returncode == code and plain.stdout.strip() == ""
    assert plain.stderr.strip()


def test_up_refused_by_lint_lists_the_findings_in_json():
    p = atomdeck("up", "demo-1p1d", "--nodes", "demo-n06,demo-n01", "--json")
    err = one_object(p.stdout)["error"]
    assert p.returncode == 1
    assert any(f["rule"] == "node-excluded" and f["node"] == "demo-n06" for f in err["findings"])


def test_config_errors_under_json_carry_every_issue(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: x\nmodel: {path: m}\nprefill: {tp: eight}\nrouter: {policy: x}\n")
    p = atomdeck("plan", str(f), "--json")
    assert p.returncode == 2
    err = one_object(p.stdout)["error"]
    assert err["kind"] == "config"
    assert {(i["key"], i["line"]) for i in err["findings"]} >= {("prefill.tp", 3), ("router.policy", 4)}


EXIT_TABLE = [("0", "ok"), ("1", "the thing asked for failed"), ("2", "bad input or configuration")]


def test_exit_codes_are_one_table_in_help_and_readme():
    helptext = atomdeck("--help", check=True).stdout
    readme = (ROOT / "README.md").read_text()
    for code, words in EXIT_TABLE:
        assert re.search(rf"^\s*{code}\s+{words}", helptext, re.M), helptext
        assert re.search(rf"^\|\s*{code}\s*\|\s*{words}", readme, re.M), f"README lacks exit code {code}"


def test_tui_run_wins_over_cluster(tmp_path):
    from atomdeck.tui.app import console_options

    from tests.tui.fakerun import fake_run

    run = fake_run("serving")
    recipe, cluster, ask = console_options("local", None, run.id)
    assert ask is False and (recipe, cluster) == ("demo-1p1d", "local")
    # a cluster other than the run's: still no Open screen (the run is shown)
    assert console_options("lab", None, run.id)[2] is False
    # without --run, a cluster alone still asks which recipe
    assert console_options("lab", None, None) == ("demo-1p1d", "lab", True)


def test_runs_columns_line_up_for_long_run_ids():
    from tests.tui.fakerun import fake_run

    fake_run("serving", run_id="20250101-115845-demo-1p1d-with-a-rather-long-name-x1")
    fake_run("hung", run_id="20250101-115846-short")
    lines = atomdeck("runs", check=True).stdout.splitlines()
    col = lines[0].index("STATUS")
    assert len(lines) == 3
    for line in lines[1:]:
        assert line[col - 1] == " " and line[col:].split()[0] in ("serving", "failed", "starting", "stopped")
    assert lines[0].index("CLUSTER") == lines[1].index("local") == lines[2].index("local")
