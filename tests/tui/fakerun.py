"""Deterministic runs for looks (snapshots, screenshots) and log-view tests: a real core Run object
over a real run directory, its state built from events with fixed times, its logs written from the
simulator's own lines. Nothing is started; `attach(run, watch=False)` shows it."""

from __future__ import annotations

import os
from datetime import datetime

from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.launch.base import ProcHandle
from atomdeck.core.run.events import Event, new_state
from atomdeck.core.run.run import Run
from atomdeck.core.run.rundir import RunDir
from atomdeck.core.run.runfiles import redacted_yaml

LAUNCHED = datetime(2025, 1, 1, 11, 58, 45)  # 75 s before the tests' frozen clock (12:00:00)
PIDS = {"prefill-0": 41210, "prefill-1": 41211, "decode-0": 41212, "router": 41213}

ATOM_START = """[atom 11:58:45] Loading tokenizer from atomdeck/demo-tiny-8b...
[atom 11:58:45] Initializing engine with model atomdeck/demo-tiny-8b...
[atom 11:58:45] Mooncake TransferEngine loaded successfully
[atom 11:58:45] KV transfer config loaded: {'kv_role': 'KVROLE', 'kv_connector': 'mooncake', 'proxy_ip': 'IP', 'handshake_port': 6301, 'protocol': 'tcp'}
[atom 11:58:45] Engine Core Mgr: Creating EngineCore for DP rank 0/1
[atom 11:58:45] Mooncake TCP selected; RDMA device selection is disabled
W0101 11:58:45.681725  3433 transfer_engine_py.cpp:120] Using default malloc/free for protocol: tcp
I0101 11:58:45.681830  3433 transfer_engine_impl.cpp:183] Transfer Engine RPC using P2P handshake, listening on IP:15831
W0101 11:58:45.681928  3433 topology.cpp:201] No RDMA devices found, check your device installation
E0101 11:58:45.681969  3433 transfer_metadata.cpp:1098] Local segment descriptor not found
[atom 11:58:46] Mooncake TransferEngine initialized: ip=IP, protocol=tcp, ib_device=, rpc_port=15831
[atom 11:58:46] Registering 8 RDMA chunks (8 block regions, 0 slot regions, max_chunk=2.00 GiB)
[atom 11:58:46] batch_register_memory OK (8 chunks)
[atom 11:58:46] Mooncake KV registration complete: role=ROLE, engine_id=IP:15831, is_v4=False, num_blocks=1024, block_regions=8, slot_regions=0"""

ATOM_READY = """[atom 11:58:46] Engine Core: cudagraph capture[1, 2, 4, 8, 16, 24, 32, 64, 128, 256] cost: 0.05 seconds
[atom 11:58:46] Engine Core: load model runner success
[atom 11:58:46] Engine Core: EngineCore fully initialized and ready"""

ATOM_SERVING = """[atom 11:58:46] Starting server on 0.0.0.0:PORT
INFO:     Started server process [4121]
INFO:     Uvicorn running on http://0.0.0.0:PORT (Press CTRL+C to quit)
[atom 11:58:46] Server started successfully and ready to accept requests
INFO:     127.0.0.1:44736 - "GET /health HTTP/1.1" 200 OK
INFO:     127.0.0.1:44746 - "GET /kv_transfer_info HTTP/1.1" 200 OK"""

CRASH = """Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/atom/entrypoints/openai/api_server.py", line 101, in main
    engine = engine_args.create_engine(tokenizer=tokenizer)
  File "/usr/local/lib/python3.12/dist-packages/atom/model_engine/model_runner.py", line 175, in capture_cudagraph
    graph.capture_end()
torch.OutOfMemoryError: HIP out of memory during cudagraph capture. Tried to allocate 1.50 GiB."""

ROUTER = """Atomesh starting...
Host: 0.0.0.0:30000
Mode: PD Disaggregated
Policy: random
2025-01-01 11:58:45  INFO mesh::server: Starting router on 0.0.0.0:30000 | mode: PrefillDecode
2025-01-01 11:58:45  INFO mesh::server: Worker initialization job submitted (will complete in background)
2025-01-01 11:58:45  WARN mesh::core::steps::worker::local::detect_connection: Health check failed for http://127.0.0.12:8020 (attempt 1): tcp connect error: Connection refused (os error 111); retrying in 0.5s"""

