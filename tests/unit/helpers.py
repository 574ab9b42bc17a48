"""Small builders for core tests."""

from __future__ import annotations

from atomdeck.core.config.catalog import load_catalog
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.paths import catalog_path
from atomdeck.core.config.recipe import parse_recipe
from atomdeck.core.design.commands import LaunchContext, SimRuntime
from atomdeck.core.design.inventory import parse_scontrol_nodes
from atomdeck.core.design.lint import assess

from tests.conftest import DATA

SIM = SimRuntime(shim_dir="/SHIM", python_bin="/PYBIN", speed=1.0)

LAB = """
name: labtest
launcher: slurm
gpus_per_node: 8
exclude:
  - {node: mia1-p01-g37, reason: "persistently drained, not responding"}
"""


def lab_inventory(degraded: bool = False):
    name = "scontrol-show-node-oneliner-degraded.txt" if degraded else "scontrol-show-node-oneliner.txt"
    return parse_scontrol_nodes((DATA / "slurm-captures" / name).read_text())


def recipe(extra: str = "", model: str = "deepseek-ai/DeepSeek-V4-Pro"):
    return parse_recipe(f"name: t\nmodel: {{path: {model}}}\n" + extra)


def lab_assess(extra: str = "", nodes=None, overrides=frozenset(), cluster: str = LAB, ctx=None,
               model: str = "deepseek-ai/DeepSeek-V4-Pro", **kw):
    return assess(recipe(extra, model), parse_cluster(cluster), lab_inventory(kw.pop("degraded", False)), nodes,
                  frozenset(overrides), load_catalog(catalog_path()), ctx or LaunchContext(), **kw)
