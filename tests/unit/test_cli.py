"""The headless CLI as a script would use it: JSON shapes, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def atomdeck(*args, check=False):
    p = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                       timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_plan_json_shape():
    out = json.loads(atomdeck("plan", "demo-2p1d", "--json", check=True).stdout)
    assert [p["name"] for p in out["processes"]] == ["prefill-0", "prefill-1", "decode-0", "router"]
    p0 = out["processes"][0]
    assert set(p0) == {"name", "role", "node", "host", "argv", "env", "launch_argv", "ports"}
    assert p0["argv"][:3] == ["python3", "-m", "atom.entrypoints.openai_server"]
    assert out["processes"][-1]["argv"][:2] == ["atomesh", "launch"]
    assert {"node", "host", "port", "role"} <= set(out["barrier"][0])
    assert out["findings"] == []


def test_lint_exits_1_on_errors_and_0_when_clean():
    assert atomdeck("lint", "demo-1p1d").returncode == 0
    bad = atomdeck("lint", "demo-1p1d", "--nodes", "demo-n06,demo-n01")
    assert bad.returncode == 1
    assert "node-excluded [demo-n06]" in bad.stdout and "persistently drained" in bad.stdout
    js = json.loads(atomdeck("lint", "demo-1p1d", "--nodes", "demo-n06,demo-n01", "--json").stdout)
    assert js["ok"] is False and js["findings"][0]["rule"] == "node-excluded"


def test_nodes_json_shows_reasons():
    out = json.loads(atomdeck("nodes", "--cluster", "local", "--json", check=True).stdout)
    rows = {r["name"]: r for r in out["nodes"]}
    assert rows["demo-n05"]["usable"] is False and "gpu memory not released" in rows["demo-n05"]["why_not"]
    assert rows["demo-n06"]["why_not"].startswith("excluded by cluster rule")
    assert rows["demo-n01"]["usable"] is True


@pytest.mark.parametrize("args,needle", [
    (["plan", "no-such-recipe"], "no recipe named 'no-such-recipe'; known recipes: demo-1p1d"),
    (["plan", "demo-1p1d", "--cluster", "nowhere"], "no cluster named 'nowhere'"),
    (["plan", "/tmp/does-not-exist.yaml"], "recipe file /tmp/does-not-exist.yaml does not exist"),
])
def test_user_mistakes_give_a_message_not_a_traceback(args, needle):
    p = atomdeck(*args)
    assert p.returncode == 2
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


def test_bad_recipe_file_lists_every_issue(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: x\nmodel: {path: m}\nprefill: {tp: eight, args: {host: 1.2.3.4}}\nrouter: {policy: x}\n")
    p = atomdeck("plan", str(f))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"{f}:3: prefill.tp: must be a whole number, got 'eight'" in p.stderr
    assert f"{f}:4: router.policy: must be one of" in p.stderr


def test_plan_on_slurm_offline_by_node_name():
    out = json.loads(atomdeck("plan", "dsv4-fp4-mi355x-1p1d-tp8", "--cluster", "mia1", "--offline", "--nodes",
                              "mia1-p01-g01,mia1-p01-g02", "--json", check=True).stdout)
    assert out["processes"][0]["launch_argv"][:3] == ["srun", "--jobid", "$JOBID"]
    g37 = atomdeck("lint", "dsv4-fp4-mi355x-1p1d-tp8", "--cluster", "mia1", "--offline", "--nodes",
                   "mia1-p01-g37,mia1-p01-g02")
    assert g37.returncode == 1 and "persistently drained, not responding" in g37.stdout


def test_runs_cuts_a_long_diagnosis_on_a_terminal_and_says_where_it_is_whole(capsys):
    from atomdeck.core.cli.run_verbs import runs_text

    said = ("the launch was interrupted while its processes started: 3 of 5 started and left running; "
            "stop them with `atomdeck down 20261204-1-demo`")
    runs = [{"id": "20261204-1-demo", "status": "failed", "cluster": "demo", "created": 0, "diagnosis": said},
            {"id": "20261204-2-demo", "status": "serving", "cluster": "demo", "created": 0, "diagnosis": "serving"}]
    runs_text(runs, width=100)
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 100 for line in lines[:3]), lines
    assert lines[1].endswith("…") and lines[2].endswith(" serving"), lines
    assert "`atomdeck status 20261204-1-demo`" in lines[3]
    runs_text(runs)  # piped (not a terminal): every line whole, for grep
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].endswith("stop them with `atomdeck down 20261204-1-demo`") and len(lines) == 3, lines


def test_a_preflight_refusal_prints_each_finding_with_what_to_change(monkeypatch, capsys):
    """`atomdeck up` refused by pre-flight: every finding on a line of its own, with the key to change and how
    (the one-line message alone named neither); --json keeps the findings' fields."""
    from atomdeck.core.cli.main import main
    from atomdeck.core.config.errors import PreflightError
    from atomdeck.core.design.findings import Finding
    from atomdeck.core.run.run import Run

    found = [Finding("preflight-busy", "error", "processes of another atomdeck run are running on g02: r1", "--nodes",
                     "stop it where it was launched (`atomdeck down RUN`), or pick another node", "g02"),
             Finding("preflight-model", "error", "model path /m is missing on g03", "model.path", "put it there", "g03")]

    async def refused(*a, **kw):
        raise PreflightError(found)

    monkeypatch.setattr(Run, "launch", refused)
    assert main(["up", "demo-1p1d"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["atomdeck: pre-flight failed, nothing was launched:",
                   "  error: preflight-busy [g02]: processes of another atomdeck run are running on g02: r1 -> change "
                   "--nodes: stop it where it was launched (`atomdeck down RUN`), or pick another node",
                   "  error: preflight-model [g03]: model path /m is missing on g03 -> change model.path: put it there"]
    assert main(["up", "demo-1p1d", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)["error"]
    assert out["kind"] == "preflight" and [f["rule"] for f in out["findings"]] == ["preflight-busy", "preflight-model"]
