"""AToMesh's job queue and worker API, as ROCm/ATOM's atom/mesh/src has them (identical at
head ffdf3bb5 and at the router pin 087b82d9 but for the DP-aware discovery step, which the simulator
does not model). sim/README.md ("The worker API") says which source file each behaviour comes from.

- Registry: router_registry.py.
- Job queue (core/job_queue.rs): jobs run in the background; their status is kept by worker URL:
  ``pending`` at submit, ``processing`` while running, dropped on success, ``failed`` with the error
  on failure (kept 5 minutes). Startup registration is the same AddWorker job for each configured worker.
- Workflows (core/steps/worker/...; wfaas 1.0.0's engine): add = detect connection (GET /health, retried
  with a linear back-off) -> metadata (GET /v1/models for --backend atom|vllm) -> create -> register ->
  activate; remove and update as their steps do.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from . import atomlog, httpd
from .httpd import ClientError, HttpServer, Request, Response, json_response, text_response
from .router_registry import Registry, WorkerEntry, pending_info
from .router_serde import BodyError, parse_uuid_error, read_body

JOBS = "mesh::core::job_queue"
STEPS = "mesh::core::steps::worker"
STATUS_TTL_S, CLEANUP_EVERY_S = 300, 60  # job_queue.rs cleanup_old_statuses
QUEUE_CAPACITY, MAX_CONCURRENT_JOBS = 1000, 200  # JobQueueConfig::default


@dataclass
class Job:
    kind: str  # AddWorker | RemoveWorker | UpdateWorker | InitializeWorkersFromConfig
    url: str
    body: dict[str, Any] = field(default_factory=dict)


class StepFailed(Exception):
    """wfaas ``WorkflowError::StepFailed``; its Display is ``Step failed: {step} - {message}``."""

    def __init__(self, step: str, message: str, timed_out: bool = False):
        # an attempt past the step's timeout is recorded as ``Step timeout after {:?}`` (wfaas engine.rs)
        super().__init__(message if timed_out else f"Step failed: {step} - {message}")
        self.step = step


def job_status(kind: str, url: str, status: str, message: str | None = None) -> dict[str, Any]:
    return {"job_type": kind, "worker_url": url, "status": status, "message": message, "timestamp": int(time.time())}


def reqwest_error(url: str, status: int | None = None) -> str:
    """reqwest 0.12's Display of a failed send (refused, reset, timed out) or of ``error_for_status``."""
    if status is None:
        return f"error sending request for url ({url})"
    side = "client" if status < 500 else "server"
    return f"HTTP status {side} error ({status} {httpd.reason(status)}) for url ({url})"


def detect_attempts(startup_timeout_s: int) -> int:
    """core/steps/worker/local/mod.rs ``create_local_worker_workflow``: attempts of the detect step."""
    effective = startup_timeout_s * 0.9
    return max(3, 5 + math.ceil((effective - 10.0) / 5.0)) if effective > 10.0 else 3


def rust_secs(seconds: float) -> str:
    return f"{seconds:g}s"  # {:?} of a whole-second Duration


