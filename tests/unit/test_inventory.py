"""Node inventory parsed from real Slurm 22.05 output captured on the lab cluster."""

from __future__ import annotations

import pytest
from atomdeck.core.design.inventory import (
    expand_hostlist,
    gpus_from_gres,
    parse_scontrol_nodes,
)

from tests.conftest import DATA

CAP = DATA / "slurm-captures"


def by_name(nodes):
    return {n.name: n for n in nodes}


@pytest.mark.parametrize("fname", ["scontrol-show-node.txt", "scontrol-show-node-oneliner.txt"])
def test_scontrol_healthy(fname):
    nodes = by_name(parse_scontrol_nodes((CAP / fname).read_text()))
    assert sorted(nodes) == ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03", "mia1-p01-g04", "mia1-p01-g37"]
    g01 = nodes["mia1-p01-g01"]
    assert (g01.addr, g01.states, g01.gpus, g01.partitions, g01.reason) == ("10.77.0.11", ("MIXED",), 8, ("gpu",), "")
    assert g01.healthy
    g37 = nodes["mia1-p01-g37"]
    assert g37.states == ("IDLE", "DRAIN") and not g37.healthy
    assert g37.reason == "lab: simulated bad node"  # the [user@time] stamp is dropped
    assert g37.why_unhealthy() == "drained: lab: simulated bad node"


@pytest.mark.parametrize("fname", ["scontrol-show-node-degraded.txt", "scontrol-show-node-oneliner-degraded.txt"])
def test_scontrol_degraded(fname):
    nodes = by_name(parse_scontrol_nodes((CAP / fname).read_text()))
    g03, g04 = nodes["mia1-p01-g03"], nodes["mia1-p01-g04"]
    assert g03.states == ("DOWN", "NOT_RESPONDING")
    assert g03.why_unhealthy() == "down, not responding: Not responding"
    assert g04.states == ("IDLE", "DRAIN") and g04.reason == "gpu memory not released"
    assert [n for n, v in nodes.items() if v.healthy] == ["mia1-p01-g01", "mia1-p01-g02"]


def test_gres_forms():
    assert gpus_from_gres("gpu:8") == 8
    assert gpus_from_gres("gpu:mi355x:8(S:0-1)") == 8
    assert gpus_from_gres("gpu:a:4,gpu:b:4") == 8
    assert gpus_from_gres("(null)") == 0


def test_hostlists():
    assert expand_hostlist("mia1-p01-g[01-02,04]") == ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g04"]
    assert expand_hostlist("a1,b[9-10]") == ["a1", "b9", "b10"]
