"""The lab plugin's own rules, checked without needing the lab."""

from __future__ import annotations

import os

import pytest

from tests.cluster.fixtures import lab_required_outcome
from tests.cluster.lab import Lab, read_env


def test_unavailable_lab_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no root here"):
        lab_required_outcome("no root here")


def test_unavailable_lab_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required under CI=true.*no root here"):
        lab_required_outcome("no root here")


def test_detect_says_why_not(tmp_path):
    status = Lab.detect(tmp_path / "nowhere")
    assert not status.ok and not bool(status)
    if os.geteuid() == 0:
        assert "lab not up" in status.reason and "up.sh" in status.reason
    else:
        assert status.reason.startswith("not root")


def test_lab_env_shape():
    env = read_env()
    lab = Lab.from_env("/nonexistent")
    assert lab.node_names == ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03", "mia1-p01-g04", "mia1-p01-g37"]
    assert lab.healthy_nodes == lab.node_names[:4] and lab.drained == "mia1-p01-g37"
    assert (lab.login, lab.login_ip, lab.host_ip) == ("mia1-login", "10.77.0.2", "10.77.0.1")
    assert lab.nodes["mia1-p01-g37"] == "10.77.0.37"
    assert lab.veth("mia1-p01-g01") == "adl-g01" and lab.veth("mia1-login") == "adl-login"
    assert lab.gpus_per_node == int(env["LAB_GPUS_PER_NODE"]) == 8
    assert all(ip.startswith("10.77.0.") for ip in lab.nodes.values())  # the lab's own /24 only
