"""Simulated ``atomesh launch``: AToMesh's startup order, endpoints and shutdown.

Startup (atom/mesh/src/main.rs + server.rs): banner, metrics server, register every worker
(``/health`` probes with back-off, each failure logged), query each ATOM prefill's
``/kv_transfer_info`` (abort with exit 1 on a role other than ``kv_producer``), and only then
bind the router port. SIGTERM/SIGINT shut down gracefully with exit code 0.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

from . import atomlog, httpd, metrics, simenv
from .faults import ROUTER_STAGES, Faults, freeze_later, rust_error
from .httpd import ClientError, HttpServer, Request, Response, json_response, text_response
from .metrics import CONTENT_TYPE_LATEST
from .relay import Relay, error_response, policy_debug
from .router_args import clap_help, parse
from .router_registry import Registry, WorkerEntry
from .router_workers import Job, RouterHttpServer, WorkerService

SERVER = "mesh::server"


def error_type(status: int) -> str:
    """AToMesh's error_type label for a failed routed request."""
    if status in (408, 504):
        return "timeout"
    if status == 503:
        return "no_workers"
    if status in (400, 404, 413, 422):
        return "validation_error"
    if status >= 500:
        return "backend_error"
    return "internal_error"


def rust_option(value) -> str:
    return "None" if value is None else f"Some({value})"


