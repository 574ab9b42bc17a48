"""AToMesh request routing: worker selection policies, the ATOM P/D relay, plain forwarding.

ATOM relay (http_pd_router.rs ``dispatch_atom_relay_internal``): POST the request to a prefill
with ``max_tokens: 1`` and ``kv_transfer_params: {do_remote_decode: true}``, take the
``kv_transfer_params`` of its answer, add ``remote_tp_size``/``remote_dp_size``/``remote_dp_rank``,
POST the original request plus those params to a decode, and return or stream its answer.
Retryable statuses are retried with AToMesh's exponential back-off unless ``--disable-retries``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import uuid
from collections.abc import AsyncIterator

from . import atomlog, httpd
from .httpd import ClientError, Response, json_response
from .router_registry import Registry, WorkerEntry

RETRYABLE = {408, 429, 500, 502, 503, 504}
TARGET = "mesh::routers::http_pd_router"


def policy_debug(name: str, a) -> str:
    """``{:?}`` of AToMesh's PolicyConfig for ``name``."""
    return {
        "random": "Random",
        "round_robin": "RoundRobin",
        "cache_aware": (f"CacheAware {{ cache_threshold: {a.cache_threshold}, balance_abs_threshold: "
                        f"{a.balance_abs_threshold}, balance_rel_threshold: {a.balance_rel_threshold}, "
                        f"eviction_interval_secs: {a.eviction_interval}, max_tree_size: {a.max_tree_size} }}"),
        "power_of_two": "PowerOfTwo { load_check_interval_secs: 5 }",
        "prefix_hash": (f"PrefixHash {{ prefix_token_count: {a.prefix_token_count}, "
                        f"load_factor: {a.prefix_hash_load_factor} }}"),
    }[name]


class Policy:
    """Pick one healthy worker."""

    def __init__(self, name: str):
        self.name = name
        self._next = 0

    def pick(self, workers: list[WorkerEntry], text: str) -> WorkerEntry | None:
        healthy = [w for w in workers if w.healthy]
        if not healthy:
            return None
        if self.name == "random":
            return random.choice(healthy)
        if self.name == "round_robin":
            self._next += 1
            return healthy[(self._next - 1) % len(healthy)]
        if self.name == "power_of_two":
            pair = random.sample(healthy, min(2, len(healthy)))
            return min(pair, key=lambda w: w.load)
        digest = hashlib.sha256(text[:1024].encode()).digest()     # cache_aware, prefix_hash
        return healthy[int.from_bytes(digest[:4], "big") % len(healthy)]


def error_response(status: int, code: str, message: str) -> Response:
    """routers/comm/error.rs ``create_error``: the reason phrase as ``type``, the code also in a header."""
    response = json_response({"error": {"type": httpd.reason(status), "code": code, "message": message}}, status)
    response.headers["X-Mesh-Error-Code"] = code
    return response


def status_text(status: int) -> str:
    return f"{status} {httpd.reason(status)}"


def request_text(body: dict) -> str:
    if "messages" in body:
        return json.dumps(body.get("messages"), sort_keys=True)
    return str(body.get("prompt", ""))


