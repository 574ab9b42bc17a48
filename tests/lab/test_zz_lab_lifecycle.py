"""down.sh stops everything by PID and restores what up.sh touched; up.sh brings it all back and
is idempotent. Runs last in tests/lab (it takes the lab down for ~5 s and leaves it up again)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.fixtures import lab_exclusive, lab_shared
from tests.cluster.lab import NETNS_DIR, UTS_DIR, pid_alive

pytestmark = pytest.mark.lab


@pytest.fixture
def sole_user(lab):
    if not lab_exclusive():
        pytest.skip("another test session is using the lab (shared lock on $LAB/users.lock)")
    yield
    lab_shared()


def test_down_restores_everything_then_up_is_idempotent(lab, sole_user):
    run = lab.run_dir
    daemon_pids = {f.name: int(f.read_text()) for f in run.glob("*.pid")}
    assert {"slurmctld.pid", f"slurmd-{lab.drained}.pid", f"sshd-{lab.login}.pid"} <= set(daemon_pids)
    hosts_orig = (lab.root / "backup" / "hosts.orig").read_text()
    assert "atomdeck-lab BEGIN" not in hosts_orig
    slurm_orig = {f.name[: -len(".orig")]: f.read_bytes() for f in (lab.root / "backup").glob("*.conf.orig")}

    # leave work behind inside the namespaces: a running job and an SSH session on the login host
    job = lab.run(
        ["sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "sleep 300"], check=True
    ).stdout.strip()
    client = subprocess.Popen(
        lab.ssh_argv(lab.login, "echo ready; sleep 120"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert client.stdout.readline().strip() == "ready"
        left_behind = set()
        for host in lab.hosts:
            left_behind |= set(lab.netns_pids(host))
        assert len(left_behind) > len(lab.hosts)  # more than the daemons

        t0 = time.monotonic()
        down = lab.down()
        took = time.monotonic() - t0
        assert down.returncode == 0, down.stderr
        print(f"down.sh took {took:.1f}s; job {job} was running")

        alive = [p for p in set(daemon_pids.values()) | left_behind if pid_alive(p)]
        assert alive == [], f"still alive after down.sh: {alive}"
        assert client.wait(timeout=10) != 0
        for host in lab.hosts:
            assert not (NETNS_DIR / host).exists() and not (UTS_DIR / host).exists()
        assert lab.run(["ip", "link", "show", lab.bridge]).returncode != 0
        assert Path("/etc/hosts").read_text() == hosts_orig
        for name in ("slurm.conf", "gres.conf", "slurmdbd.conf"):
            f = Path("/etc/slurm") / name
            if name in slurm_orig:
                assert f.read_bytes() == slurm_orig[name]
            else:
                assert not f.exists() or "atomdeck-lab" not in f.read_text()
        assert not list(run.glob("*.pid")) and not (run / "up.ok").exists()

        again = lab.down()
        assert again.returncode == 0 and "nothing to do" in again.stdout
    finally:
        client.kill()
        client.wait()
        t0 = time.monotonic()
        up = lab.up()
        took_up = time.monotonic() - t0
    assert up.returncode == 0, up.stdout + up.stderr
    assert lab.problem() is None
    print(f"up.sh (packages installed) took {took_up:.1f}s")

    warm = lab.up()
    assert warm.returncode == 0 and "already up and healthy" in warm.stdout  # the fast path, nothing redone