class Router:
    def __init__(self, args, prefills: list[tuple[str, int | None]]):
        self.args = args
        self.prefills = prefills
        self.bind_host = simenv.bind_host(args.host)
        self.faults = Faults.from_env(ROUTER_STAGES, {self.bind_host, simenv.node_ip() or ""}, args.port)
        if args.pd_disaggregation:
            self.expected = ([WorkerEntry(url, "prefill", port) for url, port in prefills]
                             + [WorkerEntry(url, "decode") for url in args.decode])
        else:
            self.expected = [WorkerEntry(url, "regular") for url in args.worker_urls]
        self.tp_sizes: dict[str, int] = {}
        metrics.disable_created_series()
        self.mesh = metrics.MeshMetrics(args.prometheus_duration_buckets)
        self.model = args.model_path or "default"
        self.registry = Registry(self.mesh)
        self.service = WorkerService(args, self.registry)
        self.relay = Relay(args, self.registry, self.tp_sizes, self.mesh)
        self.http: HttpServer | None = None
        self.in_flight = 0
        self.first_request_seen = False
        self.stopping = False

    # ---- text ----------------------------------------------------------------------------

    def mode_debug(self) -> str:
        a = self.args
        if a.pd_disaggregation:
            prefills = ", ".join(f'("{u}", {rust_option(p)})' for u, p in self.prefills)
            pp = rust_option(policy_debug(a.prefill_policy, a) if a.prefill_policy else None)
            dp = rust_option(policy_debug(a.decode_policy, a) if a.decode_policy else None)
            return (f"PrefillDecode {{ prefill_urls: [{prefills}], decode_urls: {atomlog.rust_list(a.decode)}, "
                    f"prefill_policy: {pp}, decode_policy: {dp} }}")
        return f"Regular {{ worker_urls: {atomlog.rust_list(a.worker_urls)} }}"

    def banner(self) -> None:
        a = self.args
        atomlog.out("Atomesh starting...")
        atomlog.out(f"Host: {a.host}:{a.port}")
        atomlog.out(f"Mode: {'PD Disaggregated' if a.pd_disaggregation else f'Regular ({a.backend})'}")
        atomlog.out(f"Policy: {a.policy}")
        if a.pd_disaggregation and self.prefills:
            prefills = ", ".join(f'("{u}", {rust_option(p)})' for u, p in self.prefills)
            atomlog.out(f"Prefill nodes: [{prefills}]")
            atomlog.out(f"Decode nodes: {atomlog.rust_list(a.decode)}")

    def maybe_crash(self, stage: str) -> None:
        if not self.faults.crashes_at(stage):
            return
        first = self.expected[0].url if self.expected else "http://127.0.0.1:8000"
        messages = {
            "start": "Failed to submit worker initialization job: channel closed",
            "workers": "Failed to create router: worker registry is unavailable",
            "kv_info": (f"GET {first}/kv_transfer_info failed: error sending request for url "
                        f"({first}/kv_transfer_info): connection closed before message completed"),
            "ready": "Failed to create router: policy registry is unavailable",
            "serving": "router task failed: connection reset by peer",
        }
        rust_error(messages[stage], self.faults.crash_code)

    # ---- life cycle ----------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda s=sig: loop.create_task(self.shutdown(s)))
        a = self.args
        atomlog.set_rust_level(a.log_level)
        self.banner()
        if a.pd_disaggregation and (not self.prefills or not a.decode):
            rust_error("Configuration error: PD mode requires at least one prefill and one decode worker "
                       "(--prefill URL, --decode URL)")
        self.maybe_crash("start")
        await self.start_metrics()
        atomlog.rust("info", SERVER, f"Starting router on {a.host}:{a.port} | mode: {self.mode_debug()} | "
                                     f"policy: {policy_debug(a.policy, a)} | max_payload: "
                                     f"{a.max_payload_size // (1024 * 1024)}MB")
        atomlog.rust("info", SERVER, f"Initializing workers for routing mode: {self.mode_debug()}")
        self.service.start()
        self.service.submit(Job("InitializeWorkersFromConfig", "startup",
                                {"workers": self.service.startup_configs(self.expected)}))
        atomlog.rust("info", SERVER, "Worker initialization job submitted (will complete in background)")
        await self.wait_for_workers()
        workers = self.registry.all()
        healthy = sum(1 for w in workers if w.healthy)
        atomlog.rust("info", SERVER, f"Workers initialized: {len(workers)} total, {healthy} healthy")
        self.maybe_crash("workers")
        if a.pd_disaggregation and a.backend == "atom":
            await self.fetch_atom_prefill_info()
        elif a.pd_disaggregation and a.backend == "vllm":
            await self.fetch_vllm_bootstrap()
        self.maybe_crash("kv_info")
        if a.disable_health_check:
            atomlog.rust("info", SERVER, "Global health checks disabled via CLI/config; skipping health checker")
        else:
            self._health_task = loop.create_task(self.health_checker())  # keep a reference
        if a.max_concurrent_requests == -1:
            atomlog.rust("info", SERVER, "Rate limiting is disabled (max_concurrent_requests = -1)")
        urls = [w.url for w in self.registry.all()]
        atomlog.rust("info", SERVER, f"Router ready | workers: {atomlog.rust_list(urls)}")
        self.maybe_crash("ready")
        if self.faults.never_bind:
            await asyncio.Event().wait()
        if self.faults.bind_delay:
            await asyncio.sleep(self.faults.bind_delay)
        atomlog.rust("info", SERVER, f"Starting server on {a.host}:{a.port}")
        self.http = RouterHttpServer(self.routes(), self.service, self._measured)
        try:
            await self.http.start(self.faults.bind_host or self.bind_host, self.faults.bind_port or a.port)
        except OSError as e:
            atomlog.err(f'Error: Os {{ code: {e.errno}, kind: AddrInUse, message: "{e.strerror}" }}'
                        if e.errno == 98 else f"Error: {e}")
            atomlog.hard_exit(1)
        if self.faults.freeze_after is not None:
            self._freeze_task = loop.create_task(freeze_later(self.faults.freeze_after))
        await asyncio.Event().wait()

    async def start_metrics(self) -> None:
        a = self.args
        host = simenv.bind_host(a.prometheus_host)
        # AToMesh's Prometheus exporter is its own HTTP listener on --prometheus-host:--prometheus-port.
        self.metrics_http = HttpServer({("GET", "/metrics"): self.metrics})
        try:
            await self.metrics_http.start(host, a.prometheus_port)
        except OSError as e:
            atomlog.rust("error", "mesh::observability::metrics",
                         f"Failed to start Prometheus exporter on {a.prometheus_host}:{a.prometheus_port}: {e}")

    async def wait_for_workers(self) -> None:
        """server.rs startup: the workers' AddWorker jobs run in the background; poll the registry every
        500 ms until every configured URL is registered (head; the pin waits for the count only), for at
        most --worker-startup-timeout-secs + 60 s."""
        expected = [w.url for w in self.expected]
        start = time.monotonic()
        max_wait = self.args.worker_startup_timeout_secs + 60
        pin = simenv.atom_rev() == "pin"
        while expected:
            current = len(self.registry.workers)
            registered = [w.url.rstrip("/") for w in self.registry.all()]
            missing = [u for u in expected if not any(r == u.rstrip("/") or r.startswith(u.rstrip("/") + "@")
                                                      for r in registered)]
            elapsed = atomlog.rust_duration(time.monotonic() - start)
            if current >= len(expected) and (pin or not missing):
                atomlog.rust("info", SERVER, f"All {len(expected)} expected workers registered (took {elapsed})"
                             if pin else f"All {len(expected)} expected worker endpoint(s) registered as {current} "
                                         f"worker(s) (took {elapsed})")
                return
            if time.monotonic() - start > max_wait:
                waited = atomlog.rust_duration(max_wait)
                atomlog.rust("warn", SERVER, f"Timed out waiting for workers: {current} of {len(expected)} "
                                             f"registered after {waited}" if pin else
                             f"Timed out waiting for workers: {current} worker(s) registered, expected "
                             f"{len(expected)} endpoint(s), missing {atomlog.rust_list(missing)} after {waited}")
                return
            await asyncio.sleep(0.5)

    async def fetch_atom_prefill_info(self) -> None:
        prefills = self.registry.of_type("prefill")
        if not prefills:
            rust_error("ATOM PD mode requires at least one prefill worker")
        for worker in prefills:
            base = worker.url.rstrip("/")
            info_url = f"{base}/kv_transfer_info"
            atomlog.rust("info", "mesh::routers::http_pd_router", f"Querying ATOM prefill kv_transfer_info: {info_url}")
            try:
                answer = await httpd.request("GET", info_url, timeout=30)
            except ClientError as e:
                rust_error(f"GET {info_url} failed: {e}")
            if answer.status != 200:
                rust_error(f"{info_url} returned {answer.status} {httpd.reason(answer.status)}")
            try:
                data = answer.json()
            except ValueError as e:
                rust_error(f"Parse {info_url} response: {e}")
            tp = data.get("tp_size") if isinstance(data, dict) else None
            if not isinstance(tp, int) or tp < 0:
                rust_error(f"Missing tp_size in {info_url} response")
            role = data.get("kv_role")
            if role != "kv_producer":
                shown = atomlog.rust_str(role if isinstance(role, str) else None)
                rust_error(f"{base} is not a prefill (kv_role={shown}, "
                           f"expected kv_producer)")
            atomlog.rust("info", "mesh::routers::http_pd_router", f"ATOM prefill {base} tp_size={tp}")
            worker.tp_size = tp
            self.tp_sizes[worker.url] = tp

    async def fetch_vllm_bootstrap(self) -> None:
        for worker in self.registry.of_type("prefill"):
            host = worker.url.split("://", 1)[-1].rsplit(":", 1)[0]
            addr = f"http://{host}:{worker.bootstrap_port or 8998}"
            atomlog.rust("info", "mesh::routers::http_pd_router", f"Querying vLLM prefill bootstrap: {addr}/query")
            try:
                answer = await httpd.request("GET", f"{addr}/query", timeout=30)
            except ClientError as e:
                rust_error(f"Failed to query vLLM bootstrap at {addr}/query: {e}")
            if answer.status != 200:
                rust_error(f"vLLM bootstrap {addr}/query returned status {answer.status}")

    async def health_checker(self) -> None:
        while True:
            await asyncio.sleep(self.args.health_check_interval_secs)
            for worker in self.registry.all():
                try:
                    answer = await httpd.request("GET", worker.url + self.args.health_check_endpoint,
                                                 timeout=self.args.health_check_timeout_secs)
                    ok = answer.status == 200
                except ClientError:
                    ok = False
                self.mesh.health_checks.labels(worker.url, "success" if ok else "failure").inc()
                if ok != worker.healthy:
                    atomlog.rust("warn" if not ok else "info", "mesh::core::worker_registry",
                                 f"Worker {worker.url} is now {'healthy' if ok else 'unhealthy'}")
                worker.healthy = ok

    # ---- endpoints -----------------------------------------------------------------------

    def routes(self) -> dict:
        routes = {
            ("GET", "/health"): self.liveness,
            ("GET", "/liveness"): self.liveness,
            ("GET", "/readiness"): self.readiness,
            ("GET", "/workers"): self.service.list,
            ("POST", "/workers"): self.service.create,
            ("GET", "/v1/models"): self.models,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/chat/completions"): self.completions,
        }
        return {key: self._measured(key[0], key[1], handler) for key, handler in routes.items()}

    def _measured(self, method: str, path: str, handler):
        """Count and time every HTTP request as AToMesh's middleware does (mesh_http_*)."""
        m = self.mesh

        async def wrapped(req: Request) -> Response:
            started = time.monotonic()
            m.http_connections.inc()
            try:
                response = await handler(req)
            finally:
                m.http_connections.dec()
            m.http_requests.labels(method, path).inc()
            m.http_responses.labels(str(response.status)).inc()
            if response.stream is None:
                m.http_duration.labels(method, path).observe(time.monotonic() - started)
            else:
                response.stream = self._timed_stream(response.stream, m.http_duration.labels(method, path), started)
            return response
        return wrapped

    @staticmethod
    async def _timed_stream(stream, histogram, started: float):
        try:
            async for chunk in stream:
                yield chunk
        finally:
            histogram.observe(time.monotonic() - started)

    async def metrics(self, _req: Request) -> Response:
        # mesh_worker_requests_active follows each load change and mesh_worker_pool_size each register and
        # removal (router_workers.py); health and circuit state are read here for the registered workers
        m = self.mesh
        for w in self.registry.all():
            m.worker_health.labels(w.url).set(1 if w.healthy else 0)
            m.cb_state.labels(w.url).set(0)
        return Response(200, m.render(), CONTENT_TYPE_LATEST)

    async def liveness(self, _req: Request) -> Response:
        return text_response("OK")

    async def readiness(self, _req: Request) -> Response:
        """observability/metrics/routes.rs readiness."""
        workers = self.registry.all()
        healthy = [w for w in workers if w.healthy]
        if self.args.pd_disaggregation:
            ready = any(w.worker_type == "prefill" for w in healthy) and any(w.worker_type == "decode" for w in healthy)
        else:
            ready = bool(healthy)
        if ready:
            return json_response({"status": "ready", "healthy_workers": len(healthy), "total_workers": len(workers)})
        return json_response({"status": "not ready", "reason": "insufficient healthy workers"}, 503)

    async def models(self, _req: Request) -> Response:
        kind = "prefill" if self.args.pd_disaggregation else "regular"
        workers = self.registry.of_type(kind)
        if not workers:
            return error_response(503, "no_prefill_servers", "No prefill servers available")
        try:
            answer = await httpd.request("GET", f"{workers[0].url}/v1/models", timeout=30)
        except ClientError as e:
            atomlog.rust("error", "mesh::routers::http_pd_router", f"Failed to proxy request server: {e}")
            return error_response(500, "proxy_request_failed", f"Failed to proxy request: {e}")
        if answer.status != 200:
            return error_response(answer.status, "server_error",
                                  f"Server returned status: {answer.status} {httpd.reason(answer.status)}")
        return Response(200, answer.body, answer.headers.get("content-type", "application/json"))

    async def completions(self, req: Request) -> Response:
        if not self.first_request_seen:
            self.first_request_seen = True
            self.maybe_crash("serving")
        try:
            body = req.json()
        except ValueError as e:
            return error_response(400, "invalid_json", f"Failed to parse the request body as JSON: {e}")
        if not isinstance(body, dict):
            return error_response(422, "invalid_request", "Failed to deserialize the JSON body: expected an object")
        endpoint = "chat" if req.path.endswith("/chat/completions") else "completions"
        backend = "pd" if self.args.pd_disaggregation else "regular"
        model = str(body.get("model") or self.model)
        route = ("http", backend, "http", model, endpoint)
        m = self.mesh
        m.router_requests.labels(*route, "true" if body.get("stream") else "false").inc()
        started = time.monotonic()
        self.in_flight += 1
        try:
            response = await self.relay.route(req.path, body)
        finally:
            self.in_flight -= 1
        if response.status >= 400:
            m.router_errors.labels(*route, error_type(response.status)).inc()
        if response.stream is None:
            m.router_duration.labels(*route).observe(time.monotonic() - started)
        else:
            response.stream = self._timed_stream(response.stream, m.router_duration.labels(*route), started)
        return response

    async def shutdown(self, sig: int) -> None:
        if self.stopping:
            return
        self.stopping = True
        what = "Ctrl+C" if sig == signal.SIGINT else "terminate signal"
        atomlog.rust("info", SERVER, f"Received {what}, starting graceful shutdown")
        if self.http is not None and self.http.server is not None:
            self.http.server.close()
        deadline = time.monotonic() + self.args.shutdown_grace_period_secs
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        atomlog.hard_exit(0)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``atomesh`` shim."""
    atomlog.setup_streams()
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("--version", "-V", "--version-verbose") for a in argv):
        atomlog.out("atom-mesh 0.1.0 (atomdeck simulator)")
        return
    if any(a in ("--help", "-h") for a in argv):
        atomlog.out(clap_help())
        return
    args, prefills = parse(argv)
    try:
        asyncio.run(Router(args, prefills).run())
    except KeyboardInterrupt:
        atomlog.hard_exit(0)
