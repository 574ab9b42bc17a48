"""Issue 45 on the lab: real pyxis v0.24.0 and enroot (built by tests/cluster/up.sh from ../shared/vendor and
loaded into every slurmd). A 2P1D comes up to serving with every worker and the router inside enroot containers
started by pyxis from the real `srun --container-*` options; teardown removes the run's named containers and
verifies none is left. Pre-flight names a missing squashfs with each node, and an image URI that cannot be
pulled (the lab's namespaces have no route off the machine: the pull fails there without a packet leaving).
A container that cannot be removed is named at teardown, with where it is. Rows in docs/fault-matrix.md."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from atomdeck.core.config.errors import PreflightError
from atomdeck.core.run.run import Run
from atomdeck.core.run.rundir import RunDir

from .runhelpers import engine_pid, jobs, teardown, up, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]
G = "mia1-p01-g0"
CT = Path("/var/lib/atomdeck-lab/containers")
ENROOT = CT / "enroot" / "bin" / "enroot"
IMAGE = CT / "images" / "atomsim.sqsh"


@pytest.fixture
def pyxis_lab(lab):
    """The lab with pyxis: srun knows --container-image and every slurmd runs with enroot on its PATH (a test
    that restarted a slurmd without it, from an older lab.py, is repaired here)."""
    if not ENROOT.exists() or not IMAGE.exists():
        pytest.fail(f"the lab has no pyxis/enroot ({ENROOT}, {IMAGE}): run tests/cluster/up.sh")
    assert "--container-image" in subprocess.run(["srun", "--help"], capture_output=True, text=True).stdout
    for node in lab.node_names:
        pid = lab.pid("slurmd", node)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if pid else []
        if not any(e.startswith(f"PATH={lab.enroot_bin}:".encode()) for e in environ):
            lab.kill_slurmd(node, sig=15)
            lab.start_slurmd(node)
    return lab


def enroot_list() -> list[str]:
    return subprocess.run([str(ENROOT), "list"], capture_output=True, text=True, check=True).stdout.split()


def container_root(pid: int) -> str:
    """What a process sees as / : inside an enroot container, the container's root file system (the image's
    busybox is there, the host's / has none)."""
    return "busybox" if Path(f"/proc/{pid}/root/bin/busybox").exists() else "host"


def test_a_2p1d_serves_inside_pyxis_containers_and_teardown_removes_them(pyxis_lab):
    lab = pyxis_lab
    ws = workspace("demo-2p1d", "lab-pyxis", image="atomsim")
    a = ws.assess()
    assert a.ok, a.findings
    said: list[str] = []

    async def go():
        run, s = await up(ws, a=a, timeout=120, said=said)
        await run.close()
        return run, s

    run, state = asyncio.run(go())
    try:
        assert state.status == "serving", state.diagnosis
        assert any(ln.startswith(f"checking image {IMAGE} on ") for ln in said), said
        names = {p.node: p.container for p in run.processes.values()}
        assert set(names) == {f"{G}1", f"{G}2", f"{G}3"}
        assert all(names[n] == f"atomdeck_{run.id}_{n}".replace(":", "_") for n in names), names
        # every worker and the router: the process itself (not its supervisor) has the image as its root
        for p in run.processes.values():
            cmd = "atomesh" if p.role == "router" else "openai_server"
            pid = engine_pid(lab, p.node, run.id, p.name, cmd)
            assert container_root(pid) == "busybox", (p.name, pid)
            step = p.launch_argv[p.launch_argv.index("--kill-on-bad-exit=1") + 1:]
            assert step[0] == f"--container-image={IMAGE}" and f"--container-name={names[p.node]}" in step
            assert {"--no-container-mount-home", "--no-container-entrypoint", "--container-readonly"} <= set(step)
        assert {f"pyxis_{n}" for n in names.values()} <= set(enroot_list())
        # the node steps really ran with those options: each node's step is in squeue, its container in enroot
        # (pyxis_NAME, global scope: pyxis's default)
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    lines = container_events(run.id)
    for node, name in names.items():
        assert f"{node}: enroot containers removed: pyxis_{name}; none of the run is left" in lines, lines
    assert not {f"pyxis_{n}" for n in names.values()} & set(enroot_list())
    assert not list((CT / "pyxis-run").glob(f"*/{run.rd.meta()['job_id']}.*"))


