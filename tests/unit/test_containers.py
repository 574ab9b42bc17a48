"""Teardown removes the run's containers (`docker rm -f`), as InferenceX's does: killing the `docker run`
client after the grace period leaves its container running, holding the node's GPUs.

No Docker daemon can run in this sandbox, so `docker` here is a stand-in on PATH that records its
arguments and answers with the real client's output (removed names on stdout, errors on stderr)."""

from __future__ import annotations

import asyncio
import os
import stat

from atomdeck.core.launch.local import LocalLauncher

STAND_IN = r"""#!/bin/sh
echo "$@" >> "$DOCKER_CALLS"
[ "$1 $2" = "rm -f" ] || exit 2
shift 2
rc=0
for n; do
  case $n in
    gone*) echo "Error response from daemon: No such container: $n" >&2; rc=1 ;;
    stuck*) echo "Error response from daemon: cannot remove container \"/$n\": device or resource busy" >&2; rc=1 ;;
    *) echo "$n" ;;
  esac
done
exit $rc
"""


def _with_docker(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(STAND_IN)
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_CALLS", str(calls))
    return calls


def test_containers_are_removed_per_node_and_a_gone_one_is_fine(tmp_path, monkeypatch):
    calls = _with_docker(tmp_path, monkeypatch)
    got = asyncio.run(LocalLauncher("r1", str(tmp_path)).remove_containers(
        {"n2": ["gone_decode"], "n1": ["c_prefill", "c_router"]}))
    assert got == [(True, "n1: containers removed: c_prefill, c_router"), (True, "n2: no container left")]
    assert sorted(calls.read_text().splitlines()) == ["rm -f c_prefill c_router", "rm -f gone_decode"]


def test_a_container_that_cannot_be_removed_is_reported(tmp_path, monkeypatch):
    _with_docker(tmp_path, monkeypatch)
    ((done, line),) = asyncio.run(LocalLauncher("r1", str(tmp_path)).remove_containers({"n1": ["stuck_decode"]}))
    assert not done and "docker rm -f stuck_decode failed" in line and "device or resource busy" in line


def test_the_rdma_devices_are_passed_only_for_an_rdma_kv_transfer():
    """Issue 17.10: `--device /dev/infiniband` makes docker fail on a node without it; only RDMA needs it."""
    from .helpers import LAB, lab_assess

    docker = LAB + "container: {runtime: docker}\n"
    rdma = lab_assess("image: rocm/atom:v1\n", cluster=docker)
    tcp = lab_assess("image: rocm/atom:v1\nmooncake: {protocol: tcp}\n", cluster=docker)
    agg = lab_assess("image: rocm/atom:v1\nmode: aggregate\naggregate: {workers: 1}\n", cluster=docker)
    assert all("/dev/infiniband" in p.inner for p in rdma.processes if p.role != "router")
    assert not any("/dev/infiniband" in p.inner for p in tcp.processes + agg.processes)
