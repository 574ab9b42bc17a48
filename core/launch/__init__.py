"""Launchers start a plan's processes on nodes: local.py, ssh.py, slurm.py; the `Launcher` Protocol
the run engine depends on and `LauncherBase` are in base.py, their shell scripts in scripts/*.sh
(package data). Uses remote/ and the pure packages; never run/, measure/ or cli/."""

from __future__ import annotations

from ..config.cluster import Cluster
from ..remote.shell import LocalRunner, Runner


def control_runner(cluster: Cluster) -> Runner:
    """Where Slurm commands run: the login host over SSH if the cluster names one, else here."""
    if cluster.login is None:
        return LocalRunner()
    from ..remote.ssh.runner import ssh_runner_for_login

    return ssh_runner_for_login(cluster)