def test_a_missing_squashfs_is_named_with_each_node_and_nothing_is_left(pyxis_lab):
    ws = workspace("demo-1p1d", "lab-pyxis", image="/var/lib/atomdeck-lab/containers/images/nosuch.sqsh")
    a = ws.assess()
    assert a.ok, a.findings
    with pytest.raises(PreflightError) as e:
        asyncio.run(Run.launch(ws, a))
    got = sorted((f.rule, f.node, f.key, f.message) for f in e.value.findings)
    assert got == [("preflight-image", f"{G}{i}", "image",
                    f"image /var/lib/atomdeck-lab/containers/images/nosuch.sqsh does not exist on {G}{i}")
                   for i in (1, 2)]
    assert jobs() == ""


def test_an_image_uri_that_cannot_be_pulled_is_named_with_the_node_and_its_containers_removed(pyxis_lab):
    """enroot's import runs inside the node's network namespace, which has no route but the lab's /24: the
    registry name (.invalid never resolves, RFC 2606) is not even looked up off the machine."""
    for node in ("mia1-p01-g01", "mia1-p01-g02"):
        route = pyxis_lab.node_exec(node, ["ip", "route", "get", "10.255.255.53"])
        assert route.returncode != 0 and "unreachable" in route.stderr, route  # the resolver: no route
    uri = "docker://registry.invalid/atomsim:none"
    ws = workspace("demo-1p1d", "lab-pyxis", image=uri)
    a = ws.assess()
    assert a.ok, a.findings
    said: list[str] = []
    with pytest.raises(PreflightError) as e:
        asyncio.run(Run.launch(ws, a, progress=said.append))
    got = sorted((f.rule, f.node, f.key) for f in e.value.findings)
    assert got == [("preflight-image", f"{G}{i}", "image") for i in (1, 2)]
    for f in e.value.findings:
        assert f.message.startswith(f"pyxis could not start image {uri} on {f.node}: "), f.message
        assert "Could not resolve host" in f.message or "registry.invalid" in f.message, f.message
    assert any(ln.startswith(f"checking image {uri} on {G}1, {G}2 (up to 600 s") for ln in said), said
    assert jobs() == ""
    run_id = Run.list()[-1]["id"]  # pre-flight created no container of the run (the import failed), or removed it
    assert not [c for c in enroot_list() if run_id in c]


def test_a_container_that_cannot_be_removed_is_named_with_its_node(pyxis_lab):
    """A mount left inside a container's root file system (here a tmpfs) makes `enroot remove` fail: teardown
    says which container is left on which node and how to remove it, and the run is not clean. (The allocation
    is given back all the same, so the removal is by hand: docs/fault-matrix.md.)"""
    ws = workspace("demo-1p1d", "lab-pyxis", image="atomsim")
    run, state = asyncio.run(_up_closed(ws))
    name = run.processes["prefill-0"].container
    node = run.processes["prefill-0"].node
    busy = CT / "state" / "data" / f"pyxis_{name}" / "tmp"
    subprocess.run(["mount", "-t", "tmpfs", "atomdeck-test", str(busy)], check=True)
    try:
        assert state.status == "serving", state.diagnosis
        report = teardown(run.id)
        lines = container_events(run.id)
    finally:
        subprocess.run(["umount", str(busy)], check=False)
    assert not report.clean
    assert f"{node}: failed pyxis_{name}: " in lines and f"left container pyxis_{name} " in lines, lines
    assert f"remove it on {node} with `{ENROOT} remove -f pyxis_{name}`" in lines, lines
    assert "not clean" in RunDir.find(run.id).meta()["diagnosis"] and f"pyxis_{name}" in RunDir.find(run.id).meta()[
        "diagnosis"]
    others = {p.container for p in run.processes.values()} - {name}
    assert not {f"pyxis_{n}" for n in others} & set(enroot_list())  # the other node's was removed
    subprocess.run([str(ENROOT), "remove", "-f", f"pyxis_{name}"], check=True)  # what the message says to do
    assert f"pyxis_{name}" not in enroot_list()


def container_events(run_id: str) -> str:
    """What teardown said about the run's containers (its events)."""
    return "\n".join(ln for ln in RunDir.find(run_id).event_lines() if "containers" in ln)


async def _up_closed(ws):
    run, s = await up(ws, timeout=120)
    await run.close()
    return run, s
