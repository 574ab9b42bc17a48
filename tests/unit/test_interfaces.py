"""The interfaces the layers depend on are typing.Protocols (checked by mypy in test_style), and every
implementation fits its Protocol: launchers, engines and routers, node shells."""

from __future__ import annotations

import inspect

from atomdeck.core.config.cluster import Cluster
from atomdeck.core.engines import ENGINES, FRONTENDS, Engine, Frontend, engine, frontend, known
from atomdeck.core.launch.base import Launcher, LauncherBase
from atomdeck.core.launch.local import LocalLauncher
from atomdeck.core.launch.slurm import SlurmLauncher
from atomdeck.core.launch.ssh import SshLauncher
from atomdeck.core.remote.node_shell import NodeShell, RemoteShell
from atomdeck.core.remote.shell import LocalRunner
from atomdeck.core.run.run import make_launcher


def protocol_members(proto: type) -> set[str]:
    return {n for n in proto.__dict__ if not n.startswith("_")} | set(getattr(proto, "__annotations__", {}))


def test_the_interfaces_are_protocols():
    for proto in (Launcher, Engine, Frontend, NodeShell):
        assert getattr(proto, "_is_protocol", False), proto


def test_every_launcher_fits_the_launcher_protocol(tmp_path):
    for cls in (LocalLauncher, SshLauncher, SlurmLauncher):
        assert issubclass(cls, LauncherBase)
        attributes = {"kind", "on_facts", "on_progress", "on_started",  # (set per instance: make_launcher, Run.launch)
                      "container_runtime"}
        missing = [m for m in protocol_members(Launcher) - attributes if not callable(getattr(cls, m, None))]
        assert not missing, (cls, missing)
        for m in protocol_members(Launcher) - attributes:
            want = inspect.iscoroutinefunction(getattr(Launcher, m))
            assert inspect.iscoroutinefunction(getattr(cls, m)) == want, (cls, m)
    launcher = make_launcher(Cluster(name="here", launcher="local"), "r1", str(tmp_path))
    assert isinstance(launcher, Launcher) and launcher.kind == "local"
    assert launcher.on_facts is not None and launcher.on_progress is None  # Run.launch gives the listeners
    assert launcher.on_started is None


def test_every_registered_engine_and_router_fits_its_protocol():
    engines, routers = known()
    assert engines and routers
    for name in engines:
        e = engine(name)
        assert isinstance(e, ENGINES[name]) and e.name == name and e.command
        assert all(callable(getattr(e, m)) for m in ("options", "argv", "env"))
    for name in routers:
        f = frontend(name)
        assert isinstance(f, FRONTENDS[name]) and f.name == name and f.backend in engines


def test_node_shells_fit_the_node_shell_protocol():
    assert isinstance(RemoteShell(LocalRunner()), NodeShell)
    assert isinstance(LocalRunner(), NodeShell)
