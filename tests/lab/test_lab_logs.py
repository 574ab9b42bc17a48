"""Remote logs through the login host (issue 17.6 and 17.9): `logs` and `status` read to the end of the file
however long the connection takes, and a coloured line reads the same as it would locally."""

from __future__ import annotations

import contextlib
import json

import pytest

from .runhelpers import cli, serve, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]

MARK = "ERROR coloured marker line"


@contextlib.contextmanager
def slow_link(lab, host: str, rate: str = "24kbit"):
    """Throttle every packet to `host` (a token bucket on its veth): an SSH connect through it, a few
    kilobytes of key exchange and login, takes longer than the quiet spell the old readers stopped after."""
    dev = lab.veth(host)
    lab.run(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "1600", "latency", "20s"],
            check=True, timeout=10)
    try:
        yield
    finally:
        lab.run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=10)


@pytest.mark.parametrize("cluster", ["lab-login", "lab-ssh"])
def test_logs_and_status_read_remote_logs_to_the_end_through_a_slow_login_host(lab, cluster):
    run, state = serve(workspace("demo-1p1d", cluster))
    try:
        assert state.status == "serving", state.diagnosis
        h = run.handles["prefill-0"]
        lab.node_exec(h.node, ["sh", "-c", f"printf '\\033[31mERROR\\033[0m coloured marker line\\n' >> {h.log_path}"],
                      check=True)
        with slow_link(lab, "mia1-login"):
            logs = cli("logs", run.id, "--process", "prefill-0")
            status = cli("status", run.id, "--json")
        assert logs.returncode == 0, logs.stderr
        lines = logs.stdout.splitlines()
        assert lines and lines[-1] == MARK, lines[-3:]
        assert "\\x1b" not in logs.stdout and "\x1b" not in logs.stdout
        assert status.returncode == 0, status.stderr
        last = json.loads(status.stdout)["processes"]["prefill-0"]["last_lines"]
        assert last and last[-1] == MARK, last[-3:]
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
