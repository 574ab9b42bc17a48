"""Each real srt-slurm ATOM recipe, imported: the argv and env atomdeck plans are flag-equal to what
srt-slurm's own code builds for it. Ports and addresses aside (each side allocates its own), every
difference is one named in docs/srt-slurm.md and listed here with its reason.

srt-slurm is not run (CI has neither it nor the network): its builders are written out below from a
reading of its source, flag by flag, each with the file it comes from:
- worker argv: NVIDIA/srt-slurm src/srtctl/backends/atom.py at 1a749ed1 (`build_worker_command`,
  `_kv_transfer_config`, `_config_to_cli_args`); the model argument: core/runtime.py at c88ef731
  (`worker_model_arg`: an `hf:` id literally, else the /model mount).
- worker env: SemiAnalysisAI/srt-slurm src/srtctl/cli/mixins/worker_stage.py (`start_worker`: Dynamo's
  own variables, the role's env, then the global `environment`, then the visible-devices mask).
- router argv and env: SemiAnalysisAI/srt-slurm src/srtctl/frontends/static_router.py
  (`build_router_command`, `get_frontend_args_list`, `start_frontends`) and atomesh.py (`--backend atom`).
The Infera recipes are refused by name; with `--frontend atomesh` their workers are compared with what
srt-slurm builds for the same recipe with `frontend.type: atomesh`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from atomdeck.core.config.catalog import load_catalog
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.paths import catalog_path
from atomdeck.core.config.srtslurm import import_file
from atomdeck.core.design.commands import LaunchContext
from atomdeck.core.design.inventory import Node
from atomdeck.core.design.lint import assess

from tests.conftest import DATA

FIXTURES = sorted((DATA / "srtslurm").glob("*.yaml"))
ADDR, PORT = "<addr>", "<port>"
MODE = {"prefill": "prefill", "decode": "decode", "agg": "aggregated"}
CLUSTER = "name: srt\nlauncher: slurm\ngpus_per_node: 8\n"

# Named differences (docs/srt-slurm.md, "What differs, and why"):
# srt-slurm sets these for every engine (Dynamo's runtime); ATOM reads none of them (none appears in ROCm/ATOM).
SRT_ONLY_ENV = {"HEAD_NODE_IP", "DYN_SYSTEM_PORT", "DYN_REQUEST_PLANE", "DYN_SKIP_SGLANG_LOG_FORMATTING", "DYN_LOG"}
# atomdeck sets it so the worker's log lines reach atomdeck's watchers as they are printed.
ATOMDECK_ONLY_ENV = {"PYTHONUNBUFFERED": "1"}
# GPU masks: srt-slurm writes the cluster's visible_devices_env (ROCR_VISIBLE_DEVICES on the AMD clusters),
# atomdeck HIP_VISIBLE_DEVICES; compared as the set of GPUs each worker uses.
MASKS = {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}
# Router flags atomdeck always spells out: --policy (with srt-slurm's none, AToMesh's default cache_aware
# applies, and that is what the import writes), --log-level (info, AToMesh's default), --prometheus-port (a
# port), --worker-startup-timeout-secs (atomdeck's wait: the router never gives up before atomdeck does).
ROUTER_EXTRA = {"--policy", "--log-level", "--prometheus-port", "--worker-startup-timeout-secs"}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def srt_roles(data: dict) -> dict[str, dict]:
    """Each role's nodes, workers, GPUs, args and env, from either schema (core/migrate.py's key moves)."""
    out = {}
    if data.get("schema") == 2:
        for role, spec in data["roles"].items():
            out[role] = {"nodes": spec["nodes"], "workers": spec["workers"], "gpus": spec["gpus"],
                         "args": spec.get("args") or {}, "env": spec.get("env") or {}}
        return out
    res, backend = data["resources"], data["backend"]
    for role, mode in MODE.items():
        if res.get(f"{role}_workers"):
            out[role] = {"nodes": res[f"{role}_nodes"], "workers": res[f"{role}_workers"],
                         "gpus": res[f"gpus_per_{role}"],
                         "args": (backend.get("atom_config") or {}).get(mode) or {},
                         "env": backend.get(f"{mode}_environment") or {}}
    return out


def srt_engine(data: dict) -> dict:
    engine = data.get("engine") if data.get("schema") == 2 else data["backend"]
    return engine if isinstance(engine, dict) else {"type": engine}


def srt_worker(data: dict, role: str) -> tuple[list[str], dict[str, str]]:
    """What srt-slurm starts for one worker of `role`: (argv, env)."""
    spec, engine = srt_roles(data)[role], srt_engine(data)
    model = data["model"]["path"]
    argv = ["python3", "-m", "atom.entrypoints.openai_server",
            "--model", model[3:] if model.startswith("hf:") else "/model",  # runtime.worker_model_arg
            "--host", "0.0.0.0",  # fixed in build_worker_command
            "--server-port", PORT,  # process.http_port, from the NodePortAllocator
            "-tp", str(spec["gpus"])]  # len(process.gpu_indices): the role's GPUs per worker
    if role in ("prefill", "decode"):  # _kv_transfer_config: Mooncake, keys in this order
        kv = {"kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
              "kv_connector": engine.get("connector", "mooncake"), "proxy_ip": ADDR, "handshake_port": PORT}
        if engine.get("mooncake_protocol") is not None:
            kv["protocol"] = engine["mooncake_protocol"]
        argv += ["--kv-transfer-config", json.dumps(kv, separators=(",", ":"))]
    for key, value in sorted(spec["args"].items()):  # _config_to_cli_args: sorted, --KEY as written
        if value is True:
            argv.append(f"--{key}")
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += [f"--{key}", *(str(v) for v in value)]
        else:
            argv += [f"--{key}", str(value)]
    env = {"ATOM_HOST_IP": ADDR}  # `env ATOM_HOST_IP=<worker ip>` in front of the command
    env.update({"HEAD_NODE_IP": ADDR, "DYN_SYSTEM_PORT": PORT, "DYN_REQUEST_PLANE": "tcp",
                "DYN_SKIP_SGLANG_LOG_FORMATTING": "1", "DYN_LOG": "info"})  # worker_stage: always
    env.update({k: str(v) for k, v in spec["env"].items()})  # the role's env
    env.update({k: str(v) for k, v in (data.get("environment") or {}).items()})  # then the global environment
    gpn = data["resources"].get("gpus_per_node", 4)
    if spec["gpus"] < gpn:  # _visible_device_environment: only a worker that owns part of its node
        env["ROCR_VISIBLE_DEVICES"] = "<mask>"
    return argv, env


def srt_router(data: dict) -> tuple[list[str], dict[str, str]] | None:
    """static_router.build_router_command + atomesh's managed args + the frontend args; None: no router."""
    front = data.get("frontend") or {}
    if front.get("type") == "atom":
        return None  # the direct frontend: the worker is the public endpoint
    infera = front.get("type") == "infera"  # compared as if the recipe said atomesh (and so had no Infera args)
    roles = srt_roles(data)
    cmd = ["atomesh", "launch"]
    if "agg" in roles:
        cmd += ["--worker-urls", *(f"http://{ADDR}:{PORT}" for _ in range(roles["agg"]["workers"]))]
    else:
        cmd.append("--pd-disaggregation")
        for role in ("prefill", "decode"):
            for _ in range(roles[role]["workers"]):
                cmd += [f"--{role}", f"http://{ADDR}:{PORT}"]  # atomesh advertises no bootstrap port
    cmd += ["--host", "0.0.0.0", "--port", PORT, "--backend", "atom"]
    for key, value in ({} if infera else front.get("args") or {}).items():  # get_frontend_args_list
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            cmd.append(flag)
        elif value not in (False, None):
            cmd += [flag, str(value)]
    env = {k: str(v) for k, v in (data.get("environment") or {}).items()}
    env.update({} if infera else front.get("env") or {})
    return cmd, env