ROUTER_READY = """2025-01-01 11:58:46  INFO mesh::server: All 2 expected worker endpoint(s) registered as 2 worker(s) (took 503.56ms)
2025-01-01 11:58:46  INFO mesh::server: Router ready | workers: ["http://127.0.0.11:8010", "http://127.0.0.12:8020"]
2025-01-01 11:58:46  INFO mesh::server: Starting server on 0.0.0.0:30000"""


def _worker_log(spec, lines: str) -> list[str]:
    role = "kv_producer" if spec.role == "prefill" else "kv_consumer"
    word = "PRODUCER" if spec.role == "prefill" else "CONSUMER"
    port = str(spec.ports[0]) if spec.ports else "8000"
    return (lines.replace("KVROLE", role).replace("ROLE", word).replace("IP", spec.host)
            .replace("PORT", port).splitlines())


def fake_run(scenario: str = "serving", recipe: str = "demo-1p1d", run_id: str | None = None) -> Run:
    """scenario: serving | hung (decode never binds) | crashed (decode exits 3 while loading) |
    starting (halfway up) | degraded (serving with metrics, then decode-0 frozen: unresponsive) |
    matrix (serving, with a made-up 16x16 pair set, three pairs failed: the handshake matrix) | parked (serving
    with metrics, then decode-0's requests parked for their KV from prefill-0, 12 s: degraded)."""
    ws = load_workspace(recipe, "local")
    ws.inventory = ws.cluster.static_inventory()
    a = ws.assess()
    plan = a.plan
    run_id = run_id or f"20250101-115845-{recipe}-{ {'serving': 'a1b2', 'hung': 'c3d4', 'crashed': 'e5f6', 'degraded': 'g7h8', 'matrix': 'i9j0', 'parked': 'k1l2'}.get(scenario, '0000')}"
    T0 = LAUNCHED.timestamp()  # local time, like the app's clock
    status = {"serving": "serving", "crashed": "failed", "degraded": "degraded",
              "matrix": "serving", "parked": "degraded"}.get(scenario, "starting")
    diagnosis = {"serving": "serving: 1/1P 1/1D router serving; smoke 8 tokens",
                 "crashed": "decode-0 on demo-n02 exited 3; last: torch.OutOfMemoryError: HIP out of memory "
                            "during cudagraph capture. Tried to allocate 1.50 GiB."}.get(scenario, "")
    pairs = None
    if scenario == "matrix":  # a 16P16D pair set on the demo's processes: the panel's look at scale
        pairs = [(f"prefill-{i}", f"decode-{j}") for i in range(16) for j in range(16)]
    run = new_run(plan, a.processes, run_id, T0, status, (recipe, "local"), pairs, diagnosis=diagnosis,
                  console_host="login01", console_pid=4242)
    rd = run.rd
    logs: dict[str, list[str]] = {}

    def at(dt: float, kind: str, name: str = "", value: str = "", detail: str = "", **data) -> None:
        run.emit(Event(kind, name, value, detail, data, T0 + dt))

    started(run, rd, a.processes, at, lambda i, name: PIDS.get(name, 41220 + i))
    workers = [p for p in a.processes if p.role != "router"]
    broken = "decode-0" if scenario in ("hung", "crashed") else None
    for i, p in enumerate(workers):
        at(0.2 + 0.05 * i, "proc.stage", p.name, "loading")
        logs[p.name] = _worker_log(p, ATOM_START)
        if scenario == "starting" and p.role == "decode":
            logs[p.name] = logs[p.name][:6]
            continue
        if p.name == broken and scenario == "crashed":
            logs[p.name] = logs[p.name][:-3] + CRASH.splitlines()
            continue
        at(0.5 + 0.05 * i, "proc.stage", p.name, "kv_registered")
        for c in plan.barrier:
            if c.owner == p.name and c.kind == "handshake":
                at(0.52 + 0.05 * i, "cell", f"{c.node}:{c.port}", "open")
        logs[p.name] += _worker_log(p, ATOM_READY)
        if p.name == broken:
            continue  # hung: everything up to "fully initialized", then never binds
        logs[p.name] += _worker_log(p, ATOM_SERVING)
        for c in plan.barrier:
            if c.owner == p.name and c.kind == "http":
                at(0.8 + 0.05 * i, "cell", f"{c.node}:{c.port}", "open")
        at(0.85 + 0.05 * i, "proc.stage", p.name, "http_up", "GET /health 200")
        want = "kv_producer" if p.role == "prefill" else "kv_consumer"
        if p.role in ("prefill", "decode"):
            at(0.9, "check", f"kv_role:{p.name}", "ok", f"kv_role={want}")
    at(0.3, "proc.stage", "router", "starting")
    at(0.31, "proc.stage", "router", "waiting_workers")
    logs["router"] = ROUTER.splitlines()
    if scenario == "crashed":
        p = run.state.procs["decode-0"]
        at(0.74, "proc.error", "decode-0", "exception", "Traceback (most recent call last):")
        at(0.745, "proc.error", "decode-0", "gpu", CRASH.splitlines()[-1])
        at(0.75, "proc.exit", "decode-0", "failed", "exited 3", code=3, last_lines=logs["decode-0"][-10:])
        from atomdeck.core.run.diagnose import diagnose

        at(0.76, "run", value="failed", detail=diagnose(run.state, T0 + 0.76).headline)
    live = scenario in ("serving", "degraded", "matrix", "parked")
    if scenario == "matrix":
        for k, pr in enumerate(run.state.pairs.values()):
            stage = "transferred" if k % 7 else "ports_reachable"
            at(0.95, "pair", pr.key, stage, "")
        for key in ("prefill-3>decode-11", "prefill-9>decode-11", "prefill-14>decode-11"):
            p_i = int(key.split(">")[0].split("-")[1])
            at(1.3, "pair", key, "failed", f"decode-11 on mia1-p02-g11 cannot reach prefill-{p_i} 10.77.0.{p_i + 11}:6301 "
               "(timeout); reachable from the console host: the path between the nodes is blocked; decode-11 sent "
               "write_request for req 41 5s ago and got no write-done")
    if live:
        at(0.95, "pair", "prefill-0>decode-0", "both_registered", "both sides registered their KV memory")
        at(0.96, "pair", "prefill-0>decode-0", "ports_reachable", "127.0.0.11:6301-6308 reachable from this machine")
        at(1.0, "proc.stage", "router", "workers_registered")
        for p in workers:
            at(1.0, "proc.stage", p.name, "registered")
        at(1.01, "proc.stage", "router", "ready")
        at(1.05, "cell", f"{plan.router.node}:{plan.router.port}", "open")
        at(1.06, "proc.stage", "router", "http_up")
        logs["router"] += ROUTER_READY.splitlines()
        at(1.1, "check", "readiness", "ok", '{"status": "ready", "healthy_workers": 2, "total_workers": 2}')
        at(1.11, "check", "workers", "ok", "router has 1 prefill and 1 decode/regular workers")
        at(1.12, "check", "models", "ok", f"router serves '{plan.recipe.model.client_name}'")
        at(1.16, "check", "smoke", "ok", "8 tokens in 0.04s: 'tensor her are scale her you stream could'",
           tokens=8, seconds=0.04)
        at(1.2, "pair", "prefill-0>decode-0", "transferred",
           "[atom 11:58:46] [CONSUMER] Write-done received for req 0, done_recving now: {0}")
        at(1.25, "proc.stage", "router", "serving")
        for p in workers:
            at(1.25, "proc.stage", p.name, "serving")
        at(1.26, "run", value="serving", detail="serving: 1/1P 1/1D router serving; smoke 8 tokens")
    if scenario == "parked":  # the KV path broke after serving: decode-0's requests wait for prefill-0's KV
        import math

        for name, src in (("prefill-0", "atom"), ("decode-0", "atom"), ("router", "mesh")):
            key = {"prefill-0": "prompt_tok_s", "decode-0": "gen_tok_s", "router": "req_s"}[name]
            scale = {"prefill-0": 2400.0, "decode-0": 310.0, "router": 3.1}[name]
            hist = [round(scale * (0.55 + 0.4 * math.sin(i / 4.0)), 2) for i in range(40)]
            hist[-6:] = [0.0] * 6
            data = {"source": src, "t": T0 + 70, key: hist[-1], "history": {key: hist}}
            if src == "atom":
                data |= {"requests_running": 0, "requests_waiting": 0, "prompt_tok_s": 0.0,
                         "kv_cache_usage_ratio": 0.21 if name == "decode-0" else 0.08}
                if name == "decode-0":
                    data |= {"parked": 8, "parked_oldest_s": 12.0, "parked_on": "prefill-0", "parked_by": "log",
                             "parked_req": "212"}
            else:
                data |= {"router_requests": 220, "router_errors": 0, "errors_by_type": {}, "responses_by_status":
                         {"200": 212}}
            at(70.0, "metrics", name, src, **data)
        at(61.0, "proc.parked", "decode-0", "parked", "decode-0 on demo-n02: 8 requests parked for KV, the oldest "
           "for 3s+, waiting on prefill-0 (127.0.0.11:6301-6308); req 212 got no write-done", count=8,
           since=T0 + 58.0, prefill="prefill-0", req="212")
        from atomdeck.core.run.diagnose import diagnose

        at(61.1, "run", value="degraded", detail=diagnose(run.state, T0 + 61.1).headline)
    if scenario == "degraded":
        import math

        for name, src in (("prefill-0", "atom"), ("decode-0", "atom"), ("router", "mesh")):
            key = {"prefill-0": "prompt_tok_s", "decode-0": "gen_tok_s", "router": "req_s"}[name]
            scale = {"prefill-0": 2400.0, "decode-0": 310.0, "router": 3.1}[name]
            hist = [round(scale * (0.55 + 0.4 * math.sin(i / 4.0)), 2) for i in range(40)]
            if name != "prefill-0":
                hist[-4:] = [0.0, 0.0, 0.0, 0.0]  # the decode froze: nothing comes out any more
            data = {"source": src, "t": T0 + 70, key: hist[-1], "history": {key: hist}}
            if src == "atom":
                data |= {"requests_running": 4 if name == "decode-0" else 0, "requests_waiting": 2 if name ==
                         "decode-0" else 0, "kv_cache_usage_ratio": 0.37 if name == "decode-0" else 0.08,
                         "prompt_tok_s": hist[-1] if name == "prefill-0" else 0.0}
            else:
                data |= {"router_requests": 212, "router_errors": 3, "errors_by_type": {"timeout": 3},
                         "responses_by_status": {"200": 205, "504": 3}, "errors_s": 0.5}
            at(70.0, "metrics", name, src, **data)
        at(66.0, "proc.health", "decode-0", "unresponsive",
           "GET /health on demo-n02:8020: no answer within 1.5s; process alive, state T (stopped) (pid 41212 "
           "python3)", node="demo-n02", port=8020, path="/health")
        from atomdeck.core.run.diagnose import diagnose

        at(66.1, "run", value="degraded", detail=diagnose(run.state, T0 + 66.1).headline)
    if scenario == "matrix":
        from atomdeck.core.run.diagnose import diagnose

        at(1.31, "run", value="degraded", detail=diagnose(run.state, T0 + 1.31).headline)
    for name, lines in logs.items():
        rd.log_path(name).write_text("\n".join(lines) + "\n")
        p = run.state.procs[name]
        if not p.last_lines:
            p.last_lines.extend(lines[-20:])
        p.last_line_at = T0 + 1.0
        run.offsets[name] = rd.log_path(name).stat().st_size  # as if a console had read them all
    return run


