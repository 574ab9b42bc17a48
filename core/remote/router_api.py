"""AToMesh's worker API, from core: list, read, add, update and remove one worker of a live router, and
wait for the router's background job. On core's HTTP client (probes.HttpClient), so it works from here
and through a login host's SSH channel, like the router watcher.

What the router does (ROCm/ATOM atom/mesh/src, identical at head ffdf3bb5 and the pin 087b82d9;
sim/README.md "The worker API" has the details and the source files):
- `POST /workers` answers 202 at once with the worker's id (a UUID the router reserves for the URL) and
  `Location: /workers/{id}`; an AddWorker job then probes `/health` (retried up to about 90 % of the
  router's --worker-startup-timeout-secs), reads the model id from `/v1/models`, registers the worker
  and marks it healthy. `DELETE` and `PUT /workers/{id}` answer 202 too; their jobs run the same way.
- `GET /workers/{id}` shows the job while it runs (`job_status.status` pending/processing) and after it
  failed (`failed`, with the router's error in `message`, kept 5 minutes); a finished add shows the
  worker with no job status; a finished removal answers 404 WORKER_NOT_FOUND.
- A worker's `load` is the router's count of requests in flight through it (a non-streamed request holds
  its prefill and decode from its start; a stream holds both from its first byte to its end). Once the
  worker is removed it is no longer listed; its `mesh_worker_requests_active{worker}` gauge is reset to 0
  at the removal and set again to the true count only as each of its remaining requests ends, so read
  the load before the removal, not the gauge after it.
- A prefill the router did not have at its start has no tp_size: through AToMesh's ATOM relay every
  request routed to it fails (500 enrich_decode_kv_failed). Re-adding a prefill under a URL the router
  started with works.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from .probes import HttpClient, HttpResult
from .shell import Runner

JobType = Literal["AddWorker", "RemoveWorker", "UpdateWorker"]
WorkerType = Literal["prefill", "decode", "regular"]


class RouterApiError(Exception):
    """Something went wrong talking to the router's worker API; the text says what."""


class RouterUnreachable(RouterApiError):
    """No HTTP answer (refused, reset, timed out)."""


class RouterRefused(RouterApiError):
    """An HTTP error answer: `status`, the router's `code` (WORKER_NOT_FOUND, BAD_REQUEST, ...; empty for
    axum's plain-text body errors) and its `message`."""

    def __init__(self, where: str, status: int, code: str, message: str):
        super().__init__(f"{where}: HTTP {status}{' ' + code if code else ''}: {message}")
        self.status, self.code, self.message = status, code, message


class JobFailed(RouterApiError):
    """The router's job failed; `status.message` is the router's own error text."""

    def __init__(self, worker_id: str, status: JobStatus):
        super().__init__(f"the router's {status.job_type} job for {status.worker_url} (worker {worker_id}) "
                         f"failed: {status.message}")
        self.worker_id, self.status = worker_id, status


class JobTimeout(RouterApiError):
    """The job did not end before the deadline; `last` is what the router said last."""

    def __init__(self, text: str, last: JobStatus | None):
        super().__init__(text)
        self.last = last


@dataclass(frozen=True)
class JobStatus:
    job_type: str
    worker_url: str
    status: str  # pending | processing | failed
    message: str | None
    timestamp: int

    @classmethod
    def of(cls, data: dict[str, Any]) -> JobStatus:
        return cls(str(data.get("job_type", "")), str(data.get("worker_url", "")), str(data.get("status", "")),
                   data.get("message"), int(data.get("timestamp") or 0))


