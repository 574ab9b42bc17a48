"""Inputs that used to crash or mislead (issue 17.8): list keys, SSH addresses, explicit ports, a broken console."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from atomdeck.core.config.cluster import parse_cluster, parse_ssh_address
from atomdeck.core.config.errors import ConfigError
from atomdeck.core.config.recipe import parse_recipe
from atomdeck.core.remote.ssh.runner import ssh_runner_for_login, ssh_runner_for_node
from atomdeck.core.remote.ssh.target import SshConfigError, SshTarget

LOGIN = "name: c\nlauncher: slurm\nlogin:\n  host: mia1-login\n"


def test_a_list_as_a_recipe_key_is_a_config_error_with_its_line():
    with pytest.raises(ConfigError) as e:
        parse_recipe("name: t\nmodel: {path: m}\nprefill:\n  ? [a, b]\n  : 1\n", "r.yaml")
    (issue,) = e.value.issues
    assert str(issue) == "r.yaml:4: (top level): is not valid YAML: a key must be a name, not a list; " \
                         "write it as `name: value`"


@pytest.mark.parametrize("jump,why", [("host:22x", "must be a number from 1 to 65535, got '22x'"),
                                      ("host:0", "got '0'"), ("http://host", "is not an SSH address"),
                                      ("user@", "cannot read the SSH host"), ("[::1", "as [addr]:port")])
def test_a_bad_jump_host_is_refused_when_the_cluster_file_loads(jump, why):
    with pytest.raises(ConfigError) as e:
        parse_cluster(LOGIN + f"  jump: '{jump}'\n", "c.yaml")
    (issue,) = e.value.issues
    assert issue.path == "login.jump" and issue.line == 5 and why in issue.message, str(issue)


@pytest.mark.parametrize("spec,parsed", [("ssh://ops@bastion:2200", ("ops", "bastion", 2200)),
                                         ("ssh://bastion", (None, "bastion", None)),
                                         ("ops@bastion:22", ("ops", "bastion", 22)),
                                         ("[fd00::1]:2222", (None, "fd00::1", 2222)),
                                         ("fd00::1", (None, "fd00::1", None))])
def test_ssh_addresses_are_read_in_every_usual_form(spec, parsed):
    assert parse_ssh_address(spec) == parsed
    t = SshTarget.parse(spec)
    assert (t.user, t.host, t.port) == parsed
    c = parse_cluster(LOGIN + f"  jump: '{spec}'\n")
    assert ssh_runner_for_login(c).target.jump.host == parsed[1]


def test_target_parse_still_raises_the_ssh_error():
    with pytest.raises(SshConfigError, match="got '22x'"):
        SshTarget.parse("host:22x")


def test_an_explicit_port_22_is_kept_so_it_overrides_the_ssh_config():
    c = parse_cluster(LOGIN + "  port: 22\nssh: {port: 22}\n")
    assert ssh_runner_for_login(c).target.port == 22
    assert ssh_runner_for_node(c, "n1").target.port == 22
    unset = parse_cluster(LOGIN)
    assert ssh_runner_for_login(unset).target.port is None  # the ssh config's Port applies


def test_a_broken_console_import_fails_loudly(tmp_path):
    """The tui verb never falls back to printing a plan: an import error is a traceback and a non-zero exit."""
    boot = textwrap.dedent("""
        import sys
        class Broken:
            def find_spec(self, name, path=None, target=None):
                if name == "atomdeck.tui.app":
                    raise ImportError("textual is broken here")
        sys.meta_path.insert(0, Broken())
        from atomdeck.core.cli.main import main
        sys.exit(main(["tui", "--offline"]))
    """)
    p = subprocess.run([sys.executable, "-c", boot], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode != 0
    assert "ImportError: textual is broken here" in p.stderr
    assert p.stdout == ""  # no plan printed in its place
