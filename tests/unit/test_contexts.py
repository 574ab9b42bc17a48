"""Several clusters: the clusters file (validated like a cluster file), finding a cluster by name, the current
context, and --context/--cluster as every verb reads them (core/config/clusters.py, core/cli/contexts.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from atomdeck.core.config import clusters
from atomdeck.core.config.errors import AtomdeckError, ConfigError
from atomdeck.core.config.paths import config_dir, runs_dir

TWO = """\
# the operator's clusters
current: demo   # where a command goes when it names none
clusters:
  demo:
    description: the demo, renamed
    launcher: local
    nodes: [{name: n1, addr: 127.0.0.11}, {name: n2, addr: 127.0.0.12}]
  lab2:
    launcher: slurm
    partition: gpu
    gpus_per_node: 16
"""


def write_clusters(text: str = TWO) -> Path:
    path = config_dir() / "clusters.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def atomdeck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=60, env=os.environ.copy())


def fake_run_dir(run_id: str, cluster: str, created: float, status: str = "stopped") -> None:
    d = runs_dir() / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"id": run_id, "cluster": cluster, "status": status, "created": created,
                                            "recipe": "demo-1p1d", "launcher": "local", "fake": True}))


def test_a_cluster_of_the_clusters_file_is_found_by_name_and_the_files_still_are():
    write_clusters()
    lab2, path = clusters.load("lab2")
    assert (lab2.name, lab2.launcher, lab2.gpus_per_node, path) == ("lab2", "slurm", 16, config_dir() / "clusters.yaml")
    assert clusters.load("local")[0].launcher == "local"  # a shipped cluster file, as before
    names = [r.name for r in clusters.contexts()]
    assert names[:2] == ["demo", "lab2"] and "local" in names and "lab" in names
    assert clusters.current_context() == "demo"


def test_the_clusters_file_wins_over_a_cluster_file_of_the_same_name():
    write_clusters(TWO.replace("demo:", "local:").replace("current: demo", "current: local"))
    local, path = clusters.load("local")
    assert local.description == "the demo, renamed" and path.name == "clusters.yaml"


def test_without_a_clusters_file_the_demo_is_current_and_nothing_changes():
    assert clusters.read_clusters_file() is None
    assert clusters.current_context() == "local"
    assert clusters.load("lab")[1].name == "lab.yaml"


def test_every_problem_of_the_file_is_named_with_its_key_path_line_and_fix():
    write_clusters("""\
current: nowhere
launcher: slurm
clusters:
  a:
    launcher: slrum
  b:
    name: c
    launcher: local
    nodes: [{name: x, addr: 127.0.0.2}]
  d:
    launcher: local
    nodes:
      - {name: x, addr: 10.0.0.1}
    gpus_per_nod: 3
