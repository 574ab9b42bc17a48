"""Container runtimes in the plan (issue 45): pyxis's srun options, podman beside docker, apptainer's argv, image
aliases, the cluster's and the recipe's mounts, and the lint findings for what cannot work."""

from __future__ import annotations

import subprocess

import pytest
from atomdeck.core.config.errors import ConfigError
from atomdeck.core.design.commands import LaunchContext, SimRuntime
from atomdeck.core.remote.image_check import ImageCheck, image_check_findings, pyxis_error
from atomdeck.core.remote.preflight import SCRIPT, NodeCheck, checks_for, findings_from, parse

from .helpers import LAB, lab_assess

IMG = "/shared/images/atom-v1.sqsh"
PYXIS = LAB + f"""container:
  runtime: pyxis
  images: {{atom: {IMG}}}
  mounts: [/data/models:/models:ro]
  workdir: /workspace
"""
SIM = SimRuntime(shim_dir="/repo/sim/shim", python_bin="/repo/.venv/bin", mounts=("/py", "/repo"))


def step(argv: list[str]) -> list[str]:
    """The srun options after atomdeck's own (--kill-on-bad-exit=1) up to the command (`env`)."""
    rest = argv[argv.index("--kill-on-bad-exit=1") + 1:]
    return rest[:rest.index("env")]


def test_pyxis_renders_the_container_options_of_args_c_on_the_srun():
    a = lab_assess("image: atom\ncontainer_mounts: [/scratch:/scratch:ro+rprivate]\n", cluster=PYXIS,
                   ctx=LaunchContext(run_id="r1", job_id="77", user="op"))
    assert a.ok, a.findings
    p = next(p for p in a.processes if p.name == "prefill-0")
    assert step(p.launch_argv) == [
        f"--container-image={IMG}",
        "--container-mounts=/data/models:/models:ro,/scratch:/scratch:ro+rprivate",
        "--container-workdir=/workspace",
        f"--container-name=atomdeck_r1_{p.node}",
        "--no-container-mount-home", "--no-container-entrypoint"]
    assert p.step_options == step(p.launch_argv) and p.container == f"atomdeck_r1_{p.node}"
    assert p.inner[0] == "env" and p.inner[-len(p.argv):] == p.argv  # the command runs as is, inside
    router = next(p for p in a.processes if p.role == "router")
    assert router.step_options and router.container == f"atomdeck_r1_{router.node}"  # one container per node


def test_pyxis_settings_each_become_their_option():
    cluster = PYXIS + """  pyxis: {name: "{user}-{job}-{node}", writable: true, remap_root: false, mount_home: true,
          entrypoint: true, env: [HF_TOKEN, NCCL_DEBUG]}
"""
    a = lab_assess("image: atom\n", cluster=cluster, ctx=LaunchContext(run_id="r1", job_id="77", user="op"))
    opts = a.processes[0].step_options
    assert opts[3:] == [f"--container-name=op-77-{a.processes[0].node}", "--container-writable",
                        "--container-mount-home", "--no-container-remap-root", "--container-entrypoint",
                        "--container-env=HF_TOKEN,NCCL_DEBUG"]
    unnamed = lab_assess("image: atom\n", cluster=PYXIS + "  pyxis: {name: null}\n")
    assert not any(o.startswith("--container-name") for o in unnamed.processes[0].step_options)
    assert unnamed.processes[0].container is None


def test_the_simulators_python_and_code_are_mounted_read_only_after_the_cluster_and_recipe_mounts():
    a = lab_assess("image: atom\n", cluster=PYXIS, ctx=LaunchContext(sim=SIM))
    mounts = next(o for o in a.processes[0].step_options if o.startswith("--container-mounts="))
    assert mounts == "--container-mounts=/data/models:/models:ro,/py:/py:ro,/repo:/repo:ro"


