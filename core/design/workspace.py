"""A working set for the CLI and the console: recipe + cluster + catalog + live node inventory.

This is the facade the UI layers use to design a deployment. The live inventory is fetched by
run/inventory.py (it asks Slurm); here it is only held.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config.catalog import Catalog, load_catalog
from ..config.cluster import Cluster, load_cluster
from ..config.errors import AtomdeckError
from ..config.paths import catalog_path, find_cluster, find_recipe, sim_shim_dir
from ..config.recipe import Recipe, load_recipe
from .commands import LaunchContext, ProcessSpec, SimRuntime, render
from .inventory import Node
from .lint import Assessment, assess
from .plan import Plan


@dataclass
class Workspace:
    recipe: Recipe
    cluster: Cluster
    catalog: Catalog | None
    recipe_path: Path | None = None
    cluster_path: Path | None = None
    inventory: list[Node] = field(default_factory=list)
    inventory_note: str = ""  # e.g. "offline: node states not checked"

    def assess(self, nodes: list[str] | None = None, overrides: frozenset[str] = frozenset(),
               ctx: LaunchContext | None = None) -> Assessment:
        return assess(self.recipe, self.cluster, self.inventory, nodes, overrides, self.catalog,
                      ctx or default_context(self.cluster))


def load_workspace(recipe: str, cluster: str | None = None) -> Workspace:
    rpath = find_recipe(recipe)
    cpath = find_cluster(cluster or "local")
    cat_path = catalog_path()
    catalog = load_catalog(cat_path) if cat_path.is_file() else None
    return Workspace(load_recipe(rpath), load_cluster(cpath), catalog, rpath, cpath)


def sim_runtime(cluster: Cluster) -> SimRuntime | None:
    """The simulator's paths, when the cluster runs it (demo and lab). Speed may be overridden by env."""
    if not cluster.simulator.enabled:
        return None
    speed = cluster.simulator.speed
    override = os.environ.get("ATOMDECK_SIM_SPEED")
    if override:
        try:
            speed = float(override)
        except ValueError:
            raise AtomdeckError(f"ATOMDECK_SIM_SPEED={override!r} is not a number; set e.g. 1 or 10") from None
    return SimRuntime(shim_dir=str(sim_shim_dir()), python_bin=str(Path(sys.executable).parent), speed=speed,
                      mounts=sim_mounts() if cluster.container.runtime != "none" else ())


def sim_mounts() -> tuple[str, ...]:
    """What the simulator needs visible inside a container, at the same paths: the Python that runs it (its
    installation and the virtual environment) and atomdeck's code (the shim dir's package root). Nested
    directories are mounted once, through their parent."""
    dirs = {str(Path(p).resolve()) for p in (sys.base_prefix, sys.prefix, sim_shim_dir().parents[1])}
    return tuple(d for d in sorted(dirs) if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in dirs))


def default_context(cluster: Cluster, **kw) -> LaunchContext:
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or "atomdeck"
    login = cluster.login.host if cluster.login and cluster.launcher == "ssh" and cluster.ssh.via_login else None
    return LaunchContext(user=user, sim=sim_runtime(cluster), login=login, **kw)


def render_for_run(plan: Plan, catalog: Catalog | None, run_id: str, job_id: str | None, log_dir: str,
                   nic: Mapping[str, str] | None = None) -> list[ProcessSpec]:
    """Every process of the plan as run `run_id` starts it (a launch) or started it (a reattach: no catalog): its
    run marker, its Slurm job, its log directory, the RDMA NICs pre-flight found per node."""
    ctx = default_context(plan.cluster, run_id=run_id, job_id=job_id, log_dir=log_dir, nic=dict(nic or {}))
    return render(plan, catalog, ctx)


def offline_nodes(names: list[str]) -> list[Node]:
    """Nodes known only by name (planning without Slurm): the host is the name."""
    return [Node(name=n, addr=n, states=("IDLE",), source="offline") for n in names]