@dataclass(frozen=True)
class RouterWorker:
    """One entry of GET /workers (openai-protocol's WorkerInfo). A reserved id whose worker is not registered
    yet (or whose add failed) has worker_type "unknown" and a job_status (`pending`)."""

    id: str
    url: str
    model_id: str
    worker_type: str
    is_healthy: bool
    load: int
    priority: int = 50
    cost: float = 1.0
    connection_mode: str = "HTTP"
    bootstrap_port: int | None = None
    disable_health_check: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    job_status: JobStatus | None = None

    @property
    def pending(self) -> bool:
        return self.worker_type == "unknown"

    @classmethod
    def of(cls, data: dict[str, Any]) -> RouterWorker:
        job = data.get("job_status")
        return cls(id=str(data.get("id", "")), url=str(data.get("url", "")), model_id=str(data.get("model_id", "")),
                   worker_type=str(data.get("worker_type", "")), is_healthy=bool(data.get("is_healthy")),
                   load=int(data.get("load") or 0), priority=int(data.get("priority") or 0),
                   cost=float(data.get("cost") or 0.0), connection_mode=str(data.get("connection_mode", "")),
                   bootstrap_port=data.get("bootstrap_port"),
                   disable_health_check=bool(data.get("disable_health_check")),
                   metadata=dict(data.get("metadata") or {}),
                   job_status=JobStatus.of(job) if isinstance(job, dict) else None)


@dataclass(frozen=True)
class WorkerList:
    workers: list[RouterWorker]
    total: int
    prefill_count: int
    decode_count: int
    regular_count: int

    def by_url(self, url: str) -> RouterWorker | None:
        want = url.rstrip("/")
        return next((w for w in self.workers if w.url.rstrip("/") == want), None)


@dataclass(frozen=True)
class Accepted:
    """A 202: the job is queued. `location` is `/workers/{worker_id}`."""

    worker_id: str
    location: str
    message: str
    url: str | None = None


@dataclass(frozen=True)
class JobDone:
    """How a job ended well: the worker as registered now (None after a removal)."""

    job_type: JobType
    worker_id: str
    worker: RouterWorker | None


