"""The live node inventory: Slurm's view of the cluster's nodes, or the cluster file's list."""

from __future__ import annotations

from ..config.cluster import Cluster
from ..config.errors import AtomdeckError
from ..design.inventory import Node


async def fetch_inventory(cluster: Cluster, offline: bool = False) -> tuple[list[Node], str]:
    """(nodes, note). Slurm clusters ask Slurm; if Slurm cannot be reached, fall back to the file's list."""
    static = cluster.static_inventory()
    if cluster.launcher != "slurm" or offline:
        note = "offline: node states from the cluster file, not checked" if cluster.launcher == "slurm" else ""
        return static, note
    from ..launch.slurm import query_nodes  # here, not at the top: the console imports this module and stays light

    try:
        nodes = await query_nodes(cluster)
    except AtomdeckError as e:
        return static, f"Slurm could not be asked ({e}); showing the cluster file's nodes"
    if cluster.partition:
        nodes = [n for n in nodes if not n.partitions or cluster.partition in n.partitions]
    return nodes, ""