@pytest.mark.parametrize("bad, message", [
    ("container: {runtime: pyxis, pyxis: {name: 'atomdeck_{node}'}}", "names no run"),
    ("container: {runtime: pyxis, pyxis: {name: '{run}_{host}'}}", "unknown field(s) host"),
    ("container: {runtime: pyxis, mounts: ['/a:/b,/c:/d']}", "no comma"),
    ("container: {runtime: pyxis, mounts: ['data:/data']}", "absolute paths"),
    ("container: {runtime: pyxis, workdir: work}", "absolute path inside the container"),
    ("container: {runtime: pyxis, pyxis: {env: [A-B]}}", "not a variable name"),
])
def test_cluster_container_settings_that_cannot_work_are_refused_when_the_file_loads(bad, message):
    from atomdeck.core.config.cluster import parse_cluster

    with pytest.raises(ConfigError) as e:
        parse_cluster(LAB + bad + "\n")
    assert message in str(e.value)


def test_lint_names_pyxis_off_slurm_a_relative_squashfs_and_a_bad_recipe_mount():
    ssh = PYXIS.replace("launcher: slurm", "launcher: ssh\nnodes: [{name: mia1-p01-g01, addr: 10.0.0.1}]")
    a = lab_assess("image: atom\n", cluster=ssh)
    (f,) = [f for f in a.findings if f.rule == "container-runtime"]
    assert (f.severity, f.key) == ("error", "cluster container.runtime") and "launches with ssh" in f.message
    a = lab_assess("image: images/atom.sqsh\ncontainer_mounts: ['scratch:/scratch']\n", cluster=PYXIS)
    got = sorted((f.rule, f.key, f.severity) for f in a.findings if f.rule.startswith("container-"))
    assert got == [("container-image", "image", "error"), ("container-mounts", "container_mounts.0", "error")]
    assert not a.ok
    alias = PYXIS.replace(f"atom: {IMG}", "atom: ./atom.sqsh")
    (f,) = [f for f in lab_assess("image: atom\n", cluster=alias).findings if f.rule == "container-image"]
    assert f.key == "cluster container.images.atom" and "relative path" in f.message
    (f,) = [f for f in lab_assess("", cluster=PYXIS).findings if f.rule == "container-image"]
    assert f.severity == "warning" and "aliases: atom" in f.fix


def test_an_alias_is_resolved_and_a_uri_or_path_is_kept():
    for image, want in (("atom", IMG), ("docker://rocm/atom:v1", "docker://rocm/atom:v1"), ("/x.sqsh", "/x.sqsh")):
        a = lab_assess(f"image: '{image}'\n", cluster=PYXIS)
        assert a.processes[0].step_options[0] == f"--container-image={want}"


def test_podman_takes_dockers_options_and_apptainer_its_own():
    docker = lab_assess("image: rocm/atom:v1\n", cluster=LAB + "container: {runtime: docker, mounts: [/d:/d:ro]}\n")
    podman = lab_assess("image: rocm/atom:v1\n", cluster=LAB + "container: {runtime: podman, mounts: [/d:/d:ro]}\n")
    d, p = docker.processes[0].inner, podman.processes[0].inner
    i = d.index("--shm-size")  # podman 4.3 refuses it with --ipc host: the only difference
    assert d[0] == "docker" and p[0] == "podman" and d[1:i] + d[i + 2:] == p[1:] and "--shm-size" not in p
    assert "/d:/d:ro" in p and p[p.index("--network") + 1] == "host"
    app = lab_assess("image: /img/atom.sif\n", cluster=LAB + "container: {runtime: apptainer, mounts: [/d:/d:ro],"
                     " workdir: /w}\n").processes[0]
    assert app.inner[:7] == ["apptainer", "exec", "--rocm", "--bind", "/d:/d:ro", "--cwd", "/w"]
    assert app.inner[7:9] == ["/img/atom.sif", "env"] and app.inner[-len(app.argv):] == app.argv


def test_the_node_script_names_a_missing_image_file(tmp_path):
    there = tmp_path / "img.sqsh"
    there.write_bytes(b"hsqs")
    for path, want in ((str(there), "present"), (str(tmp_path / "no.sqsh"), "missing")):
        out = subprocess.run(["sh", "-c", SCRIPT, "x", "", "", "", "", "", path], capture_output=True, text=True)
        assert parse(out.stdout)["image"] == want
    a = lab_assess("image: atom\n", cluster=PYXIS)
    ch = next(c for c in checks_for(a.plan, a.processes))
    assert ch.image_file == IMG
    ch.result = {"preflight": "done", "image": "missing"}
    (f,) = findings_from(ch, "m")
    assert (f.rule, f.key, f.node) == ("preflight-image", "image", ch.node)
    assert f.message == f"image {IMG} does not exist on {ch.node}"
    uri = lab_assess("image: docker://rocm/atom:v1\n", cluster=PYXIS)
    assert all(c.image_file == "" for c in checks_for(uri.plan, uri.processes))  # a URI is pulled, not a file