def _normal_worker(argv: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        t = argv[i]
        if t == "--port":  # ATOM's internal engine port, set by atomdeck for co-located workers: a port
            i += 2
            continue
        if t == "--server-port":
            out += [t, PORT]
            i += 2
            continue
        if t == "--kv-transfer-config":
            kv = json.loads(argv[i + 1])
            kv["proxy_ip"], kv["handshake_port"] = ADDR, PORT
            out += [t, json.dumps(kv, separators=(",", ":"))]
            i += 2
            continue
        out.append(t)
        i += 1
    return out


def _groups(argv: list[str]) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    cur: list[str] | None = None
    for t in argv[2:]:
        if t.startswith("--"):
            cur = []
            out.setdefault(t, []).append(cur)
        else:
            assert cur is not None
            cur.append(ADDR if t.startswith("http") else t)
    return out


def _normal_router(argv: list[str]) -> dict[str, list[list[str]]]:
    g = _groups(argv)
    if "--port" in g:
        g["--port"] = [[PORT]]
    for flag in ("--prefill", "--decode", "--worker-urls"):
        if flag in g:
            g[flag] = [[f"http://{ADDR}:{PORT}" for _ in v] for v in g[flag]]
    return g


def _planned(path: Path):
    im = import_file(path, "atomesh")
    assert im.recipe is not None, [str(n) for n in im.errors]
    r = im.recipe
    n = sum(spec.nodes_needed() for _, spec in r.roles())
    nodes = [Node(name=f"n{i}", addr=f"10.0.0.{i + 1}", states=("IDLE",), source="offline") for i in range(n)]
    a = assess(r, parse_cluster(CLUSTER), nodes, None, frozenset(), load_catalog(catalog_path()), LaunchContext())
    assert a.plan is not None, a.findings
    return r, a.processes


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_worker_argv_and_env_are_srt_slurms(path):
    data = _load(path)
    recipe, procs = _planned(path)
    names = {"prefill": "prefill", "decode": "decode", "agg": "worker"}
    seen = 0
    for srt_role, ours in names.items():
        if srt_role not in srt_roles(data):
            continue
        want_argv, want_env = srt_worker(data, srt_role)
        for p in (p for p in procs if p.role == ours):
            seen += 1
            got_argv = _normal_worker(p.argv)
            kv_extra = recipe.mooncake.ib_device  # mooncake_ib_device: where srt-slurm puts it is not known
            if kv_extra:
                i = got_argv.index("--kv-transfer-config") + 1
                kv = json.loads(got_argv[i])
                assert kv.pop("ib_device") == kv_extra
                got_argv[i] = json.dumps(kv, separators=(",", ":"))
            assert got_argv == want_argv, f"{p.name}"
            got = {k: ADDR if k == "ATOM_HOST_IP" else v for k, v in p.env.items()}
            for k, v in ATOMDECK_ONLY_ENV.items():
                if want_env.get(k) != v:
                    assert got.pop(k) == v
            want = {k: v for k, v in want_env.items() if k not in SRT_ONLY_ENV}
            got_mask = {k: got.pop(k) for k in list(got) if k in MASKS}
            want_mask = {k: want.pop(k) for k in list(want) if k in MASKS}
            assert got == want, p.name
            # the same GPUs: srt-slurm masks a worker that owns part of its node to its own GPUs (in packing
            # order); atomdeck masks co-located workers the same way, and a lone worker uses the first -tp GPUs
            spec = recipe.role(p.role)
            if spec.per_node > 1:
                slot = int(p.name.rsplit("-", 1)[1]) % spec.per_node
                gpus = ",".join(str(g) for g in range(slot * spec.tp, (slot + 1) * spec.tp))
                assert got_mask == {"HIP_VISIBLE_DEVICES": gpus} and want_mask == {"ROCR_VISIBLE_DEVICES": "<mask>"}
            else:  # srt-slurm's mask is GPUs 0..gpus-1 of the node, the ones ATOM's -tp takes without one
                assert got_mask == {} and want_mask in ({}, {"ROCR_VISIBLE_DEVICES": "<mask>"})
    assert seen == sum(r["workers"] for r in srt_roles(data).values())


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_router_argv_and_env_are_srt_slurms(path):
    data = _load(path)
    recipe, procs = _planned(path)
    want = srt_router(data)
    router = next(p for p in procs if p.role == "router")
    if want is None:  # frontend.type: atom: srt-slurm runs no router, atomdeck puts AToMesh in front
        assert recipe.mode == "aggregate" and recipe.aggregate.workers == 1
        return
    want_argv, want_env = want
    got = _normal_router(router.argv)
    extra = {k: got.pop(k) for k in list(got) if k in ROUTER_EXTRA}
    assert got == _normal_router(want_argv)
    assert set(extra) == ROUTER_EXTRA
    assert extra["--policy"] == [["cache_aware"]] and extra["--log-level"] == [["info"]]
    assert router.env == want_env


def test_the_infera_recipes_are_refused_by_name():
    infera = [p for p in FIXTURES if _load(p)["frontend"]["type"] == "infera"]
    assert len(infera) == 11
    for path in infera:
        im = import_file(path)
        assert im.recipe is None
        (err,) = im.errors
        assert err.key == "frontend.type" and "Infera" in err.message and "--frontend atomesh" in err.message
        assert err.line == path.read_text().splitlines().index("  type: infera") + 1