class RouterApi:
    """The worker API of the router at host:port (its --port), through `runner` (None: from here)."""

    def __init__(self, host: str, port: int, http: HttpClient | None = None, runner: Runner | None = None,
                 timeout: float = 5.0):
        self.host, self.port, self.runner, self.timeout = host, port, runner, timeout
        self.http = http or HttpClient()

    @property
    def where(self) -> str:
        return f"router {self.host}:{self.port}"

    async def _call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        r: HttpResult = await self.http.request(self.host, self.port, method, path, body, self.timeout, self.runner)
        if r.status == 0:
            raise RouterUnreachable(f"{self.where} unreachable ({method} {path}): {r.error}")
        data = r.json()
        if r.status not in ok:
            if isinstance(data, dict) and isinstance(data.get("error"), str):  # WorkerErrorResponse
                raise RouterRefused(f"{self.where} {method} {path}", r.status, str(data.get("code", "")),
                                    data["error"])
            raise RouterRefused(f"{self.where} {method} {path}", r.status, "", r.text(300))  # axum's text errors
        if not isinstance(data, dict):
            raise RouterApiError(f"{self.where} {method} {path}: HTTP {r.status} but not a JSON object: "
                                 f"{r.text(200)!r}")
        return data

    async def list_workers(self) -> WorkerList:
        data = await self._call("GET", "/workers")
        stats = data.get("stats") or {}
        workers = [RouterWorker.of(w) for w in data.get("workers") or [] if isinstance(w, dict)]
        return WorkerList(workers, int(data.get("total") or len(workers)), int(stats.get("prefill_count") or 0),
                          int(stats.get("decode_count") or 0), int(stats.get("regular_count") or 0))

    async def get_worker(self, worker_id: str) -> RouterWorker:
        """Raises RouterRefused with code WORKER_NOT_FOUND (404) or BAD_REQUEST (400, not a UUID)."""
        return RouterWorker.of(await self._call("GET", f"/workers/{worker_id}"))

    async def find_worker(self, url: str) -> RouterWorker | None:
        """The registered worker with this URL (a trailing / ignored), or None."""
        return (await self.list_workers()).by_url(url)

    async def worker_load(self, url: str) -> int | None:
        """The router's count of requests in flight through the worker at `url`; None when it is not
        registered (never added, or removed: see the module's note on the gauge)."""
        worker = await self.find_worker(url)
        return None if worker is None else worker.load

    async def add_worker(self, url: str, worker_type: WorkerType, bootstrap_port: int | None = None,
                         **fields: Any) -> Accepted:
        """POST /workers. `fields` are further WorkerConfigRequest fields (health_check_timeout_secs,
        model_id, priority, cost, labels, ...). Give `url` with its http://: without it the router registers
        the worker under a new id and the returned one is forgotten once the job succeeds."""
        body: dict[str, Any] = {"url": url, "worker_type": worker_type, **fields}
        if bootstrap_port is not None:
            body["bootstrap_port"] = bootstrap_port
        data = await self._call("POST", "/workers", body, ok=(202,))
        return Accepted(str(data.get("worker_id", "")), str(data.get("location", "")), str(data.get("message", "")),
                        data.get("url"))

    async def remove_worker(self, worker_id: str) -> Accepted:
        """DELETE /workers/{id}: the router stops sending it new requests once the job ran; requests already
        in flight through it run to their end."""
        data = await self._call("DELETE", f"/workers/{worker_id}", ok=(202,))
        return Accepted(worker_id, f"/workers/{worker_id}", str(data.get("message", "")))

    async def update_worker(self, worker_id: str, **fields: Any) -> Accepted:
        """PUT /workers/{id} with WorkerUpdateRequest fields (priority, cost, labels, api_key, health_*).
        The router replaces the worker object: its load restarts at 0 and it is marked healthy."""
        data = await self._call("PUT", f"/workers/{worker_id}", fields, ok=(202,))
        return Accepted(worker_id, f"/workers/{worker_id}", str(data.get("message", "")))

    async def wait_for_job(self, worker_id: str, job_type: JobType, deadline: float, poll_s: float = 0.2) -> JobDone:
        """Poll GET /workers/{id} until the job ends (deadline: time.monotonic()). Raises JobFailed with the
        router's error, JobTimeout, or RouterRefused/RouterUnreachable."""
        last: JobStatus | None = None
        while True:
            try:
                worker: RouterWorker | None = await self.get_worker(worker_id)
            except RouterRefused as e:
                if e.code != "WORKER_NOT_FOUND":
                    raise
                worker = None
            status = worker.job_status if worker is not None else None
            if status is not None and status.job_type == job_type:
                last = status
                if status.status == "failed":
                    raise JobFailed(worker_id, status)
            elif job_type == "RemoveWorker" and worker is None:
                return JobDone(job_type, worker_id, None)
            elif job_type != "RemoveWorker" and worker is not None and not worker.pending and status is None:
                return JobDone(job_type, worker_id, worker)
            elif job_type != "RemoveWorker" and worker is None:
                raise RouterApiError(f"{self.where} no longer knows worker {worker_id} while waiting for its "
                                     f"{job_type} job (a job's status is kept 5 minutes; a URL given without "
                                     f"http:// is registered under another id)")
            if time.monotonic() >= deadline:
                state = f"still {last.status}" if last else "not seen"
                raise JobTimeout(f"{self.where}: the {job_type} job of worker {worker_id} is {state} at the "
                                 f"deadline", last)
            await asyncio.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))

    async def requests_active(self, metrics_port: int, url: str, metrics_host: str | None = None) -> float | None:
        """`mesh_worker_requests_active{worker=url}` from the router's Prometheus listener (--prometheus-port),
        None when absent. Right after a removal it reads 0 whatever is still in flight (see the module doc)."""
        r = await self.http.request(metrics_host or self.host, metrics_port, "GET", "/metrics", None, self.timeout,
                                    self.runner)
        if r.status == 0:
            raise RouterUnreachable(f"router metrics {metrics_host or self.host}:{metrics_port} unreachable: "
                                    f"{r.error}")
        if r.status != 200:
            raise RouterRefused(f"router metrics {metrics_host or self.host}:{metrics_port}", r.status, "",
                                r.text(200))
        want = f'mesh_worker_requests_active{{worker="{url}"}}'
        for line in r.body.decode("utf-8", "replace").splitlines():
            if line.startswith(want):
                try:
                    return float(line[len(want):].strip())
                except ValueError:
                    return None
        return None

    async def aclose(self) -> None:
        await self.http.aclose()