def label_number(value: float) -> str:
    """Rust's Display of an f32/u32 label value (``2`` for 2.0, ``0.5``)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


class WorkerService:
    """The job queue, the workflows it runs and the /workers handlers (worker_service.rs)."""

    def __init__(self, args: Any, registry: Registry):
        self.args = args
        self.registry = registry
        self.status: dict[str, dict[str, Any]] = {}  # by worker URL
        self.queue: asyncio.Queue[Job] = asyncio.Queue(QUEUE_CAPACITY)
        self.slots = asyncio.Semaphore(MAX_CONCURRENT_JOBS)
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        for coro in (self._dispatch(), self._cleanup()):
            self._spawn(coro)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- queue (job_queue.rs) ------------------------------------------------------------

    def submit(self, job: Job) -> str | None:
        """None, or the error text of a full queue."""
        if self.queue.full():
            return f"Job queue full: {self.queue.qsize()} jobs pending (capacity: {QUEUE_CAPACITY})"
        self.status[job.url] = job_status(job.kind, job.url, "pending")
        self.queue.put_nowait(job)
        atomlog.rust("debug", JOBS, f"Job submitted: type={job.kind}, worker={job.url}, queue_depth="
                                    f"{self.queue.qsize()}, available_slots={self.slots._value}")
        return None

    async def _dispatch(self) -> None:
        while True:
            job = await self.queue.get()
            await self.slots.acquire()
            self._spawn(self._process(job))

    async def _process(self, job: Job) -> None:
        self.status[job.url] = job_status(job.kind, job.url, "processing")
        try:
            ok, message = await self._execute(job)
        finally:
            self.slots.release()
        if ok:
            self.status.pop(job.url, None)
            atomlog.rust("debug", JOBS, f"Completed job: type={job.kind}, worker={job.url}, result={message}")
        else:
            self.status[job.url] = job_status(job.kind, job.url, "failed", message)
            atomlog.rust("warn", JOBS, f"Failed job: type={job.kind}, worker={job.url}, error={message}")

    async def _cleanup(self) -> None:
        while True:
            await asyncio.sleep(CLEANUP_EVERY_S)
            now = int(time.time())
            for url in [u for u, s in self.status.items() if now - s["timestamp"] >= STATUS_TTL_S]:
                del self.status[url]

    async def _execute(self, job: Job) -> tuple[bool, str]:
        if job.kind == "InitializeWorkersFromConfig":
            count = 0
            for config in job.body["workers"]:
                error = self.submit(Job("AddWorker", config["url"], config))
                if error:
                    return False, f"Failed to submit AddWorker job for {config['worker_type']} worker " \
                                  f"{config['url']}: {error}"
                count += 1
            return True, f"Submitted {count} AddWorker jobs"
        if job.kind == "AddWorker":
            limit = self.args.worker_startup_timeout_secs + 30
            workflow, label = self._add(job.body), job.body["url"]
        elif job.kind == "RemoveWorker":
            limit, workflow, label = 30, self._remove(job.url), job.url
        else:
            limit, workflow, label = 30, self._update(job.url, job.body), job.url
        try:
            await asyncio.wait_for(workflow, limit)
            result = True, f"{label} completed successfully via workflow"
        except StepFailed as e:
            result = False, f"Workflow failed at step {e.step}: {e}"
        except TimeoutError:
            result = False, f"Workflow timeout after {limit}s for {label}"
        if job.kind == "RemoveWorker":
            self.status.pop(job.url, None)  # job_queue.rs: cleared after the workflow, before the outcome is kept
        return result

    # ---- workflows (core/steps/worker) -----------------------------------------------------

    async def _add(self, config: dict[str, Any]) -> None:
        url = config["url"]
        await self._detect(config)
        labels = await self._metadata(url)
        if self.registry.get_by_url(url) is not None:
            raise StepFailed("create_worker", f"Worker {url} already exists")
        for key, value in config["labels"].items():
            labels[key] = value
        if config["priority"] is not None:
            labels["priority"] = str(config["priority"])
        if config["cost"] is not None:
            labels["cost"] = label_number(config["cost"])
        kind = config["worker_type"] if config["worker_type"] in ("prefill", "decode") else "regular"
        disabled = bool(self.args.disable_health_check or config["disable_health_check"])
        worker = WorkerEntry(
            url if url.startswith(("http://", "https://", "grpc://")) else f"http://{url}", kind,
            config["bootstrap_port"] if kind == "prefill" else None, healthy=disabled,
            model_id=config["model_id"] or labels.get("served_model_name") or labels.get("model_path") or "unknown",
            labels=labels, disable_health_check=disabled, api_key=config["api_key"],
            chat_template=config["chat_template"])
        self.registry.register(worker)
        self.registry.set_pool_size(worker)
        tokenizer = labels.get("tokenizer_path") or labels.get("model_path") or self.args.tokenizer_path or \
            self.args.model_path
        if tokenizer:  # submit_tokenizer_job.rs; the tokenizer job itself is not simulated
            atomlog.rust("info", f"{STEPS}::local::submit_tokenizer_job",
                         f"Submitting tokenizer registration job for model {worker.model_id} from {tokenizer}")
        else:
            atomlog.rust("warn", f"{STEPS}::local::submit_tokenizer_job",
                         f"No tokenizer_path or model_path found for model {worker.model_id} (checked worker "
                         f"labels and router config)")
        worker.healthy = True
        atomlog.rust("info", f"{STEPS}::shared::activate", "Activated 1 worker(s) (marked as healthy)")

    async def _detect(self, config: dict[str, Any]) -> None:
        """detect_connection.rs: HTTP and gRPC probes; retried by the workflow engine (wfaas) with a linear
        back-off of 1 s more each time, at most 5 s; each attempt bounded by the startup timeout."""
        url, timeout = config["url"], config["health_check_timeout_secs"]
        stripped = url.removeprefix("http://").removeprefix("https://").removeprefix("grpc://")
        health_url = f"{'https' if url.startswith('https://') else 'http'}://{stripped}/health"
        runtime = config["runtime"]
        grpc = {None: "gRPC failed (tried SGLang and vLLM): gRPC connection failed: transport error",
                "sglang": "gRPC connection failed: transport error",
                "vllm": "gRPC connection failed: transport error"}.get(
            runtime, f"gRPC connection failed: Unknown runtime type: {runtime}")
        step_timeout = self.args.worker_startup_timeout_secs
        attempts, delay = detect_attempts(step_timeout), 1
        for attempt in range(1, attempts + 1):
            try:
                error = await asyncio.wait_for(self._http_health(health_url, timeout), step_timeout)
            except TimeoutError:
                error = f"Step timeout after {rust_secs(step_timeout)}"
                if attempt == attempts:
                    raise StepFailed("detect_connection_mode", error, timed_out=True) from None
            if error is None:
                return
            if attempt == attempts:
                raise StepFailed("detect_connection_mode", f"Both HTTP and gRPC health checks failed for {url}: "
                                                           f"HTTP: Health check failed: {error}, gRPC: {grpc}")
            await asyncio.sleep(delay)
            delay = min(delay + 1, 5)

    @staticmethod
    async def _http_health(health_url: str, timeout: float) -> str | None:
        try:
            answer = await httpd.request("GET", health_url, timeout=timeout)
        except (ClientError, ValueError, OSError):
            return reqwest_error(health_url)
        return None if 200 <= answer.status < 300 else reqwest_error(health_url, answer.status)

    async def _metadata(self, url: str) -> dict[str, str]:
        """discover_metadata.rs for HTTP workers; its failures are only logged."""
        base = url.rstrip("/")
        target = f"{STEPS}::local::discover_metadata"
        if self.args.backend in ("atom", "vllm"):
            endpoint = f"{base}/v1/models"
            try:
                answer = await httpd.request("GET", endpoint, timeout=10)
            except (ClientError, ValueError, OSError):
                atomlog.rust("warn", target, f"/v1/models failed for {url}: Failed to connect to {endpoint}: "
                                             f"{reqwest_error(endpoint)}")
                return {}
            if not 200 <= answer.status < 300:
                atomlog.rust("warn", target, f"/v1/models failed for {url}: Server returned status "
                                             f"{answer.status} {httpd.reason(answer.status)} from {endpoint}")
                return {}
            try:
                data = answer.json()
                ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
                model = next(i for i in ids if isinstance(i, str) and i)
            except (ValueError, AttributeError, StopIteration):
                atomlog.rust("warn", target, f"/v1/models failed for {url}: No model id in /v1/models response "
                                             f"from {endpoint}")
                return {}
            return {"model_path": model}
        labels: dict[str, str] = {}  # sglang: /server_info and /model_info, each falling back to /get_*
        for name in ("server_info", "model_info"):
            try:
                answer = await httpd.request("GET", f"{base}/{name}", timeout=10)
                if answer.status == 404:
                    atomlog.rust("warn", target, f"Endpoint '/{name}' returned 404, falling back to '/get_{name}' "
                                                 f"for backward compatibility. The '/get_{name}' endpoint is "
                                                 f"deprecated and will be removed in a future version. Please use "
                                                 f"'/{name}' instead.")
                    answer = await httpd.request("GET", f"{base}/get_{name}", timeout=10)
                data = answer.json() if 200 <= answer.status < 300 else {}
            except (ClientError, ValueError, OSError):
                continue
            keys = ("model_path", "served_model_name", "tp_size", "dp_size", "load_balance_method",
                    "disaggregation_mode") if name == "server_info" else ("tokenizer_path", "model_type")
            for key in keys:
                if isinstance(data, dict) and data.get(key) not in (None, ""):
                    labels[key] = str(data[key])
        return labels

    async def _remove(self, url: str) -> None:
        if self.registry.get_by_url(url) is None:
            raise StepFailed("find_workers_to_remove", f"Worker {url} not found")
        worker = self.registry.remove_by_url(url)
        if worker is not None:
            self.registry.set_pool_size(worker)
        atomlog.rust("info", f"{STEPS}::local::update_remaining_policies", f"Removed worker {url}")

    async def _update(self, url: str, update: dict[str, Any]) -> None:
        """update_worker_properties.rs: a new worker object replaces the old one under the same id, so its
        load counter starts at 0 (requests in flight count down on the old object) and it is healthy."""
        old = self.registry.get_by_url(url)
        if old is None:
            raise StepFailed("find_worker_to_update", f"Worker {url} not found")
        labels = {**old.labels, **(update["labels"] or {})}
        if update["priority"] is not None:
            labels["priority"] = str(update["priority"])
        if update["cost"] is not None:
            labels["cost"] = label_number(update["cost"])
        disabled = old.disable_health_check if update["disable_health_check"] is None \
            else update["disable_health_check"]
        new = WorkerEntry(old.url, old.worker_type, old.bootstrap_port, healthy=True, model_id=old.model_id,
                          labels=labels, disable_health_check=disabled, api_key=update["api_key"] or old.api_key,
                          chat_template=old.chat_template, tp_size=old.tp_size, dp_size=old.dp_size)
        self.registry.register(new)
        atomlog.rust("info", f"{STEPS}::local::update_worker_properties", f"Updated worker {url}")

    # ---- startup (server.rs startup + Job::InitializeWorkersFromConfig) -------------------

    def startup_configs(self, expected: list[WorkerEntry]) -> list[dict[str, Any]]:
        a = self.args
        return [{"url": w.url, "api_key": a.api_key, "worker_type": w.worker_type, "labels": {}, "model_id": None,
                 "priority": None, "cost": None, "runtime": None, "tokenizer_path": None, "reasoning_parser": None,
                 "tool_parser": None, "chat_template": a.chat_template, "bootstrap_port": w.bootstrap_port,
                 "health_check_timeout_secs": a.health_check_timeout_secs,
                 "health_check_interval_secs": a.health_check_interval_secs,
                 "health_success_threshold": a.health_success_threshold,
                 "health_failure_threshold": a.health_failure_threshold,
                 "disable_health_check": a.disable_health_check,
                 "max_connection_attempts": a.health_success_threshold * 10, "dp_aware": a.dp_aware}
                for w in expected]

    # ---- HTTP handlers (server.rs worker_routes -> worker_service.rs) ---------------------

    @staticmethod
    def _error(status: int, code: str, message: str) -> Response:
        return json_response({"error": message, "code": code}, status)  # WorkerErrorResponse

    def _parse_id(self, raw: str) -> Response | None:
        problem = parse_uuid_error(raw)
        if problem is None:
            return None
        return self._error(400, "BAD_REQUEST", f"Invalid worker_id '{raw}' (expected UUID). Error: {problem}")

    async def create(self, req: Request) -> Response:
        try:
            config = read_body(req.headers.get("content-type", ""), req.body, "WorkerConfigRequest")
        except BodyError as e:
            return text_response(e.text, e.status)
        if self.args.api_key and config["api_key"] is None:
            atomlog.rust("warn", "mesh::core::worker_service",
                         f"Adding worker {config['url']} without API key while router has API key configured. "
                         "Worker will be accessible without authentication. If the worker requires the same API "
                         "key as the router, please specify it explicitly.")
        config["dp_aware"] = self.args.dp_aware
        worker_id = self.registry.reserve_id_for_url(config["url"])
        error = self.submit(Job("AddWorker", config["url"], config))
        if error:
            return self._error(500, "INTERNAL_SERVER_ERROR", error)
        location = f"/workers/{worker_id}"
        body = {"status": "accepted", "worker_id": worker_id, "url": config["url"], "location": location,
                "message": "Worker addition queued for background processing"}
        response = json_response(body, 202)
        response.headers["location"] = location
        return response

    async def list(self, _req: Request) -> Response:
        workers = self.registry.all()
        return json_response({"workers": [w.info() for w in workers], "total": len(workers), "stats": {
            f"{kind}_count": sum(1 for w in workers if w.worker_type == kind)
            for kind in ("prefill", "decode", "regular")}})

    async def one(self, req: Request, raw: str) -> Response:
        update: dict[str, Any] = {}
        if req.method == "PUT":
            try:
                update = read_body(req.headers.get("content-type", ""), req.body, "WorkerUpdateRequest")
            except BodyError as e:  # axum runs the Json extractor before the handler reads the id
                return text_response(e.text, e.status)
        bad = self._parse_id(raw)
        if bad is not None:
            return bad
        if req.method == "GET":
            worker = self.registry.get(raw)
            if worker is not None:
                info = worker.info()
                if worker.url in self.status:
                    info["job_status"] = self.status[worker.url]
                return json_response(info)
            url = self.registry.get_url_by_id(raw)
            if url is not None and url in self.status:
                return json_response(pending_info(raw, url, self.status[url]))
            return self._error(404, "WORKER_NOT_FOUND", f"Worker {raw} not found")
        url = self.registry.get_url_by_id(raw)
        if url is None:
            return self._error(404, "WORKER_NOT_FOUND", f"Worker {raw} not found")
        if req.method == "DELETE":
            error = self.submit(Job("RemoveWorker", url))
            message = "Worker removal queued for background processing"
        else:
            error = self.submit(Job("UpdateWorker", url, update))
            message = "Worker update queued for background processing"
        if error:
            return self._error(500, "INTERNAL_SERVER_ERROR", error)
        return json_response({"status": "accepted", "worker_id": raw, "message": message}, 202)


class RouterHttpServer(HttpServer):
    """The simulator's HTTP server plus axum's ``/workers/{worker_id}`` path parameter."""

    def __init__(self, routes: dict, service: WorkerService, measured: Any):
        super().__init__(routes)
        self.service = service
        self.measured = measured  # (method, path label, handler) -> handler counted as the router counts

    async def _dispatch(self, request: Request) -> Response:
        rest = request.path.removeprefix("/workers/")
        if rest != request.path and rest and "/" not in rest:
            if request.method not in ("GET", "PUT", "DELETE"):
                return Response(405, b"", "text/plain")
            raw = unquote(rest)

            async def handler(req: Request) -> Response:
                return await self.service.one(req, raw)
            return await self.measured(request.method, request.path, handler)(request)
        return await super()._dispatch(request)
