"""Which launcher a cluster's processes are started with: its `launcher` key (local, slurm, ssh). Each launcher's
module is imported only when chosen (asyncssh only for ssh and Slurm through a login host)."""

from __future__ import annotations

from ..config.cluster import Cluster
from .base import Launcher


def launcher_for(cluster: Cluster, run_id: str, run_dir: str, meta: dict | None = None) -> Launcher:
    """A launcher of `cluster` for run `run_id` (its directory `run_dir`; `meta` its run.json, which a Slurm or
    ssh launcher reads its allocation and connections' facts from when it reattaches)."""
    launcher: Launcher
    if cluster.launcher == "local":
        from .local import LocalLauncher

        launcher = LocalLauncher(run_id, run_dir)
    elif cluster.launcher == "slurm":
        from .slurm import SlurmLauncher

        launcher = SlurmLauncher(run_id, run_dir, cluster, meta or {})
    else:
        from .ssh import SshLauncher

        launcher = SshLauncher(run_id, run_dir, cluster, meta or {})
    launcher.container_runtime = cluster.container.runtime  # how its remove_containers removes the run's
    return launcher