def launching_run(t0: float, recipe: str = "demo-1p1d", started: int = 1) -> Run:
    """A run core's launch made at `t0` and is starting (Run.launch's on_run: the launcher's count goes up, and
    each process is told started as its start is heard): LAUNCHING, its first `started` processes started, the
    others pending, nothing watched yet."""
    ws = load_workspace(recipe, "local")
    ws.inventory = ws.cluster.static_inventory()
    a = ws.assess()
    run = new_run(a.plan, a.processes, f"20250101-115958-{recipe}-k1l2", t0, "launching")
    run.emit(Event("run", "", "launching", f"{a.plan.shape} on local", {}, t0))
    for p in a.processes[:started]:
        pid = PIDS.get(p.name, 41200)
        run.emit(Event("proc.started", p.name, "", f"pid {pid} on {p.node}", {"pid": pid, "node": p.node}, t0 + 0.5))
    return run


def new_run(plan, processes, run_id: str, created: float, status: str, names: tuple[str, str] | None = None,
            pairs: list[tuple[str, str]] | None = None, **meta) -> Run:
    """The run directory every fake run writes, as `atomdeck up` would (run.json marked fake, with
    `meta` added; recipe, cluster, selection, inventory), and a core Run over it in its first state:
    every process, barrier cell and prefill/decode pair (`pairs` instead, if given). `names`: the
    recipe's and the cluster's names in run.json (default: the plan's)."""
    if not os.environ.get("XDG_STATE_HOME"):  # made-up runs never land among the user's real ones
        raise RuntimeError("fake runs write run directories: set XDG_STATE_HOME to a scratch directory first")
    rd = RunDir.create(run_id)
    recipe_name, cluster_name = names or (plan.recipe.name, plan.cluster.name)
    m = RunDir.initial_meta(run_id, recipe_name, cluster_name, "local")
    m["created"] = created
    m["fake"] = True  # nothing runs: tests' cleanup must not try to stop its made-up PIDs
    m["status"] = status
    m.update(meta)
    rd.write_json("run.json", m)
    rd.write_text("recipe.yaml", redacted_yaml(plan.recipe.model_dump(mode="json", exclude_defaults=True)))
    rd.write_text("cluster.yaml", redacted_yaml(plan.cluster.model_dump(mode="json")))
    sel = plan.selection
    rd.write_json("selection.json", {"prefill": sel.prefill, "decode": sel.decode, "workers": sel.workers,
                                     "router": sel.router, "overrides": []})
    rd.write_json("inventory.json", [{"name": n.name, "addr": n.addr, "states": n.states, "gpus": n.gpus,
                                      "partitions": n.partitions, "reason": n.reason} for n in plan.nodes])
    cells = [{"node": c.node, "host": c.host, "port": c.port, "role": c.role, "kind": c.kind, "owner": c.owner}
             for c in plan.barrier]
    if pairs is None:
        pairs = [(p.name, d.name) for p in plan.role_endpoints("prefill") for d in plan.role_endpoints("decode")]
    state = new_state(run_id, [(p.name, p.role, p.node) for p in processes], cells, pairs)
    return Run(rd, plan.recipe, plan.cluster, plan, processes, None, state)  # type: ignore[arg-type]


def started(run, rd, processes, at, pid_of) -> None:
    """The opening every fake run shares: launching, each process's handle saved and started (pid_of(i,
    name) gives its made-up PID), starting, every barrier cell refused."""
    plan = run.plan
    at(0.0, "run", value="launching", detail=f"{plan.shape} on local")
    for i, p in enumerate(processes):
        pid = pid_of(i, p.name)
        h = ProcHandle(p.name, p.node, p.host, "local", pid=pid, log_path=str(rd.log_path(p.name)),
                       exit_path=str(rd.path / "logs" / f"{p.name}.exit"))
        run.handles[p.name] = h
        rd.save_handle(h)
        at(0.05, "proc.started", p.name, detail=f"pid {pid} on {p.node}", pid=pid, node=p.node)
    at(0.06, "run", value="starting", detail=f"{len(processes)} processes started")
    for c in plan.barrier:
        at(0.07, "cell", f"{c.node}:{c.port}", "refused")
