"""Simulated ``python3 -m atom.entrypoints.openai_server``: ATOM's life cycle on the real flags.

Startup prints ATOM's lines in ATOM's order with delays scaled by ``ATOMSIM_SPEED``, sets up
Mooncake for real when ``--kv-transfer-config`` asks for it, and binds the HTTP port only once
the engine is "fully initialized". SIGTERM/SIGINT shut down cleanly with exit code 0.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import signal
import sys
import time

from . import atomlog, proctree, simenv
from .engine_tree import EngineTree
from .faults import WORKER_STAGES, Faults, freeze_later, python_crash
from .httpd import HttpServer, Request, reason
from .kv import MooncakeConnector
from .metrics import atom_metrics_enabled
from .serving import ServingConfig, WorkerService
from .worker_args import build_parser, resolve_kv_config

log = atomlog.atom
API = "atom/entrypoints/openai/api_server.py"
ENGINE = "atom/model_engine/llm_engine.py"
CONNECTOR = "atom/kv_transfer/disaggregation/mooncake/mooncake_connector.py"
RUNNER = "atom/model_engine/model_runner.py"


class Worker:
    def __init__(self, args):
        self.args = args
        self.host = args.host
        self.bind_host = simenv.bind_host(args.host)
        self.ip = simenv.advertised_ip(args.host)
        self.listen_host = simenv.listen_host(args.host)
        self.faults = Faults.from_env(WORKER_STAGES, {self.bind_host, self.ip, simenv.node_ip() or ""},
                                      args.server_port)
        self.tp, self.dp = args.tensor_parallel_size, args.data_parallel_size
        if args.enable_dp_attention:
            self.tp, self.dp = 1, args.tensor_parallel_size * args.data_parallel_size
        self.connector: MooncakeConnector | None = None
        self.tree = EngineTree(self.tp, self.dp, simenv.atom_rev(), self.faults.rank_setsid)
        proctree.GPU_MEMORY["utilization"] = args.gpu_memory_utilization  # what each rank holds (gpus.py)
        self.http: HttpServer | None = None
        self.serving = False
        self.first_request_seen = False
        self.stopping = False

    # ---- crash helpers -------------------------------------------------------------------

    def crash(self, frames: list[tuple[str, str, str]], exception: str) -> None:
        python_crash(frames, exception, self.faults.crash_code)

    def maybe_crash(self, stage: str) -> None:
        if not self.faults.crashes_at(stage):
            return
        model, ip = self.args.model, self.ip
        engine = [(API, "main", "engine = engine_args.create_engine(tokenizer=tokenizer)"),
                  (ENGINE, "__init__", "self.core_mgr = CoreManager(config)")]
        crashes = {
            "tokenizer": ([(API, "main", "tokenizer = _load_tokenizer(args.model, args.trust_remote_code)")],
                          (f"OSError: Can't load tokenizer for '{model}'. Make sure '{model}' is the correct path "
                          f"to a directory containing all relevant files for a tokenizer.")),
            "engine": (engine, ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 7.00 GiB. GPU 0 has a "
                               "total capacity of 287.98 GiB of which 3.12 GiB is free.")),
            "mooncake": (engine + [(CONNECTOR, "__init__", "raise RuntimeError(")],
                         (f"RuntimeError: Mooncake TransferEngine.initialize() failed (ret=-1) on ip={ip}, "
                         f"protocol={self.connector.protocol if self.connector else 'rdma'}, ib_device=rdma0")),
            "kv_register": (engine + [(CONNECTOR, "register_kv_caches", "raise RuntimeError(")],
                            "RuntimeError: Mooncake register_memory failed: ptr=0x7f2a40000000 size=2097152 ret=-1"),
            "cudagraph": (engine + [(RUNNER, "capture_cudagraph", "graph.capture_end()")],
                          ("torch.OutOfMemoryError: HIP out of memory during cudagraph capture. Tried to allocate "
                          "1.50 GiB.")),
            "ready": (engine, ("RuntimeError: Engine core initialization failed. See root cause above. "
                              "Failed core proc(s): {'EngineCore_DP0': 1}")),
            "serving": ([(API, "completions", "async for output in generate_async(")],
                        "RuntimeError: EngineCore encountered an issue. See stack trace above for the root cause."),
        }
        if stage == "kv_register":
            log("batch_register_memory FAILED (ret=-1), trying individual registration as fallback...")
        frames, exception = crashes[stage]
        self.crash(frames, exception)

    # ---- life cycle ----------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda s=sig: loop.create_task(self.shutdown(s)))
        await self.start_engine()
        if self.faults.never_bind:
            await asyncio.Event().wait()
        await self.start_server()
        await asyncio.Event().wait()

    async def start_engine(self) -> None:
        args = self.args
        if args.request_log:
            log(f"Request logging enabled: {args.request_log}")
        if args.default_chat_template_kwargs:
            log(f"Default chat template kwargs: {json.loads(args.default_chat_template_kwargs)}")
        log(f"Loading tokenizer from {args.model}...")
        await simenv.pause(0.4)
        self.maybe_crash("tokenizer")
        log(f"Initializing engine with model {args.model}...")
        await simenv.pause(0.3)
        self.maybe_crash("engine")
        kv_cfg, kv_role = self.parse_kv_config()
        sizes = self.parse_capture_sizes()
        engine_class = None
        if kv_cfg:
            engine_class = MooncakeConnector.load_engine_class()
            log(f"KV transfer config loaded: {json.loads(args.kv_transfer_config)}")
        for rank in range(self.dp):
            log(f"Engine Core Mgr: Creating EngineCore for DP rank {rank}/{self.dp}")
            self.tree.start_core(rank)
            await simenv.pause(0.1)
        await asyncio.to_thread(self.tree.wait_ready)
        self.tree.watch(self.core_died)
        await simenv.pause(1.5)                       # model weights
        if self.faults.slow_load:
            await asyncio.sleep(self.faults.slow_load)
        if kv_cfg:
            self.connector = MooncakeConnector(
                kv_cfg, local_ip=self.ip, listen_host=self.listen_host, tp=self.tp, dp=self.dp,
                block_len=args.block_size, handshake_fault=self.faults.handshake,
                rev=simenv.atom_rev())
            self.maybe_crash("mooncake")
            try:
                self.connector.initialize(engine_class)
            except RuntimeError as e:
                self.crash([(CONNECTOR, "__init__", "raise RuntimeError(")], f"RuntimeError: {e}")
        else:
            self.maybe_crash("mooncake")
        await simenv.pause(0.3)                       # KV cache allocation
        self.maybe_crash("kv_register")
        if self.connector is not None:
            self.connector.register()
            try:
                await self.connector.start_listeners()
            except OSError as e:
                port = self.connector.base_handshake_port
                self.crash([(CONNECTOR, "_write_listener", "with zmq_socket_ctx(path, zmq.ROUTER, bind=True)")],
                           f"zmq.error.ZMQError: {e.strerror or e} (addr='tcp://*:{port}')")
        if sizes:
            started = time.monotonic()
            await simenv.pause(1.0)
            self.maybe_crash("cudagraph")
            log(f"Engine Core: cudagraph capture{sizes} cost: {time.monotonic() - started:.2f} seconds")
        else:
            self.maybe_crash("cudagraph")
        log("Engine Core: load model runner success")
        await simenv.pause(0.2)
        self.maybe_crash("ready")
        log("Engine Core: EngineCore fully initialized and ready")
        if self.faults.bind_delay:
            await asyncio.sleep(self.faults.bind_delay)
        reported = self.faults.kv_role or kv_role
        self.service = WorkerService(
            ServingConfig(model=args.model, served_name=args.served_model_name or args.model,
                          block_size=args.block_size, tp=self.tp, dp=self.dp, kv_role=reported,
                          handshake_port=int(kv_cfg.get("handshake_port", 6301)) if kv_cfg else 6301,
                          max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                          max_batched_tokens=args.max_num_batched_tokens, engine_tp=self.tp,
                          prefix_caching=args.enable_prefix_caching, metrics=atom_metrics_enabled(self.faults.metrics),
                          rev=simenv.atom_rev(), output_cap=self.faults.output_tokens,
                          output_cap_after=self.faults.output_after),
            self.connector, on_request=self.on_request)

    def parse_kv_config(self) -> tuple[dict, str | None]:
        try:
            raw = json.loads(self.args.kv_transfer_config)
        except json.JSONDecodeError as e:
            frames = [(API, "main", "engine = engine_args.create_engine(tokenizer=tokenizer)"),
                      ("atom/config.py", "__post_init__", "self.kv_transfer_config = json.loads(kv_transfer_config)")]
            self.crash(frames, f"json.decoder.JSONDecodeError: {e}")
        if not isinstance(raw, dict) or not raw:
            return {}, None
        kv_cfg, role = resolve_kv_config(raw)
        connector = kv_cfg.get("kv_connector")
        if connector != "mooncake":
            self.crash([("atom/kv_transfer/disaggregation/factory.py", "create_connector", "raise ValueError(")],
                       f"ValueError: Unsupported KV connector: {raw.get('kv_connector')!r} "
                       f"(the atomdeck simulator implements 'mooncake' and 'multi' with a mooncake connector)")
        return kv_cfg, role

    def parse_capture_sizes(self) -> list[int]:
        args = self.args
        try:
            sizes = ast.literal_eval(args.cudagraph_capture_sizes) if args.cudagraph_capture_sizes else []
        except (ValueError, SyntaxError):
            self.crash([("atom/model_engine/arg_utils.py", "parse_size_list", "raise ValueError(")],
                       f"ValueError: Error parsing size list: {args.cudagraph_capture_sizes}")
        if args.enforce_eager or args.level == 0 or args.cudagraph_mode == "NONE":
            return []
        return list(sizes) if isinstance(sizes, (list, tuple)) else [sizes]

    async def start_server(self) -> None:
        args = self.args
        if simenv.atom_rev() == "pin":
            log(f"Starting server on {args.host}:{args.server_port}...")
        else:
            log(f"Starting server on {args.host}:{args.server_port} (loop=uvloop)...")
        pid = os.getpid()
        atomlog.uvicorn(f"Started server process [{pid}]")
        atomlog.uvicorn("Waiting for application startup.")
        access = None if args.disable_uvicorn_access_log else self.access_log
        self.http = HttpServer(self.service.routes(), access_log=access)
        # ATOMSIM_BIND_PORT / ATOMSIM_BIND_HOST: the server ends up somewhere other than asked.
        host, port = self.faults.bind_host or self.bind_host, self.faults.bind_port or args.server_port
        shown_host = self.faults.bind_host or args.host
        try:
            await self.http.start(host, port)
        except OSError as e:
            # uvicorn server.py startup: `logger.error(exc)`; asyncio's create_server words the OSError itself
            # ("[Errno 98] error while attempting to bind on address ('0.0.0.0', 8010): address already in use")
            atomlog.uvicorn(str(e), "ERROR")
            atomlog.uvicorn("Application shutdown complete.")
            atomlog.hard_exit(1)
        stamp = os.environ.get("ATOMSIM_BIND_STAMP")
        if stamp:  # benchmarks: the exact moment the HTTP port started accepting, one file per address:port
            with open(os.path.join(stamp, f"{host}_{port}"), "w") as f:
                f.write(repr(time.time()))
        log("Server started successfully and ready to accept requests")
        atomlog.uvicorn("Application startup complete.")
        atomlog.uvicorn(f"Uvicorn running on http://{shown_host}:{port} (Press CTRL+C to quit)")
        self.serving = True
        loop = asyncio.get_running_loop()
        self._tasks = []  # keep references: a task nobody holds may be collected mid-flight
        if self.faults.flood > 0:
            self._tasks.append(loop.create_task(self.flood(self.faults.flood)))
        if self.faults.crash_after is not None:
            self._tasks.append(loop.create_task(self.crash_later(self.faults.crash_after)))
        if self.faults.stall_after is not None:
            self._tasks.append(loop.create_task(self.stall_later(self.faults.stall_after)))
        if self.faults.hang_after is not None:
            self._tasks.append(loop.create_task(self.hang_later(self.faults.hang_after)))
        if self.faults.freeze_after is not None:
            self._tasks.append(loop.create_task(freeze_later(self.faults.freeze_after)))

    def access_log(self, req: Request, status: int) -> None:
        atomlog.uvicorn_access(req.peer, req.method, req.path, status, reason(status))

    def on_request(self) -> None:
        if not self.first_request_seen:
            self.first_request_seen = True
            self.maybe_crash("serving")
            if self.faults.crash_after_served is not None:  # the kill measured from the first request, not the start
                self._tasks.append(asyncio.get_running_loop().create_task(
                    self.crash_later(self.faults.crash_after_served)))

    async def crash_later(self, seconds: float) -> None:
        """``ATOMSIM_CRASH_AFTER``: one rank process is SIGKILLed (an OOM kill, a GPU fault); its EngineCore's
        monitor logs the death and shuts down (proctree.py), and the server then fails (core_died)."""
        await asyncio.sleep(seconds)
        pid = self.tree.rank_pid(self.faults.crash_rank)
        if pid is None:
            atomlog.err(f"atomsim: ATOMSIM_CRASH_RANK {self.faults.crash_rank!r} names no rank of this worker "
                        f"({', '.join(sorted(self.tree.ranks.values()))})")
            return
        os.kill(pid, signal.SIGKILL)

    def core_died(self, dp_rank: int, code: int) -> None:
        """An EngineCore ended under a live server: the engine's output handler raises and the server exits."""
        self.crash([(ENGINE, "monitor_engine_cores", "raise RuntimeError(")],
                   "RuntimeError: EngineCore encountered an issue. See stack trace above for the root cause.")

    async def stall_later(self, seconds: float) -> None:
        """``ATOMSIM_STALL_AFTER``: the engines stop producing tokens; HTTP (and /health) still answers."""
        await asyncio.sleep(max(0.0, seconds))
        self.service.sched.stall()

    async def hang_later(self, seconds: float) -> None:
        """``ATOMSIM_HANG_AFTER``: one rank never arrives at its collective (a hung RCCL peer, a GPU that stopped
        answering): it blocks in a receive, the other ranks of its EngineCore wait for it in the all-reduce, the
        EngineCore waits for their output, and the engines make no more tokens. Nothing is logged, as nothing is
        when a real collective hangs; HTTP and /health still answer."""
        await asyncio.sleep(max(0.0, seconds))
        if self.tree.hang(self.faults.hang_rank) is None:
            atomlog.err(f"atomsim: ATOMSIM_HANG_RANK {self.faults.hang_rank!r} names no rank of this worker "
                        f"({', '.join(sorted(self.tree.ranks.values()))})")
            return
        self.service.sched.stall()

    async def flood(self, rate: float) -> None:
        """Log ``rate`` engine-status lines per second, in batches every 100 ms."""
        count, owed, tick = 0, 0.0, 0.1
        next_at = time.monotonic()
        while True:
            owed += rate * tick
            lines = []
            while owed >= 1:
                owed -= 1
                count += 1
                lines.append(f"[atom {time.strftime('%H:%M:%S')}] Engine Core: running=0 reqs, waiting=0 reqs, "
                             f"KV cache usage=0.0%, prefix cache hit rate=0.0%, prompt throughput=0.0 tokens/s, "
                             f"generation throughput=0.0 tokens/s (status #{count})")
            atomlog.emit_many(lines)
            next_at += tick
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def shutdown(self, sig: int) -> None:
        if self.stopping:
            return
        self.stopping = True
        pid = os.getpid()
        if self.serving and sig == signal.SIGTERM:
            atomlog.uvicorn("Shutting down")
            if self.http:
                await self.http.close()
            atomlog.uvicorn("Waiting for application shutdown.")
            log("Server shutting down, releasing resources...")
            if self.connector:
                await self.connector.close()
            await asyncio.to_thread(self.tree.close)
            atomlog.uvicorn("Application shutdown complete.")
            atomlog.uvicorn(f"Finished server process [{pid}]")
        else:
            name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
            log(f"Received {name}, shutting down engine...")
            if self.http:
                await self.http.close()
            if self.connector:
                await self.connector.close()
            await asyncio.to_thread(self.tree.close)
            log("Engine shutdown complete.")
        atomlog.hard_exit(0)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``atom.entrypoints.openai_server`` shim."""
    atomlog.setup_streams()
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(Worker(args).run())
    except KeyboardInterrupt:
        atomlog.hard_exit(0)
