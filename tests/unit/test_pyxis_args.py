"""Every srun argv atomdeck plans for pyxis passes pyxis's own option table and argument rules.

The table is read at test time from pyxis's args.c inside the vendored archive (../shared/vendor, or
ATOMDECK_VENDOR_DIR): the `spank_opts[]` entries (name, argument or none) of NVIDIA/pyxis v0.24.0, never a copy
checked in here, so the test checks against the source the lab builds and cannot drift from it. The argument
rules are those of args.c's option callbacks (mount format and sources, --container-name flags, the --[no-]
pairs that may not both be given, one value per single-valued option). CI has the archive (the lab needs it);
without it the test fails saying where it looked."""

from __future__ import annotations

import os
import re
import tarfile
from functools import cache
from pathlib import Path

import pytest
import yaml
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.paths import find_cluster, shipped_recipes
from atomdeck.core.config.recipe import load_recipe
from atomdeck.core.design.commands import LaunchContext, SimRuntime
from atomdeck.core.design.container import with_mount
from atomdeck.core.design.inventory import Node
from atomdeck.core.design.lint import assess
from atomdeck.core.remote.engine_flags import help_command
from atomdeck.core.remote.preflight import image_checks_for

from tests.conftest import ROOT

PYXIS_TGZ = "pyxis-v0.24.0-1075199.tar.gz"


def vendor_dir() -> Path:
    """Where the lab's setup finds the archives (tests/cluster/pyxis.sh: the same rule)."""
    return Path(os.environ.get("ATOMDECK_VENDOR_DIR") or ROOT.parent / "shared" / "vendor")


@cache
def option_table() -> dict[str, bool]:
    """name -> takes an argument, from args.c's `struct spank_option spank_opts[]`."""
    path = vendor_dir() / PYXIS_TGZ
    if not path.is_file():
        pytest.fail(f"pyxis's archive {path} is missing (set ATOMDECK_VENDOR_DIR to the directory holding {PYXIS_TGZ})")
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/args.c"))
        text = tar.extractfile(member).read().decode()
    body = text[text.index("struct spank_option spank_opts[]"):text.index("SPANK_OPTIONS_TABLE_END")]
    # each entry: { "name", "arginfo" | NULL, "usage" "usage"..., has_arg, val, callback }
    entries = re.findall(r'\{\s*"([a-z-]+)",\s*(NULL|"[^"]*"),.*?,\s*([01]),\s*(-?\d+),\s*spank_option_\w+\s*\}', body,
                         re.S)
    table = {name: has_arg == "1" for name, _info, has_arg, _val in entries}
    assert len(table) == body.count("spank_option_"), "every entry of args.c's table was read"
    return table


CONFLICTS = [("container-mount-home", "no-container-mount-home"), ("container-remap-root", "no-container-remap-root"),
             ("container-entrypoint", "no-container-entrypoint"), ("container-writable", "container-readonly")]


def check_pyxis_options(argv: list[str]) -> list[str]:
    """The pyxis options of an srun argv (up to its command), checked as args.c would: [] when all pass."""
    table = option_table()
    errors: list[str] = []
    seen: dict[str, str | None] = {}
    i = 1 if argv and argv[0] == "srun" else 0
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        name, eq, value = word[2:].partition("=")
        if "container" not in name:  # srun's own option; these take the next word as their value
            i += 2 if word in ("--jobid", "-w", "--nodelist", "-N", "-n") else 1
            continue
        i += 1
        if name not in table:
            errors.append(f"{word}: not an option of pyxis")
            continue
        if table[name] and not value:
            errors.append(f"{word}: pyxis needs an argument (atomdeck writes --{name}=VALUE)")
        if not table[name] and eq:
            errors.append(f"{word}: pyxis's --{name} takes no argument")
        if name in seen and seen[name] != value:
            errors.append(f"{word}: given twice with different values (pyxis: specified multiple times)")
        seen[name] = value if eq else None
        if name == "container-mounts":
            for m in value.split(","):
                src, _, rest = m.partition(":")
                dst = rest.split(":", 1)[0] if rest else src
                if not src or not dst:
                    errors.append(f"{m}: --container-mounts: invalid format")
                elif not (src[:1] in "./" or src in ("tmpfs", "umount")):
                    errors.append(f"{m}: mount source must be a relative path, an absolute path, tmpfs or umount")
                elif dst[:1] not in "./":
                    errors.append(f"{m}: mount target must be a relative path or an absolute path")
        if name == "container-name":
            base, _, flag = value.partition(":")
            if not base or flag not in ("", "auto", "create", "exec", "no_exec"):
                errors.append(f"{word}: a name, and a flag of auto, create, exec or no_exec")
        if name == "container-unshare" and not set(value.split(",")) <= {"net", "ipc", "uts"}:
            errors.append(f"{word}: namespaces are net, ipc, uts")
        if name == "container-env" and "" in value.split(","):
            errors.append(f"{word}: --container-env: invalid format")
    for a, b in CONFLICTS:
        if a in seen and b in seen:
            errors.append(f"both --{a} and --{b}")
    if "container-image" not in seen and "container-name" not in seen and seen:
        errors.append("pyxis ignores every --container-* option without --container-image or --container-name")
    return errors


