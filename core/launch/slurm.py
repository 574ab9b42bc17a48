"""The Slurm launcher: an allocation, one `srun --overlap` step per process, scancel to stop."""

from __future__ import annotations

from ..cluster import Cluster
from ..errors import AtomdeckError
from ..inventory import Node, parse_scontrol_nodes
from . import control_runner


async def query_nodes(cluster: Cluster) -> list[Node]:
    """The live node inventory from `scontrol show node -o` (run where Slurm commands run)."""
    runner = control_runner(cluster)
    try:
        res = await runner.run(["scontrol", "show", "node", "-o"], timeout=20)
    finally:
        await runner.close()
    if not res.ok:
        raise AtomdeckError(f"scontrol on {runner.where}: {res.explain()}")
    return parse_scontrol_nodes(res.stdout)
