"""Make ``atomdeck.sim`` importable for the shims, installed or straight from a checkout."""

import importlib.util
import os
import sys
import types
from pathlib import Path


def ensure() -> None:
    nice = os.environ.get("ATOMSIM_NICE", "").strip()
    if nice.lstrip("-").isdigit():  # before the heavy imports: a benchmark's engines yield the CPU from the start
        try:
            os.nice(int(nice))
        except OSError:
            pass
        # With the kernel's autogroups (sched_autogroup_enabled) each session is a scheduling group of its
        # own, and a nice value only ranks the processes inside it: the group's own nice value is what
        # yields to the console. (A local launch's simulators share their starter's session; before
        # 2026-12-03 each had a session of its own, and 129 sessions took 129 shares against the console's.)
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(nice)
        except OSError:
            pass
    cpus = os.environ.get("ATOMSIM_CPUS", "").strip()
    if cpus:  # a benchmark's engines on CPUs of their own, as on the nodes of a cluster ("1" or "1,2")
        try:
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        except (OSError, ValueError):
            pass
    try:
        import atomdeck.sim  # noqa: F401
        return
    except ModuleNotFoundError as e:
        if e.name not in ("atomdeck", "atomdeck.sim"):
            raise
    sim_dir = Path(__file__).resolve().parent.parent
    parent = sys.modules.get("atomdeck") or types.ModuleType("atomdeck")
    if not hasattr(parent, "__path__"):
        parent.__path__ = []
    sys.modules["atomdeck"] = parent
    spec = importlib.util.spec_from_file_location(
        "atomdeck.sim", sim_dir / "__init__.py", submodule_search_locations=[str(sim_dir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["atomdeck.sim"] = module
    spec.loader.exec_module(module)
