"""AToMesh's worker registry and its workers (core/worker_registry.rs, core/worker.rs), as ROCm/ATOM's
atom/mesh/src has them at head ffdf3bb5 and at the router pin 087b82d9 (the same files).

- Workers by UUID v4 id and ``url_to_id``; ``reserve_id_for_url`` gives a POSTed URL its id before the
  worker exists (the id a later register reuses); a removed worker is marked unhealthy and its
  per-worker series are reset (observability/metrics/recorder.rs ``remove_worker_metrics``).
- Load (core/worker.rs ``WorkerLoadGuard``): a worker's ``load`` is the router's count of requests in
  flight through it; ``mesh_worker_requests_active{worker}`` is set at each change.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class WorkerEntry:
    url: str
    worker_type: str  # "prefill" | "decode" | "regular"
    bootstrap_port: int | None = None
    id: str = ""
    healthy: bool = False
    model_id: str = "unknown"
    labels: dict[str, str] = field(default_factory=dict)
    disable_health_check: bool = False
    api_key: str | None = None
    chat_template: str | None = None
    tp_size: int | None = None
    dp_size: int | None = None
    load: int = 0
    mesh: Any = None  # MeshMetrics, for the per-worker gauge

    def acquire(self) -> None:
        """A request starts through this worker (WorkerLoadGuard::new)."""
        self.load += 1
        self._report()

    def release(self) -> None:
        """It ended (the guard dropped); a removed worker's requests still count down on it."""
        self.load = max(0, self.load - 1)
        self._report()

    def _report(self) -> None:
        if self.mesh is not None:
            self.mesh.worker_active.labels(self.url).set(self.load)

    @property
    def priority(self) -> int:
        try:
            return int(self.labels.get("priority", ""))
        except ValueError:
            return 50  # DEFAULT_WORKER_PRIORITY

    @property
    def cost(self) -> float:
        try:
            return float(self.labels.get("cost", ""))
        except ValueError:
            return 1.0  # DEFAULT_WORKER_COST

    def info(self) -> dict[str, Any]:
        """worker.rs ``worker_to_info`` as openai-protocol's WorkerInfo serializes it (HTTP workers)."""
        data: dict[str, Any] = {
            "id": self.id, "url": self.url, "model_id": self.model_id, "priority": self.priority, "cost": self.cost,
            "worker_type": self.worker_type, "is_healthy": self.healthy, "load": self.load, "connection_mode": "HTTP",
        }
        if self.chat_template is not None:
            data["chat_template"] = self.chat_template
        if self.worker_type == "prefill" and self.bootstrap_port is not None:
            data["bootstrap_port"] = self.bootstrap_port
        if self.labels:
            data["metadata"] = dict(self.labels)
        data["disable_health_check"] = self.disable_health_check
        return data


def pending_info(worker_id: str, url: str, status: dict[str, Any]) -> dict[str, Any]:
    """openai-protocol's ``WorkerInfo::pending``: a reserved id whose worker is not registered."""
    return {"id": worker_id, "url": url, "model_id": "unknown", "priority": 0, "cost": 1.0, "worker_type": "unknown",
            "is_healthy": False, "load": 0, "connection_mode": "unknown", "disable_health_check": False,
            "job_status": status}


class Registry:
    def __init__(self, mesh: Any):
        self.mesh = mesh
        self.workers: dict[str, WorkerEntry] = {}  # id -> worker (the real map is unordered; this keeps insertion)
        self.url_to_id: dict[str, str] = {}

    def register(self, worker: WorkerEntry) -> str:
        """A URL that already has an id (reserved, or registered: an update) keeps it."""
        worker.id = self.url_to_id.get(worker.url) or str(uuid.uuid4())
        worker.mesh = self.mesh
        self.workers[worker.id] = worker
        self.url_to_id[worker.url] = worker.id
        return worker.id

    def reserve_id_for_url(self, url: str) -> str:
        return self.url_to_id.setdefault(url, str(uuid.uuid4()))

    def get(self, worker_id: str) -> WorkerEntry | None:
        return self.workers.get(worker_id)

    def get_by_url(self, url: str) -> WorkerEntry | None:
        wid = self.url_to_id.get(url)
        return self.workers.get(wid) if wid else None

    def get_url_by_id(self, worker_id: str) -> str | None:
        if worker_id in self.workers:
            return self.workers[worker_id].url
        return next((url for url, wid in self.url_to_id.items() if wid == worker_id), None)

    def remove_by_url(self, url: str) -> WorkerEntry | None:
        wid = self.url_to_id.pop(url, None)
        worker = self.workers.pop(wid, None) if wid else None
        if worker is not None:
            worker.healthy = False
            if self.mesh is not None:  # recorder.rs remove_worker_metrics: 0, and -1 where 0 means something
                self.mesh.worker_active.labels(url).set(0)
                self.mesh.cb_state.labels(url).set(-1)
                self.mesh.worker_health.labels(url).set(-1)
        return worker

    def all(self) -> list[WorkerEntry]:
        return list(self.workers.values())

    def of_type(self, kind: str) -> list[WorkerEntry]:
        return [w for w in self.workers.values() if w.worker_type == kind]

    def set_pool_size(self, worker: WorkerEntry) -> None:
        """register.rs / remove_from_worker_registry.rs: the pool of the worker's (type, mode, model)."""
        if self.mesh is not None:
            n = sum(1 for w in self.workers.values()
                    if w.worker_type == worker.worker_type and w.model_id == worker.model_id)
            self.mesh.pool_size.labels(worker.worker_type, "http", worker.model_id).set(n)
