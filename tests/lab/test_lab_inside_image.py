"""Issue 17.10 on the lab: pre-flight checks the open-files limit and the Mooncake directory where the engine
will run. Without a container that is the node (the lab's real hard limit: 20000 open files, which nobody here
can raise); with one it is the image, through `docker run` of the image (the simulator's docker shim, sim/shim/
docker: an image is a directory, run in a private mount namespace with only the image's files and the host OS)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
from pathlib import Path

import pytest
import yaml
from atomdeck.core.config.errors import PreflightError
from atomdeck.core.config.paths import find_cluster, state_dir
from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.core.run.run import Run

from . import runhelpers
from .runhelpers import node_pids, run_pids, serve, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]
G = "mia1-p01-g0"
SHIM = Path(__file__).resolve().parents[2] / "sim" / "shim" / "docker"
MOONCAKE = "/opt/venv/lib/python3.10/site-packages/mooncake"  # what the DeepSeek recipes' LD_LIBRARY_PATH names


def _hard_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def refused(ws) -> PreflightError:
    e = runhelpers.refused(ws)
    assert runhelpers.jobs() == ""  # the allocation was given back
    return e


def test_a_simulator_cluster_asking_more_open_files_than_the_hard_limit_is_refused(lab):
    hard = _hard_limit()
    assert hard != resource.RLIM_INFINITY and hard < 30000, "the lab's hard limit is what this test is about"
    ws = workspace("demo-1p1d", "lab")
    ws.cluster = ws.cluster.model_copy(update={"nofile": hard + 1})
    got = sorted((f.rule, f.node, f.key, f.message) for f in refused(ws).findings)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert got == [("preflight-nofile", f"{G}{i}", "cluster",
                    f"the open-files limit on {G}{i} is {soft} (at most {hard}); Mooncake needs {hard + 1} "
                    "and atomdeck can raise it only up to the hard limit") for i in (1, 2)]
    run = Run.list()[-1]
    assert run["status"] == "failed" and "pre-flight failed" in run["diagnosis"]
    assert run_pids(lab, run["id"]) == {}


def test_the_wrapper_raises_a_low_soft_limit_to_what_the_engine_needs(lab):
    """The console's soft limit is 1024 (Slurm propagates it to the steps): pre-flight passes because the hard
    limit allows the need, and every process of the run gets the raised limit from the wrapper."""
    hard = _hard_limit()
    ws = workspace("demo-1p1d", "lab")
    ws.cluster = ws.cluster.model_copy(update={"nofile": hard})  # exactly the hard limit: allowed
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        run, state = serve(ws)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
    try:
        assert state.status == "serving", state.diagnosis
        limits = {}
        # the run's processes (supervisors, engines, routers), not the per-node Slurm step that starts them
        # (marked `RUN:@node`: it stays at the limit it was given and raises nothing itself)
        marked = f'tr "\\0" "\\n" < "$f" 2>/dev/null | grep -q "^ATOMDECK_RUN={run.id}:[^@]"'
        procs = {node: pids for node in lab.node_names if (pids := node_pids(lab, node, marked))}
        assert set(procs) == {p.node for p in state.procs.values()}, procs
        for node, pids in procs.items():
            for pid in pids:
                text = Path(f"/proc/{pid}/limits").read_text()
                line = next(ln for ln in text.splitlines() if ln.startswith("Max open files"))
                limits[(node, pid)] = int(line.split()[3])
        assert limits and set(limits.values()) == {hard}, limits
        open_files = {key: len(os.listdir(f"/proc/{key[1]}/fd")) for key in limits}
        assert max(open_files.values()) < 100, open_files  # docs/preflight.md: the simulator's need is 4096
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()


def _docker_workspace(tmp_path, monkeypatch, image: str, mooncake: str = MOONCAKE, **cluster_edits):
    """The 1P1D DeepSeek recipe on the lab's nodes in containers (real engine: the checks, not a launch)."""
    models = tmp_path / "models"
    (models / "DeepSeek-V4-Pro").mkdir(parents=True)
    cluster = yaml.safe_load(find_cluster("lab").read_text())
    cluster.update({"name": "lab-docker", "simulator": {"enabled": False}, "container": {"runtime": "docker"},
                    "model_dirs": [{"pattern": "mia1-*", "path": str(models)}], **cluster_edits})
    (tmp_path / "recipes" / "clusters").mkdir(parents=True)
    (tmp_path / "recipes" / "clusters" / "lab-docker.yaml").write_text(yaml.safe_dump(cluster))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{SHIM}:{os.environ['PATH']}")  # srun passes the environment to the steps
    monkeypatch.setenv("ATOMSIM_DOCKER_IMAGES", str(tmp_path / "images"))
    (tmp_path / "images").mkdir()
    ws = load_workspace("dsv4-fp4-mi355x-1p1d-tp8", "lab-docker")
    ws.inventory, _ = asyncio.run(fetch_inventory(ws.cluster))
    ws.recipe = set_field(set_field(ws.recipe, "image", image), "mooncake.protocol", "tcp")  # the lab has no RDMA
    ws.recipe = set_field(ws.recipe, "env.LD_LIBRARY_PATH", f"{mooncake}:/opt/rocm/lib")
    return ws