""")
    with pytest.raises(ConfigError) as e:
        clusters.load("a")
    got = {(i.path, i.line): i.message for i in e.value.issues}
    assert "no cluster named 'nowhere'" in got[("current", 1)]
    assert "a cluster's own keys go under clusters.NAME" in got[("launcher", 2)]
    assert "must be one of" in got[("clusters.a.launcher", 5)]
    assert "entry is called 'b'" in got[("clusters.b.name", 7)]
    assert "127.0.0.N" in got[("clusters.d.nodes.0.addr", 13)]
    assert "did you mean 'gpus_per_node'" in got[("clusters.d.gpus_per_nod", 14)]
    assert len(got) == 6


@pytest.mark.parametrize("text, words", [
    ("clusters: [a, b]\n", "must be a mapping of cluster names"),
    ("clusters:\n  'my lab': {launcher: local}\n", "cannot be a cluster name"),
    ("clusters:\n  a: 3\n", "must be a cluster"),
    ("current: [a]\nclusters: {}\n", "must be a cluster name"),
    ("clusters:\n  a: {launcher: local}\n  a: {launcher: slurm}\n", "appears twice"),
])
def test_a_malformed_clusters_file_says_what_to_change(text, words):
    write_clusters(text)
    with pytest.raises(ConfigError) as e:
        clusters.contexts()
    assert words in str(e.value)


def test_an_unknown_name_lists_the_known_ones():
    write_clusters()
    with pytest.raises(AtomdeckError, match=r"no cluster named 'nope'; known clusters: demo, lab2, "):
        clusters.find("nope")


def test_set_current_rewrites_one_line_and_keeps_the_comments(tmp_path):
    path = write_clusters()
    clusters.set_current("lab2")
    text = path.read_text()
    assert text == TWO.replace("current: demo   #", "current: lab2   #")
    clusters.set_current("lab")  # a cluster file's name is a context too
    assert clusters.current_context() == "lab"
    with pytest.raises(AtomdeckError, match="no cluster named"):
        clusters.set_current("nope")
    assert clusters.current_context() == "lab"


def test_set_current_starts_the_file_when_there_is_none():
    path = clusters.set_current("lab")
    assert path == config_dir() / "clusters.yaml"
    assert clusters.read_clusters_file().current == "lab"


def test_atomdeck_clusters_names_another_file(tmp_path, monkeypatch):
    other = tmp_path / "team.yaml"
    other.write_text(TWO)
    monkeypatch.setenv("ATOMDECK_CLUSTERS", str(other))
    assert clusters.load("lab2")[1] == other
    monkeypatch.setenv("ATOMDECK_CLUSTERS", str(tmp_path / "missing.yaml"))
    with pytest.raises(AtomdeckError, match="ATOMDECK_CLUSTERS=.*does not exist"):
        clusters.current_context()


def test_a_clusters_file_given_as_a_cluster_file_says_how_to_use_it(tmp_path):
    other = tmp_path / "team.yaml"
    other.write_text(TWO)
    with pytest.raises(AtomdeckError, match="holds several clusters; name one with --context"):
        clusters.load(str(other))


def test_context_and_cluster_are_one_choice():
    write_clusters()
    assert clusters.choose(None, "lab2") == "lab2"
    assert clusters.choose("lab2", "lab2") == "lab2"
    assert clusters.choose(None, None) is None
    with pytest.raises(AtomdeckError, match="name two clusters"):
        clusters.choose("demo", "lab2")
    with pytest.raises(AtomdeckError, match="takes a cluster's name, not a path"):
        clusters.choose(None, "x/lab.yaml")


# ------------------------------------------------------------------------------------- the command line
def test_design_verbs_work_on_the_named_cluster_else_the_current_one():
    write_clusters()
    out = json.loads(atomdeck("nodes", "--json").stdout)
    assert out["cluster"] == "demo"  # current:
    out = json.loads(atomdeck("nodes", "--context", "local", "--json").stdout)
    assert out["cluster"] == "local"
    out = json.loads(atomdeck("nodes", "--cluster", "local", "--json").stdout)
    assert out["cluster"] == "local"
    p = atomdeck("plan", "demo-1p1d", "--context", "lab2", "--offline", "--json")
    assert json.loads(p.stdout)["cluster"] == "lab2"
    bad = atomdeck("lint", "demo-1p1d", "--context", "demo", "--cluster", "lab2", "--json")
    assert bad.returncode == 2 and "name two clusters" in json.loads(bad.stdout)["error"]["message"]


@pytest.mark.parametrize("verb", ["plan", "lint", "nodes", "up", "status", "watch", "logs", "down", "runs", "bench",
                                  "compare", "snapshot", "restart", "remove", "add", "drill", "tui", "import",
                                  "export", "sweep"])
def test_every_verb_takes_context_and_refuses_an_unknown_one_alike(verb):
    args = {"plan": ["demo-1p1d"], "lint": ["demo-1p1d"], "up": ["demo-1p1d"], "logs": ["r1"], "down": ["r1"],
            "bench": ["r1"], "compare": ["r1"], "snapshot": ["r1"], "drill": ["list"],
            "restart": ["r1", "decode-0"], "remove": ["r1", "decode-0"], "add": ["r1", "--role", "decode"],
            "sweep": ["demo-1p1d", "--nodes", "demo-n01,demo-n02", "--layouts", "1p1d"],
            "import": ["srt-slurm", "x.yaml"], "export": ["srt-slurm", "demo-1p1d"]}.get(verb, [])
    if verb == "tui":  # (no --json: the console)
        p = atomdeck(verb, "--context", "nowhere")
        assert p.returncode == 2 and "no cluster named 'nowhere'" in p.stderr, p.stderr
        return
    p = atomdeck(verb, *args, "--context", "nowhere", "--json")
    assert p.returncode == 2, p.stdout + p.stderr
    err = json.loads(p.stdout)["error"]
    assert err["kind"] == "input" and "no cluster named 'nowhere'" in err["message"], err


def test_verbs_on_runs_take_any_run_and_with_context_only_its_runs():
    write_clusters()
    now = time.time()
    fake_run_dir("r-demo-old", "demo", now - 30)
    fake_run_dir("r-lab2", "lab2", now - 20)
    fake_run_dir("r-demo-new", "demo", now - 10)
    fake_run_dir("r-local", "local", now - 5)
    runs = json.loads(atomdeck("runs", "--json").stdout)["runs"]
    assert [m["id"] for m in runs] == ["r-demo-old", "r-lab2", "r-demo-new", "r-local"]  # every cluster's
    assert {m["cluster"] for m in runs} == {"demo", "lab2", "local"}
    only = json.loads(atomdeck("runs", "--context", "lab2", "--json").stdout)["runs"]
    assert [m["id"] for m in only] == ["r-lab2"]
    from argparse import Namespace

    from atomdeck.core.cli.contexts import pick_run

    assert pick_run(Namespace(cluster=None), None) is None  # the newest of all, as before
    assert pick_run(Namespace(cluster="demo"), None) == "r-demo-new"
    assert pick_run(Namespace(cluster="lab2"), "r-lab2") == "r-lab2"
    with pytest.raises(AtomdeckError, match="run r-lab2 is on cluster lab2, not demo"):
        pick_run(Namespace(cluster="demo"), "r-lab2")
    p = atomdeck("down", "r-lab2", "--context", "demo")
    assert p.returncode == 2 and "is on cluster lab2, not demo" in p.stderr
    for act in (["restart", "r-lab2", "decode-0"], ["remove", "r-lab2", "decode-0"], ["add", "r-lab2", "--role",
                                                                                         "decode"]):
        p = atomdeck(*act, "--context", "demo", "--json")  # refused before the run is touched
        assert p.returncode == 2 and "is on cluster lab2, not demo" in json.loads(p.stdout)["error"]["message"]
    p = atomdeck("status", "--context", "lab", "--json")
    assert p.returncode == 2 and "no runs on cluster lab" in json.loads(p.stdout)["error"]["message"]


def test_a_cluster_gone_from_the_files_still_filters_its_runs():
    fake_run_dir("r-old", "retired", time.time())
    out = json.loads(atomdeck("runs", "--context", "retired", "--json").stdout)
    assert [m["id"] for m in out["runs"]] == ["r-old"]


def test_context_lists_marks_the_current_one_and_switches_it():
    write_clusters()
    p = atomdeck("context")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert lines[1].startswith(" * demo") and lines[2].startswith("   lab2")
    assert atomdeck("ctx", "lab2").returncode == 0
    out = json.loads(atomdeck("context", "--json").stdout)
    assert out["current"] == "lab2" and [c["name"] for c in out["contexts"] if c["current"]] == ["lab2"]
    assert json.loads(atomdeck("nodes", "--json", "--offline").stdout)["cluster"] == "lab2"
    bad = atomdeck("context", "nope")
    assert bad.returncode == 2 and "no cluster named 'nope'" in bad.stderr


def test_export_takes_gpus_per_node_from_the_context():
    write_clusters()
    p = atomdeck("export", "srt-slurm", "dsv4-fp4-mi355x-1p1d-tp8", "--context", "lab2", "--json")
    assert p.returncode == 0, p.stderr
    assert "gpus_per_node: 16" in json.loads(p.stdout)["yaml"]
    p = atomdeck("export", "srt-slurm", "dsv4-fp4-mi355x-1p1d-tp8", "--context", "lab2", "--gpus-per-node", "8")
    assert p.returncode == 2 and "lab2 has gpus_per_node: 16" in p.stderr
