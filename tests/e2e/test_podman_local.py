"""podman (Debian's 4.3.1) as the container runtime beside docker, for real: a 1P1D of the simulator on the local
demo cluster, every worker and the router in a podman container, reaches serving, and teardown leaves no
container of the run.

What podman needs on these machines (measured, docs/README "Containers"): the cgroupfs manager and runc (crun
refuses the hybrid cgroup mode) through a containers.conf (CONTAINERS_CONF), catatonit for --init, ulimits the
root here may set (no CAP_SYS_RESOURCE: a later --ulimit of a type replaces atomdeck's), no --device (this
machine has no GPU) and `--network host`, which creates no bridge: the containers use the host's loopback, and
nothing on 10.88.0.0/16 (podman's default bridge, cni-podman0) is made."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from atomdeck.core.config.paths import find_cluster
from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.run import Run

from tests.leftovers import alive

pytestmark = pytest.mark.slow

CONF = '[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n'
LIMITS = ["--ulimit", "nofile=16384:16384", "--ulimit", "memlock=8388608:8388608", "--ulimit", "nproc=1024:1024"]


def _bridge() -> bool:
    return subprocess.run(["ip", "link", "show", "cni-podman0"], capture_output=True).returncode == 0


@pytest.fixture
def podman_image(tmp_path, monkeypatch):
    """A busybox image imported into podman (removed afterwards), and podman set up for this machine."""
    if shutil.which("podman") is None or not Path("/bin/busybox").exists():
        why = "podman and busybox-static are not installed (apt-get install podman runc catatonit busybox-static)"
        if os.environ.get("CI") == "true":  # tests/run installs them: under CI a skip would hide a broken set-up
            pytest.fail(why)
        pytest.skip(why)
    conf = tmp_path / "containers.conf"
    conf.write_text(CONF)
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    root = tmp_path / "rootfs"
    for d in ("bin", "etc", "tmp", "usr", "lib", "lib64", "proc", "sys", "dev"):
        (root / d).mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    for applet in ("sh", "env", "ls", "cat"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\nvideo:x:44:\n")  # docker/podman --group-add video
    tag = f"localhost/atomdeck-test-sim:{uuid.uuid4().hex[:8]}"
    tar = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
    subprocess.run(["podman", "import", "-q", str(tar), tag], check=True, capture_output=True)
    yield tag
    subprocess.run(["podman", "rmi", "-f", tag], capture_output=True)


def _workspace(tmp_path, monkeypatch, image: str):
    cluster = yaml.safe_load(find_cluster("local").read_text())
    cluster.update({"name": "local-podman", "container": {
        "runtime": "podman", "devices": [], "mounts": ["/usr:/usr:ro", "/lib:/lib:ro", "/lib64:/lib64:ro"],
        "extra_args": LIMITS}})
    (tmp_path / "recipes" / "clusters").mkdir(parents=True)
    (tmp_path / "recipes" / "clusters" / "local-podman.yaml").write_text(yaml.safe_dump(cluster))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATOMDECK_SIM_SPEED", "20")
    ws = load_workspace("demo-1p1d", "local-podman")
    ws.inventory = ws.cluster.static_inventory()
    ws.recipe = set_field(ws.recipe, "image", image)
    # ports of its own: other sessions' demo runs share these loopback addresses
    for key, port in (("prefill_http", 18510), ("decode_http", 18520), ("router", 18530), ("handshake", 18601),
                      ("router_prometheus", 18540), ("engine", 18506)):
        ws.recipe = set_field(ws.recipe, f"ports.{key}", port)
    return ws


def _containers(run_id: str) -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    return [n for n in out.stdout.split() if run_id.replace(":", "_") in n]


def test_a_1p1d_serves_in_podman_containers_and_teardown_leaves_none(podman_image, tmp_path, monkeypatch):
    bridge_before = _bridge()
    ws = _workspace(tmp_path, monkeypatch, podman_image)
    a = ws.assess()
    assert a.ok, [str(f) for f in a.findings]
    assert all(p.inner[:2] == ["podman", "run"] and "--shm-size" not in p.inner for p in a.processes)

    async def go():
        run = await Run.launch(ws, a)
        try:
            state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=90)
            seen = (state.status, state.diagnosis, _containers(run.id))
            return run, seen, await run.teardown(grace=5)
        finally:
            await run.close()

    run, (status, diagnosis, names), report = asyncio.run(go())
    assert status == "serving", diagnosis
    assert sorted(names) == sorted(p.container for p in run.processes.values())  # one per process, all running
    assert report.clean, report.lines()
    assert _containers(run.id) == []
    assert not alive(run)
    assert _bridge() == bridge_before == False  # noqa: E712  (`--network host`: podman made no bridge)