def test_pyxis_says_why_a_container_did_not_start():
    said = """slurmstepd-mia1-p01-g01: error: pyxis: child 6068 failed with error code: 1
slurmstepd-mia1-p01-g01: error: pyxis: failed to create container filesystem for image: /nonexistent/x.sqsh
slurmstepd-mia1-p01-g01: error: pyxis: printing enroot log file:
slurmstepd-mia1-p01-g01: error: pyxis:     [ERROR] No such file or directory: /nonexistent/x.sqsh
srun: error: mia1-p01-g01: task 0: Exited with exit code 1"""
    assert pyxis_error(said) == "No such file or directory: /nonexistent/x.sqsh"
    assert pyxis_error("slurmstepd: error: pyxis: couldn't start container\nsrun: error: x") == \
        "pyxis: couldn't start container"
    ch = ImageCheck("/x.sqsh", "n1", [], [], 0, "pyxis", ["--container-image=/x.sqsh"],
                    result={"error": "No such file or directory: /x.sqsh"})
    (f,) = image_check_findings(ch)
    assert f.message == "pyxis could not start image /x.sqsh on n1: No such file or directory: /x.sqsh"
    assert ch.command()[:2] == ["--container-image=/x.sqsh", "sh"] and not ch.cacheable


def test_pyxis_checks_the_image_on_every_node_and_the_open_files_limit_on_the_node():
    from atomdeck.core.remote.preflight import image_checks_for

    a = lab_assess("image: atom\n", cluster=PYXIS)
    checks = image_checks_for(a.plan, a.processes)
    assert sorted(c.node for c in checks) == sorted(a.plan.selection.all())
    assert all(c.runtime == "pyxis" and c.nofile == 0 and c.step_options for c in checks)
    assert all(c.nofile > 0 for c in checks_for(a.plan, a.processes) if any(
        p.node == c.node and p.role != "router" for p in a.processes))


def test_a_node_check_carries_no_image_for_docker(tmp_path):
    a = lab_assess("image: rocm/atom:v1\n", cluster=LAB + "container: {runtime: docker}\n")
    assert all(isinstance(c, NodeCheck) and c.image_file == "" for c in checks_for(a.plan, a.processes))


def test_an_image_check_gets_the_pull_timeout_and_says_it_is_still_running(monkeypatch):
    """A pull may take many minutes: the image check runs up to container.pull_timeout_s (not the node script's
    60 s), says every PROGRESS_S which nodes are still at it, and one that runs out is named with its node and
    the key to raise. Here the 'pull' is a real `sleep` that outlasts a 0.4 s timeout."""
    import asyncio

    from atomdeck.core.config.errors import PreflightError
    from atomdeck.core.remote import preflight
    from atomdeck.core.remote.shell import LocalRunner, Result

    monkeypatch.setattr(preflight, "PROGRESS_S", 0.1)
    a = lab_assess("image: rocm/atom:v1\n", cluster=LAB + "container: {runtime: docker, pull_timeout_s: 0.4}\n")
    said: list[str] = []
    asked: list[float] = []

    async def node(_node, _argv):  # the node script: done, nothing found
        return Result([], 0, "preflight=done\nnic=none\nips=10.1.0.1\n", "")

    async def image(_node, _argv, timeout):
        asked.append(timeout)
        return await LocalRunner().run(["sleep", "3"], timeout=timeout)

    with pytest.raises(PreflightError) as e:
        asyncio.run(preflight.run_checks(a.plan, a.processes, node, run_image=image, progress=said.append))
    (f,) = [f for f in e.value.findings if f.rule == "preflight-image"]
    assert asked == [0.4]
    assert "no answer within 0.4 s (container.pull_timeout_s)" in f.message and f.node == a.processes[0].node
    assert said[0] == f"checking image rocm/atom:v1 on {f.node} (up to 0.4 s: it may be pulled)"
    assert any(s.startswith(f"image check still running on {f.node} after ") for s in said[1:]), said
