"""Launchers start a plan's processes on nodes; see base.py for the interface."""

from __future__ import annotations

from ..config.cluster import Cluster
from ..remote.shell import LocalRunner, Runner


def control_runner(cluster: Cluster) -> Runner:
    """Where Slurm commands run: the login host over SSH if the cluster names one, else here."""
    if cluster.login is None:
        return LocalRunner()
    from ..remote.ssh.runner import ssh_runner_for_login

    return ssh_runner_for_login(cluster)
