"""The simulator's `docker` stand-in (sim/shim/docker): an image is a directory; `docker run` shows only the
image's files and the host OS, applies --ulimit/-e/--device like Docker, and fails the way Docker fails."""

from __future__ import annotations

import os
import resource
import subprocess

from atomdeck.sim import SHIM_DIR

DOCKER = str(SHIM_DIR / "docker" / "docker")


def docker(tmp_path, *args):
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "ATOMSIM_DOCKER_IMAGES": str(tmp_path / "images"), "TMPDIR": str(tmp_path / "tmp")}
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=60, env=env)


def test_run_shows_the_image_not_the_host(tmp_path):
    img = tmp_path / "images" / "lab_atom_v1"
    (img / "rootfs" / "opt" / "mooncake").mkdir(parents=True)
    (img / "env").write_text("LD_LIBRARY_PATH=/opt/mooncake\n")
    (tmp_path / "on-host").mkdir()
    r = docker(tmp_path, "run", "--rm", "--entrypoint", "", "-e", "X=1", "--ulimit", "nofile=4096:4096",
               "--ulimit", "nofile=2048:4096", "lab/atom:v1", "sh", "-c",
               f'echo "$LD_LIBRARY_PATH $X $(ulimit -n) $(ulimit -Hn)"; [ -d /opt/mooncake ] && echo image; '
               f'[ -d {tmp_path}/on-host ] || echo no-host; ls /dev/infiniband 2>/dev/null || echo no-ib; exit 3')
    assert r.returncode == 3, r.stderr
    assert r.stdout.split("\n")[:4] == ["/opt/mooncake 1 2048 4096", "image", "no-host", "no-ib"]
    assert os.listdir(tmp_path / "tmp") == []  # the container's root is gone


def test_run_fails_like_docker(tmp_path):
    (tmp_path / "images" / "lab_atom_v1" / "rootfs").mkdir(parents=True)
    r = docker(tmp_path, "run", "--rm", "lab/atom:v2", "true")
    assert r.returncode == 125 and "Unable to find image 'lab/atom:v2' locally" in r.stderr
    r = docker(tmp_path, "run", "--rm", "--device", "/dev/no-such-device", "lab/atom:v1", "true")
    assert r.returncode == 125 and 'adding custom device "/dev/no-such-device"' in r.stderr
    r = docker(tmp_path, "run", "--rm", "lab/atom:v1", "no-such-program")
    assert r.returncode == 127 and 'exec: "no-such-program": executable file not found' in r.stderr
    r = docker(tmp_path, "run", "--rm", "--bogus", "lab/atom:v1", "true")
    assert r.returncode == 125 and "unknown flag: --bogus" in r.stderr
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1048576 and os.geteuid() == 0:
        r = docker(tmp_path, "run", "--rm", "--ulimit", "nofile=1048576:1048576", "lab/atom:v1", "true")
        can_raise = subprocess.run(["sh", "-c", "ulimit -Hn 1048576"], capture_output=True).returncode == 0
        assert (r.returncode == 0) == can_raise
        if not can_raise:
            assert "error setting rlimit type 7: operation not permitted" in r.stderr
    assert docker(tmp_path, "info").returncode == 0
    r = docker(tmp_path, "rm", "-f", "c1")
    assert r.returncode == 1 and "No such container: c1" in r.stderr