def _image(tmp_path, name: str, with_mooncake: bool) -> None:
    root = tmp_path / "images" / name.replace("/", "_").replace(":", "_") / "rootfs"
    (root / "opt" / "venv").mkdir(parents=True)
    if with_mooncake:
        (root / MOONCAKE.lstrip("/")).mkdir(parents=True)


def test_inside_the_image_a_missing_mooncake_dir_and_a_low_open_files_limit_are_refused(lab, tmp_path,
                                                                                         monkeypatch):
    """The directory exists on every node but not in the image: refused, naming the image. The engine's
    docker run asks nofile=1048576, which this docker cannot set (the lab's hard limit): refused, naming the
    node and docker's own error. With container.extra_args lowering it to 16384, the limit found inside is
    named against what Mooncake needs."""
    on_node = tmp_path / "node" / "mooncake"  # on the nodes (they share this file system), not in the image
    on_node.mkdir(parents=True)
    ws = _docker_workspace(tmp_path, monkeypatch, "lab/atom:nomooncake", str(on_node))
    _image(tmp_path, "lab/atom:nomooncake", with_mooncake=False)
    (f,) = refused(ws).findings
    assert (f.rule, f.node, f.key) == ("preflight-image", f"{G}1", "image")
    assert f.message.startswith(f"`docker run` of image lab/atom:nomooncake did not run the pre-flight check "
                                f"on {G}1: exit 125: ") and "error setting rlimit type 7" in f.message

    ws = _docker_workspace(tmp_path / "b", monkeypatch, "lab/atom:nomooncake", str(on_node),
                           container={"runtime": "docker", "extra_args": ["--ulimit", "nofile=16384:16384"]})
    _image(tmp_path / "b", "lab/atom:nomooncake", with_mooncake=False)
    got = sorted((f.rule, f.node, f.key, f.message) for f in refused(ws).findings)
    assert got == [
        ("preflight-mooncake", f"{G}1", "env.LD_LIBRARY_PATH",
         f"LD_LIBRARY_PATH names {on_node} for Mooncake, but image lab/atom:nomooncake has no such directory"),
        ("preflight-nofile", f"{G}1", "container.extra_args",
         f"the open-files limit inside image lab/atom:nomooncake is 16384 on {G}1 (docker run --ulimit "
         "nofile=1048576:1048576 --ulimit nofile=16384:16384); Mooncake needs 65536")]


def test_a_good_image_passes_its_checks_once_and_is_cached(lab, tmp_path, monkeypatch):
    """The image has the directory (the nodes do not) and the limit is what the cluster asks: the image checks
    pass (the launch stops at the next check: this image has no ATOM to answer --help), and are cached by image."""
    assert not Path(MOONCAKE).exists()
    ws = _docker_workspace(tmp_path, monkeypatch, "lab/atom:good", nofile=8192,
                           container={"runtime": "docker", "extra_args": ["--ulimit", "nofile=16384:16384"]})
    _image(tmp_path, "lab/atom:good", with_mooncake=True)
    found = refused(ws).findings
    assert {f.rule for f in found} == {"preflight-help"} and len(found) == 2  # the worker's and the router's
    assert all("image lab/atom:good" in f.message for f in found)
    assert any("No module named 'atom'" in f.message for f in found)  # the worker's
    assert any('exec: "atomesh": executable file not found' in f.message for f in found)  # the router's
    cache = json.loads((state_dir() / "image-checks.json").read_text())
    (key,) = cache
    assert json.loads(key) == ["lab/atom:good", ["nofile=1048576:1048576", "nofile=16384:16384"], [MOONCAKE]]
    assert cache[key]["nofile"] == "16384 16384" and cache[key]["mooncake_missing"] == ""
    # the next launch on this image asks nobody: with the image gone, its checks still pass from the cache
    # (and `--help`, which is not cached after a failure, is what refuses)
    (tmp_path / "images" / "lab_atom_good" / "rootfs" / MOONCAKE.lstrip("/")).rmdir()
    assert {f.rule for f in refused(ws).findings} == {"preflight-help"}
