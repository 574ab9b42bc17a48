"""An allocation held for several runs in turn (the layout search: measure/layouts.py): on a Slurm cluster one
holding job for the nodes, each run started in it as `atomdeck up --job` does (a run given a job leaves it running
when torn down), and the job released at the end. Other launchers hold nothing (None).

The holding job and its release are the Slurm launcher's own (launch/slurm.py: `sbatch --wrap 'exec sleep
infinity'`, and the release script that sweeps the nodes and cancels the job), under the search's id as the "run".
"""

from __future__ import annotations

from collections.abc import Callable

from ..config.clusters import load as load_cluster


async def hold_nodes(cluster_name: str, nodes: list[str], owner: str, directory: str,
                     say: Callable[[str], None] | None = None) -> str | None:
    """A running Slurm job holding `nodes` (its id), or None when the cluster is not Slurm."""
    cluster = load_cluster(cluster_name)[0]  # a name of the clusters file too
    if cluster.launcher != "slurm":
        return None
    from ..launch.slurm import SlurmLauncher

    launcher = SlurmLauncher(owner, directory, cluster, {})
    launcher.on_progress = say
    try:
        await launcher._submit(nodes)  # the launch's own allocation step (the search is its "run")
    except BaseException:
        await launcher.release()
        raise
    finally:
        await launcher.close()
    return launcher.job_id


async def release_hold(cluster_name: str, job_id: str, owner: str, directory: str) -> list[str]:
    """Cancel a job hold_nodes made; what was done, in words."""
    cluster = load_cluster(cluster_name)[0]  # a name of the clusters file too
    from ..launch.slurm import SlurmLauncher

    launcher = SlurmLauncher(owner, directory, cluster, {"job_id": job_id, "job_owned": True})
    try:
        return await launcher.release()
    finally:
        await launcher.close()
