"""The Slurm launcher with pyxis (container.runtime: pyxis): each node's step runs in the run's enroot container
on that node (the step's srun gets the processes' --container-* options: slurm_node.py), named by
container.pyxis.name. Here: those names for this run before pre-flight (which creates the containers when it
checks the image on every node), and their removal, verified on every node, at teardown or when the launch does
not go ahead (scripts/pyxis-clean.sh).

`PyxisSteps` is a part of `SlurmLauncher` (slurm.py), which holds the cluster, the job and the steps.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from ..config.cluster import Cluster
from ..design.commands import ProcessSpec
from ..design.container import pyxis_name, renamed
from ..remote.shell import Result
from .base import script

PYXIS_CLEAN_SCRIPT = script("pyxis-clean")  # remove the run's enroot containers on a node and verify none is left


class PyxisSteps:
    """The run's pyxis containers: named for the run, removed and verified gone (mixed into SlurmLauncher)."""

    cluster: Cluster
    run_id: str
    job_id: str | None

    if TYPE_CHECKING:  # SlurmLauncher's and LauncherBase's
        async def node_run(self, node: str, argv: list[str], timeout: float = 60) -> Result: ...
        def _say(self, what: str) -> None: ...

    def _named_for_this_run(self, plan, processes: list[ProcessSpec]) -> list[ProcessSpec]:
        """The processes as planned before the launch (run "RUN", no job) with this run's pyxis container
        names, which the run's own steps will use: the image check creates each node's container for them."""
        if not any(p.step_options for p in processes):
            return processes
        from ..design.workspace import default_context

        user = default_context(plan.cluster).user
        out = []
        for p in processes:
            name = pyxis_name(plan, p.node, self.run_id, self.job_id, user) if p.step_options else None
            out.append(replace(p, step_options=renamed(p.step_options, name), container=name) if name else p)
        return out

    async def _remove_pyxis_after_preflight(self, processes: list[ProcessSpec]) -> None:
        """A launch refused (or interrupted) after pre-flight made the run's named containers (its image check
        imports the image on every node): remove them, or they outlive the run."""
        by_node: dict[str, list[str]] = {}
        for p in processes:
            if p.step_options and p.container and p.container not in by_node.get(p.node, []):
                by_node.setdefault(p.node, []).append(p.container)
        if by_node and self.job_id:
            try:
                for ok, line in await self.remove_containers(by_node):
                    self._say(line if ok else f"left behind: {line}")
            except Exception as e:  # the refusal is what the operator must see; this is told on the side
                self._say(f"could not remove the run's containers: {e}")

    async def remove_containers(self, by_node: dict[str, list[str]]) -> list[tuple[bool, str]]:
        """pyxis: on every node one step (outside any container) removes the run's named enroot containers and
        verifies that no container and no pyxis runtime file of the run is left (scripts/pyxis-clean.sh).
        docker, podman: `rm -f` (base)."""
        if self.cluster.container.runtime != "pyxis":
            return await super().remove_containers(by_node)  # type: ignore[misc]
        px = self.cluster.container.pyxis

        async def one(node: str, names: list[str]) -> tuple[bool, str]:
            names = list(dict.fromkeys(names))
            try:
                res = await self.node_run(node, ["sh", "-c", PYXIS_CLEAN_SCRIPT, "pyxis-clean", px.enroot,
                                                 px.runtime_path, str(self.job_id), *names])
            except Exception as e:
                return False, f"{node}: could not check the run's enroot containers: {e}"
            said = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
            removed = [ln.split()[1] for ln in said if ln.startswith("removed ")]
            problems = [ln for ln in said if ln.startswith(("failed ", "left ", "error "))]
            if "clean" in said and not problems:
                return True, (f"{node}: enroot containers removed: {', '.join(removed)}; none of the run is left"
                              if removed else f"{node}: no enroot container of the run left")
            if not said:
                return False, f"{node}: the container check did not run: {res.explain()}"
            left = [ln.split()[2] for ln in problems if ln.startswith("left container ")]
            hint = f"; remove it on {node} with `{px.enroot} remove -f {' '.join(left)}`" if left else ""
            where = f"enroot {px.enroot}, pyxis runtime_path {px.runtime_path}"
            return False, f"{node}: {'; '.join(problems)} ({where}){hint}"

        return list(await asyncio.gather(*(one(n, names) for n, names in sorted(by_node.items()))))

