"""The node's side of a full disk (issue 44, part 1) and the SSH layer's noise (part 4), on the lab.

The lab's nodes share this machine's filesystem, so a small tmpfs this test mounts is the SSH launcher's run
directory on every node (the cluster's `remote_dir`); filled until the kernel says ENOSPC, the processes' logs
there can no longer grow, and `atomdeck status` names the node, the directory, its filesystem and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fullfs import fill, small_tmpfs

from .runhelpers import cli, serve, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_a_full_run_directory_on_the_nodes_is_named_with_the_node_and_the_path(lab, tmp_path):
    with small_tmpfs(tmp_path / "node-runs", "16m") as fs:
        ws = workspace("demo-1p1d", "lab-ssh")
        ws.cluster = ws.cluster.model_copy(update={"remote_dir": str(fs)})
        run, state = serve(ws)
        try:
            assert state.status == "serving", state.diagnosis
            fill(fs)
            status = cli("status", run.id)
            assert status.returncode == 0, status.stderr
            assert "Traceback" not in status.stdout + status.stderr
            said = status.stdout.split("storage:", 1)[1]
            for name in ("prefill-0", "decode-0"):
                h = run.handles[name]
                d = os.path.dirname(h.log_path)
                assert d.startswith(str(fs)), h.log_path
                assert f"on {h.node}, the log directory {d} (filesystem {fs}, 0 bytes free) cannot be written since " \
                    in said, said
                assert f"(No space left on device): the log lines of {name}" in said, said
                assert f"Fix: free space on {fs} (`df -h {fs}`) on {h.node}" in said, said
            js = json.loads(cli("status", run.id, "--json").stdout)
            h = run.handles["decode-0"]
            assert f"{h.node}:{os.path.dirname(h.log_path)}" in js["storage"]["problems"]
        finally:
            (fs / "filler").unlink(missing_ok=True)
            report = teardown(run.id)
        assert report.clean, report.lines()


def test_a_verb_through_the_labs_login_host_has_a_clean_stderr(lab):
    """`atomdeck nodes` on the lab's Slurm cluster asks sinfo through the login host over SSH (asyncssh loaded),
    with Python's default warning filters, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    p = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "nodes", "--cluster", "lab"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "mia1-p01-g01" in p.stdout and "could not be asked" not in p.stdout, p.stdout
    assert p.stderr == "", p.stderr