def test_the_table_is_pyxis_v0_24s():
    table = option_table()
    assert table["container-image"] and table["container-mounts"] and table["container-name"]
    assert not table["no-container-mount-home"] and not table["container-writable"]
    assert len(table) == 16


def test_the_checker_refuses_what_pyxis_refuses():
    """The checker itself can fail: each of these is an argv pyxis would refuse or ignore."""
    img = "--container-image=/a.sqsh"
    assert check_pyxis_options(["srun", img, "--container-mounts=/a:/b", "true"]) == []
    assert check_pyxis_options(["srun", "--container-img=/a.sqsh", "true"])
    assert check_pyxis_options(["srun", "--container-image", "/a.sqsh", "true"])  # atomdeck's form is `=`
    assert check_pyxis_options(["srun", img, "--container-writable=yes", "true"])
    assert check_pyxis_options(["srun", img, "--container-mounts=data:/data", "true"])
    assert check_pyxis_options(["srun", img, "--container-mounts=/a:b", "true"])
    assert check_pyxis_options(["srun", img, "--container-name=x:later", "true"])
    assert check_pyxis_options(["srun", img, "--container-writable", "--container-readonly", "true"])
    assert check_pyxis_options(["srun", img, "--container-workdir=/a", "--container-workdir=/b", "true"])
    assert check_pyxis_options(["srun", "--container-mounts=/a:/a", "true"])


SIM = SimRuntime(shim_dir="/repo/sim/shim", python_bin="/repo/.venv/bin", mounts=("/py", "/repo"))
VARIANTS = [
    {},
    {"workdir": "/work", "mounts": ["/data:/data:ro+rprivate", "./rel:/rel"],
     "pyxis": {"writable": True, "remap_root": True, "mount_home": True, "entrypoint": True, "env": ["HF_TOKEN", "X"]}},
    {"pyxis": {"writable": False, "remap_root": False, "name": None}},
    {"pyxis": {"name": "{user}-{job}-{node}"}, "images": {"a": "docker://rocm/atom:v1"}},
]


def _clusters():
    base = yaml.safe_load(find_cluster("lab-pyxis").read_text())
    for i, edit in enumerate(VARIANTS):
        doc = {**base, "name": f"pyxis-{i}", "container": {**base["container"], **edit,
                                                            "pyxis": {**base["container"]["pyxis"],
                                                                      **edit.get("pyxis", {})}}}
        yield parse_cluster(yaml.safe_dump(doc))


def _inventory():
    return [Node(f"mia1-p01-g0{i}", f"10.1.0.{i}", ("IDLE",), 8) for i in range(1, 5)]


@pytest.mark.parametrize("recipe", shipped_recipes(), ids=lambda p: p.stem)
def test_every_planned_pyxis_argv_passes_the_table(recipe):
    """The display form of each process (srun ... --container-* ... command), the node step the launcher runs
    (the same options and the run's shared directory mounted), pre-flight's image check and `--help` check."""
    checked = 0
    for cluster in _clusters():
        r = load_recipe(recipe).model_copy(update={"image": "atomsim", "container_mounts": ["/scratch:/scratch"]})
        for ctx in (LaunchContext(), LaunchContext(run_id="r-1", job_id="42", sim=SIM, nic={"mia1-p01-g01": "ionic"})):
            a = assess(r, cluster, _inventory(), None, frozenset(), None, ctx)
            assert a.plan is not None, a.findings
            argvs = [p.launch_argv for p in a.processes]
            argvs += [["srun", "--jobid", "42", *with_mount(p.step_options, "/runs/r-1"), "sh", "-c", "..."]
                      for p in a.processes]
            argvs += [["srun", *ch.command()] for ch in image_checks_for(a.plan, a.processes)]
            argvs += [["srun", *help_command(a.plan, p)] for p in a.processes]
            for argv in argvs:
                assert any(w.startswith("--container-image=") for w in argv), argv
                assert check_pyxis_options(argv) == [], argv
                checked += 1
    assert checked > 0
