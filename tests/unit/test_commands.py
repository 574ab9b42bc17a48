"""Command contracts: the exact argv of the shipped recipes, and argv that survive any string."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
import yaml
from atomdeck.core.config.catalog import load_catalog
from atomdeck.core.config.cluster import load_cluster, parse_cluster
from atomdeck.core.config.paths import catalog_path, find_cluster, shipped_recipes
from atomdeck.core.config.recipe import Recipe, check_recipe, load_recipe
from atomdeck.core.design.commands import LaunchContext, shell_line
from atomdeck.core.design.export import export_script
from atomdeck.core.design.inventory import Node
from atomdeck.core.design.lint import assess
from hypothesis import given, settings
from hypothesis import strategies as st

from .helpers import SIM

CONTRACTS = Path(__file__).resolve().parent.parent / "contracts"
G = "mia1-p01-g0"

DSV4_PREFILL = [
    "python3", "-m", "atom.entrypoints.openai_server", "--model", "/models/DeepSeek-V4-Pro", "--host", "0.0.0.0",
    "--server-port", "8010", "--trust-remote-code", "-tp", "8", "--kv_cache_dtype", "fp8", "--block-size", "16",
    "--gpu-memory-utilization", "0.85", "--max-num-seqs", "256", "--no-enable_prefix_caching",
    "--kv-transfer-config",
    '{"kv_role":"kv_producer","kv_connector":"mooncake","proxy_ip":"10.77.0.11","handshake_port":6301,'
    '"protocol":"rdma"}',
]
LADDER = "[1,2,4,8,16,24,32,40,48,56,64,72,80,88,96,104,112,120,128,136,144,152,160,168,176,184,192,200,208,216," \
         "224,232,240,248,256]"
DSV4_DECODE = [
    "python3", "-m", "atom.entrypoints.openai_server", "--model", "/models/DeepSeek-V4-Pro", "--host", "0.0.0.0",
    "--server-port", "8020", "--trust-remote-code", "-tp", "8", "--kv_cache_dtype", "fp8", "--block-size", "16",
    "--gpu-memory-utilization", "0.85", "--max-num-seqs", "128", "--no-enable_prefix_caching",
    "--kv-transfer-config",
    '{"kv_role":"kv_consumer","kv_connector":"mooncake","proxy_ip":"10.77.0.12","handshake_port":6301,'
    '"protocol":"rdma"}',
    "--cudagraph-capture-sizes", LADDER,
]
DSV4_ROUTER = ["atomesh", "launch", "--host", "0.0.0.0", "--port", "30000", "--pd-disaggregation",
               "--prefill", "http://10.77.0.11:8010", "--decode", "http://10.77.0.12:8020", "--policy", "random",
               "--backend", "atom", "--log-level", "info", "--prometheus-port", "29100",
               "--worker-startup-timeout-secs", "2800", "--disable-health-check", "--disable-circuit-breaker"]
DSV4_ENV = {"ATOM_HOST_IP": "10.77.0.11", "PYTHONUNBUFFERED": "1", "ATOM_MOE_GU_ITLV": "1",
            "AITER_BF16_FP8_MOE_BOUND": "0",
            "LD_LIBRARY_PATH": "/opt/venv/lib/python3.10/site-packages/mooncake:/opt/rocm/lib",
            "PYTHONDONTWRITEBYTECODE": "1", "SAFETENSORS_FAST_GPU": "1"}


def _dsv4(name: str, nodes: list[str], ctx=None):
    from .helpers import lab_inventory

    cluster = load_cluster(find_cluster("mia1"))
    return assess(load_recipe(Path(find_cluster("mia1")).parent.parent / f"{name}.yaml"), cluster,
                  lab_inventory(), nodes, frozenset(), load_catalog(catalog_path()), ctx or LaunchContext())


def test_dsv4_1p1d_exact_argv_env_and_wrappers():
    a = _dsv4("dsv4-fp4-mi355x-1p1d-tp8", [G + "1", G + "2"], LaunchContext(job_id="4242", user="ops"))
    assert a.ok, a.findings
    procs = {p.name: p for p in a.processes}
    assert procs["prefill-0"].argv == DSV4_PREFILL
    assert procs["decode-0"].argv == DSV4_DECODE
    assert procs["router"].argv == DSV4_ROUTER
    assert procs["prefill-0"].env == DSV4_ENV
    launch = procs["prefill-0"].launch_argv
    assert launch[:12] == ["srun", "--jobid", "4242", "--overlap", "-w", G + "1", "-N1", "-n1",
                           "--job-name=prefill-0", "--output=logs/prefill-0.log", "--kill-on-bad-exit=1", "docker"]
    assert launch[12:18] == ["run", "--rm", "--init", "--stop-timeout", "10", "--name"]
    assert launch[18] == "container_atom_ops_DeepSeek-V4-Pro_4242_prefill-0"
    assert "-v" in launch and "/it-share/data:/models" in launch  # mia1* -> /it-share/data at /models
    assert launch[-len(DSV4_PREFILL) - 3:-len(DSV4_PREFILL)] == ["--entrypoint", "", "rocm/atom:latest"]
    assert launch[-len(DSV4_PREFILL):] == DSV4_PREFILL


def test_dsv4_2p1d_dp_attention_flags_and_env():
    a = _dsv4("dsv4-fp4-mi355x-2p1d-dpa", [G + "1", G + "2", G + "3"])
    assert a.ok, a.findings
    procs = {p.name: p for p in a.processes}
    for name in ("prefill-0", "prefill-1", "decode-0"):
        argv = procs[name].argv
        i = argv.index("-tp")
        assert argv[i:i + 4] == ["-tp", "8", "--enable-dp-attention", "--enable-tbo"]
        assert procs[name].env["GPU_MAX_HW_QUEUES"] == "5" and procs[name].env["ATOM_CPU_AFFINITY"] == "1"
    d = procs["decode-0"].argv
    assert d[d.index("--max-num-seqs") + 1] == "2048"  # the largest benchmark concurrency
    r = procs["router"].argv
    assert r[r.index("--pd-disaggregation"):r.index("--policy")] == [
        "--pd-disaggregation", "--prefill", "http://10.77.0.11:8010", "--prefill", "http://10.77.0.12:8010",
        "--decode", "http://10.77.0.13:8020"]


def test_demo_1p1d_on_local_runs_the_simulator_with_the_same_argv():
    cluster = load_cluster(find_cluster("local"))
    a = assess(load_recipe(find_cluster("local").parent.parent / "demo-1p1d.yaml"), cluster,
               cluster.static_inventory(), None, frozenset(), load_catalog(catalog_path()), LaunchContext(sim=SIM))
    assert a.ok, a.findings
    p = {x.name: x for x in a.processes}["prefill-0"]
    assert p.argv[:3] == ["python3", "-m", "atom.entrypoints.openai_server"]
    assert p.runtime_env == {"PYTHONPATH": "/SHIM", "ATOMSIM_NODE_IP": "127.0.0.11", "ATOMSIM_SPEED": "1",
                             "PATH": "/SHIM/bin:/PYBIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert p.launch_argv[0] == "env" and p.launch_argv[-len(p.argv):] == p.argv


def _contract(recipe_path: Path) -> str:
    """A readable rendering of what would run, on the cluster each recipe is meant for."""
    r = load_recipe(recipe_path)
    is_demo = r.name.startswith("demo")
    cluster = load_cluster(find_cluster("local" if is_demo else "mia1"))
    # mia1 as Slurm lists it: four idle nodes, and g37 drained (the cluster file excludes it too)
    inv = cluster.static_inventory() if is_demo else \
        [Node(f"mia1-p01-g{i:02d}", f"10.1.0.{i}", ("IDLE",), 8) for i in range(1, 5)] + \
        [Node("mia1-p01-g37", "10.1.0.37", ("IDLE", "DRAIN"), 8)]
    a = assess(r, cluster, inv, None, frozenset(), load_catalog(catalog_path()),
               LaunchContext(job_id="JOB", user="ops", sim=SIM if is_demo else None))
    out = [f"# {r.name} on {cluster.name}: {a.plan.shape}"]
    for p in a.processes:
        out += [f"## {p.name} on {p.node} ports {p.ports}", shell_line(p.launch_argv)]
    out.append(f"## barrier {json.dumps([[c.node, c.port] for c in a.plan.barrier])}")
    out.append(f"## findings {json.dumps([f.rule + ':' + f.severity for f in a.findings])}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("path", shipped_recipes(), ids=lambda p: p.stem)
def test_shipped_recipe_contracts(path):
    """Snapshot per recipe; regenerate with ATOMDECK_UPDATE_CONTRACTS=1 and review the diff."""
    got = _contract(path)
    snap = CONTRACTS / f"{path.stem}.txt"
    if os.environ.get("ATOMDECK_UPDATE_CONTRACTS"):
        snap.parent.mkdir(exist_ok=True)
        snap.write_text(got)
    assert snap.exists(), f"no contract for {path.stem}: run with ATOMDECK_UPDATE_CONTRACTS=1 and review it"
    assert got == snap.read_text()


# --- every rendered command splits back to the same argv, whatever the recipe strings contain ---

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=30)
env_name = st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(model=text, env_val=text, arg_val=text, node=st.from_regex(r"[a-z][a-z0-9.;$`'\" -]{0,15}", fullmatch=True),
       key=env_name, launcher=st.sampled_from(["local", "slurm", "ssh"]), docker=st.booleans())
def test_rendered_commands_split_back_to_the_same_argv(model, env_val, arg_val, node, key, launcher, docker):
    # built from data, not YAML text: YAML itself folds some characters (e.g. U+0085) into spaces
    r = check_recipe(Recipe.model_validate({"name": "t", "model": {"path": model}, "env": {key: env_val},
                                            "prefill": {"args": {"some-flag": arg_val}}, "image": "img:1"}))
    c = parse_cluster(yaml.safe_dump({"name": "c", "launcher": launcher, "nodes": [{"name": "n0"}],
                                      "container": {"runtime": "docker" if docker else "none"},
                                      "model_dirs": [{"pattern": "*", "path": "/m"}]}))
    inv = [Node(node, node, ("IDLE",), 8), Node(node + "x", node + "x", ("IDLE",), 8)]
    a = assess(r, c, inv, None, frozenset(), None, LaunchContext(job_id="1", login="login;rm -rf /"))
    assert a.plan is not None
    for p in a.processes:
        line = shell_line(p.launch_argv)
        assert shlex.split(line) == p.launch_argv
        if launcher == "ssh":  # the remote shell splits the quoted inner command once more
            inner = shlex.split(p.launch_argv[-1])
            assert inner[-len(p.argv):] == p.argv
        else:
            assert p.launch_argv[-len(p.argv):] == p.argv
        assert model in p.argv or p.role == "router"
    script = export_script(a)
    for p in a.processes:
        assert shell_line(p.launch_argv) in script
