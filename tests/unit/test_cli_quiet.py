"""An operator never sees a library's deprecation noise (issue 44, part 4): a verb that loads the SSH layer prints
nothing of asyncssh's on stderr, with Python's default warning filters (as `atomdeck` runs from a shell)."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml


def _quiet_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # pytest's filters stay in pytest
    return env


def test_a_verb_through_a_login_host_prints_no_deprecation_warning(tmp_path):
    """`atomdeck nodes` on a Slurm cluster asks its login host over SSH: asyncssh is loaded. The login host is
    a closed port on loopback, so the verb fails fast on the connection; its stderr says only that."""
    cluster = tmp_path / "quiet.yaml"
    cluster.write_text(yaml.safe_dump({"name": "quiet", "launcher": "slurm", "login": {"host": "127.0.0.1:1"},
                                       "gpus_per_node": 8}))
    p = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "nodes", "--cluster", str(cluster)],
                       capture_output=True, text=True, timeout=60, env=_quiet_env())
    assert "Slurm could not be asked" in p.stdout, (p.stdout, p.stderr)  # the SSH layer was used
    assert "Warning" not in p.stderr and "DSA" not in p.stderr, p.stderr
    assert p.stderr == "", p.stderr


def test_importing_the_ssh_layer_then_asyncssh_is_silent():
    """Whatever imports asyncssh after the layer (node_shell, the runner, trust) is covered; and only asyncssh's
    DSA message is filtered: the same warning from elsewhere still shows."""
    code = ("import atomdeck.core.remote.ssh, asyncssh, warnings\n"
            "from cryptography.utils import CryptographyDeprecationWarning as W\n"
            "warnings.warn('DSA is deprecated (not from asyncssh)', W)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_quiet_env())
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("DSA is deprecated") == 1 and "not from asyncssh" in p.stderr, p.stderr