class Relay:
    """Routes one client request, with retries."""

    def __init__(self, args, registry: Registry, tp_sizes: dict[str, int], mesh=None):
        self.args = args
        self.mesh = mesh
        self.registry = registry
        self.tp_sizes = tp_sizes
        self.prefill_policy = Policy(args.prefill_policy or args.policy)
        self.decode_policy = Policy(args.decode_policy or args.policy)
        self.policy = Policy(args.policy)
        self.timeout = float(args.request_timeout_secs)

    def upstream(self, status: int) -> None:
        if self.mesh is not None:
            self.mesh.upstream.labels("http", str(status), "").inc()

    def worker_error(self, worker: WorkerEntry, exc: Exception) -> None:
        if self.mesh is not None:
            kind = "timeout" if "timed out" in str(exc) else "connection_error"
            self.mesh.worker_errors.labels(worker.url, kind).inc()

    def of_type(self, kind: str) -> list[WorkerEntry]:
        """Workers are looked up in the registry at each attempt: a removed one gets no new request."""
        return self.registry.of_type(kind)

    async def route(self, route: str, body: dict) -> Response:
        attempts = 1 if self.args.disable_retries else self.args.retry_max_retries + 1
        response = error_response(503, "no_workers", "No available workers")
        for attempt in range(attempts):
            if self.args.pd_disaggregation:
                response = await self.pd_once(route, body)
            else:
                response = await self.regular_once(route, body)
            if response.status not in RETRYABLE or attempt == attempts - 1:
                return response
            delay_ms = min(self.args.retry_max_backoff_ms,
                           self.args.retry_initial_backoff_ms * self.args.retry_backoff_multiplier ** attempt)
            delay_ms *= 1 + random.uniform(-1, 1) * self.args.retry_jitter_factor
            atomlog.rust("debug", "mesh::core::retry",
                         f"Retrying request after {delay_ms:.0f}ms (attempt {attempt + 1}/{attempts - 1})")
            if self.mesh is not None:
                self.mesh.worker_retries.labels("all", route).inc()
            await asyncio.sleep(max(0.0, delay_ms) / 1000)
        return response

    # ---- P/D -----------------------------------------------------------------------------

    async def pd_once(self, route: str, body: dict) -> Response:
        text = request_text(body)
        prefill = self.prefill_policy.pick(self.of_type("prefill"), text)
        decode = self.decode_policy.pick(self.of_type("decode"), text)
        if prefill is None:
            return error_response(503, "no_prefill_servers", "No prefill servers available")
        if decode is None:
            return error_response(503, "no_decode_servers", "No decode servers available")
        # http_pd_router.rs: a non-streamed request holds both workers' WorkerLoadGuard from before the
        # prefill call until its answer is read; a stream takes both guards when the decode's stream
        # begins and keeps them until it ends (create_streaming_response), none during its prefill
        held = () if body.get("stream") else (prefill, decode)
        for w in held:
            w.acquire()
        try:
            if self.args.backend != "atom":
                return await self.dual_dispatch(route, body, prefill, decode)
            return await self.atom_relay(route, body, prefill, decode)
        finally:
            for w in held:
                w.release()

    async def atom_relay(self, route: str, body: dict, prefill: WorkerEntry, decode: WorkerEntry) -> Response:
        transfer_id = f"xfer-{uuid.uuid4()}"
        prefill_body = {k: v for k, v in body.items() if k != "stream_options"}
        prefill_body.update({"kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False},
                             "stream": False, "max_tokens": 1, "return_token_ids": True})
        if "max_completion_tokens" in prefill_body:
            prefill_body["max_completion_tokens"] = 1
        try:
            answer = await httpd.request("POST", prefill.url + route, prefill_body, timeout=self.timeout)
            self.upstream(answer.status)
        except ClientError as e:
            self.worker_error(prefill, e)
            atomlog.rust("error", TARGET, f"ATOM prefill {prefill.url} request_id={transfer_id} failed: {e}")
            return error_response(502, "prefill_server_error", f"Prefill server error: {e}")
        if not 200 <= answer.status < 300:
            atomlog.rust("error", TARGET, f"ATOM prefill {prefill.url} request_id={transfer_id} "
                                          f"status={status_text(answer.status)} body={answer.text()}")
            return error_response(answer.status, "prefill_error",
                                  f"Prefill server error ({status_text(answer.status)}): {answer.text()}")
        try:
            prefill_json = answer.json()
        except ValueError as e:
            atomlog.rust("error", TARGET, f"ATOM prefill {prefill.url} request_id={transfer_id} "
                                          f"response parse failed: {e}")
            return error_response(502, "prefill_parse_error", f"Prefill response parse error: {e}")
        kv = prefill_json.get("kv_transfer_params") if isinstance(prefill_json, dict) else None
        if not isinstance(kv, dict):
            atomlog.rust("error", TARGET, f"ATOM prefill {prefill.url} request_id={transfer_id} "
                                          f"response missing kv_transfer_params")
            return error_response(502, "prefill_missing_kv_transfer_params",
                                  "Prefill response missing kv_transfer_params")
        tp = self.tp_sizes.get(prefill.url)
        if tp is None:
            # placement/backend/atom.rs enrich_decode_kv: tp_size is known only for the prefills the router
            # queried at startup (fetch_atom_prefill_info); a prefill added later through POST /workers has none
            why = f"tp_size missing for prefill {prefill.url}"
            atomlog.rust("error", TARGET, f"ATOM enrich_decode_kv failed for prefill {prefill.url} "
                                          f"request_id={transfer_id}: {why}")
            return error_response(500, "enrich_decode_kv_failed", f"Failed to enrich decode kv: {why}")
        kv["remote_dp_size"] = prefill.dp_size or 1
        kv["remote_tp_size"] = tp
        if isinstance(kv.get("dp_rank"), int):
            kv["remote_dp_rank"] = kv["dp_rank"]
        if isinstance(prefill_json.get("prompt_token_ids"), list) and prefill_json["prompt_token_ids"]:
            kv["prompt_token_ids"] = prefill_json["prompt_token_ids"]
        return await self.forward(decode, route, {**body, "kv_transfer_params": kv}, pd=True,
                                  attach=(prefill, decode))

    async def dual_dispatch(self, route: str, body: dict, prefill: WorkerEntry, decode: WorkerEntry) -> Response:
        """SGLang-style P/D: both workers get the request at once, with bootstrap fields."""
        host = prefill.url.split("://", 1)[-1].rsplit(":", 1)[0]
        extra = {"bootstrap_host": host, "bootstrap_port": prefill.bootstrap_port,
                 "bootstrap_room": random.getrandbits(63)}
        prefill_task = asyncio.ensure_future(
            httpd.request("POST", prefill.url + route, {**body, **extra, "stream": False}, timeout=self.timeout))
        response = await self.forward(decode, route, {**body, **extra}, pd=True, attach=(prefill, decode))
        try:
            await prefill_task
        except ClientError as e:
            atomlog.rust("error", TARGET, f"Prefill request failed: {e}")
        return response

    # ---- one worker ----------------------------------------------------------------------

    async def regular_once(self, route: str, body: dict) -> Response:
        worker = self.policy.pick(self.of_type("regular"), request_text(body))
        if worker is None:
            return error_response(503, "no_available_workers", "No available workers (all circuits open or unhealthy)")
        # http_router.rs: the load guard is taken only for these policies, and a stream keeps it to its end
        guarded = self.policy.name in ("cache_aware", "manual", "dp_sticky")
        if guarded:
            worker.acquire()
        response = await self.forward(worker, route, body, pd=False, held=(worker,) if guarded else ())
        return response

    async def forward(self, worker: WorkerEntry, route: str, body: dict, pd: bool,
                      attach: tuple[WorkerEntry, ...] = (), held: tuple[WorkerEntry, ...] = ()) -> Response:
        """Send to `worker`. A stream counts `attach` as loaded while it flows; `held` (already counted by the
        caller) are released when the answer ends, stream or not."""
        stream = bool(body.get("stream"))
        try:
            answer = await httpd.request("POST", worker.url + route, body, timeout=self.timeout, stream=True)
            self.upstream(answer.status)
        except ClientError as e:
            self.worker_error(worker, e)
            _release(held)
            if pd:
                atomlog.rust("error", TARGET, f"ATOM decode request failed decode_url={worker.url} error={e}")
                return error_response(502, "decode_server_error", f"Decode server error: {e}")
            atomlog.rust("error", "mesh::routers::http_router", f"Failed to send request to {worker.url}: {e}")
            return error_response(502, "request_failed", f"Request failed: {e}")
        if not 200 <= answer.status < 300:
            try:
                await answer.read()
            except ClientError:
                pass
            finally:
                answer.close()
                _release(held)
            if pd:
                atomlog.rust("error", TARGET,
                             f"ATOM decode {worker.url} returned error status={status_text(answer.status)}")
            return Response(answer.status, answer.body, answer.headers.get("content-type", "application/json"))
        content_type = answer.headers.get("content-type", "application/json")
        if stream:
            for w in attach:
                w.acquire()
            return Response(answer.status, b"", content_type, self._passthrough(answer, worker, (*attach, *held)))
        try:
            data = await answer.read()
        except ClientError as e:
            atomlog.rust("error", TARGET, f"Failed to read ATOM decode response: {e}")
            return error_response(500, "read_response_failed", "Failed to read response")
        finally:
            answer.close()
            _release(held)
        return Response(answer.status, data, content_type)

    @staticmethod
    async def _passthrough(answer: httpd.ClientResponse, worker: WorkerEntry,
                           guards: tuple[WorkerEntry, ...]) -> AsyncIterator[bytes]:
        try:
            assert answer.chunks is not None
            async for chunk in answer.chunks:
                yield chunk
        except ClientError as e:
            atomlog.rust("error", TARGET, f"Stream from {worker.url} broke: {e}")
        finally:
            answer.close()
            _release(guards)


def _release(workers: tuple[WorkerEntry, ...]) -> None:
    for w in workers:
        w.release()
