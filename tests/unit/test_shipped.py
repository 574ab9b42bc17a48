"""Every shipped cluster loads, and every shipped recipe lints clean on the clusters it is meant for."""

from __future__ import annotations

import pytest
from atomdeck.core.config.catalog import load_catalog
from atomdeck.core.config.cluster import load_cluster
from atomdeck.core.config.paths import catalog_path, shipped_clusters, shipped_recipes
from atomdeck.core.config.recipe import load_recipe
from atomdeck.core.design.commands import LaunchContext
from atomdeck.core.design.inventory import Node
from atomdeck.core.design.lint import assess


@pytest.mark.parametrize("path", shipped_clusters(), ids=lambda p: p.stem)
def test_shipped_clusters_load(path):
    c = load_cluster(path)
    assert c.name == path.stem
    if c.launcher in ("local", "ssh"):
        assert c.static_inventory()
    if c.name in ("mia1", "lab", "lab-ssh"):
        rule = c.exclusion("mia1-p01-g37")
        assert rule is not None and "drained" in rule.reason


def _inventory(cluster):
    if cluster.launcher == "slurm":  # offline: four healthy nodes by name, and g37 drained
        return [Node(f"mia1-p01-g0{i}", f"10.1.0.{i}", ("IDLE",), 8) for i in range(1, 5)] + \
            [Node("mia1-p01-g37", "10.1.0.37", ("IDLE", "DRAIN"), 8, reason="Not responding")]
    return cluster.static_inventory()


@pytest.mark.parametrize("recipe", shipped_recipes(), ids=lambda p: p.stem)
@pytest.mark.parametrize("cluster", shipped_clusters(), ids=lambda p: p.stem)
def test_shipped_recipes_lint_on_shipped_clusters(recipe, cluster):
    r, c = load_recipe(recipe), load_cluster(cluster)
    a = assess(r, c, _inventory(c), None, frozenset(), load_catalog(catalog_path()), LaunchContext())
    demo = r.name.startswith("demo")
    if demo or c.name == "mia1":
        assert a.ok, [str(f) for f in a.findings]
        assert "mia1-p01-g37" not in a.plan.selection.all()
    else:  # a production recipe on a simulated cluster still plans; nothing it runs there is real
        assert a.plan is not None
