"""The simulated ATOM server's HTTP endpoints (OpenAI shapes, SSE streaming, P/D roles)."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from . import atomlog, engine
from .httpd import Request, Response, json_response, sse_response
from .kv import BYTES_PER_BLOCK, KVTransferError, MooncakeConnector
from .metrics import CONTENT_TYPE_LATEST, AtomMetrics
from .scheduler import Scheduler, Seq

log = atomlog.atom


class RequestError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class ServingConfig:
    model: str
    served_name: str
    block_size: int
    tp: int
    dp: int
    kv_role: str | None          # the role /kv_transfer_info reports
    handshake_port: int
    max_model_len: int | None
    max_num_seqs: int = 512
    max_batched_tokens: int = 16384
    engine_tp: int = 1                 # TP of each engine core (1 with DP attention)
    prefix_caching: bool = False
    metrics: bool = True               # serve /metrics (newer ATOM); False: 404 like the pin's ATOM
    rev: str = "head"                  # which ATOM's log wording: "head" or "pin" (ATOMSIM_ATOM_REV)
    output_cap: int | None = None      # ATOMSIM_OUTPUT_TOKENS: a server that stops early whatever was asked
    output_cap_after: float = 0.0      # ATOMSIM_OUTPUT_AFTER: seconds after the service starts


def params_of(body: dict) -> dict:
    return body.get("kv_transfer_params") if isinstance(body.get("kv_transfer_params"), dict) else {}


class WorkerService:
    """Request handling for one simulated ATOM server."""

    def __init__(self, cfg: ServingConfig, connector: MooncakeConnector | None,
                 on_request: Callable[[], None] | None = None):
        self.cfg = cfg
        self.kv = connector
        self.on_request = on_request
        self.seq_ids = itertools.count()
        self.born = time.monotonic()
        self.rev = cfg.rev
        self.sched = Scheduler(tp=cfg.engine_tp, dp=cfg.dp, max_num_seqs=cfg.max_num_seqs,
                               max_batched_tokens=cfg.max_batched_tokens, block_size=cfg.block_size,
                               prefix_caching=cfg.prefix_caching)
        self.metrics = AtomMetrics(self.sched.snapshot) if cfg.metrics else None

    def routes(self) -> dict:
        routes = {
            ("GET", "/health"): self.health,
            ("GET", "/v1/models"): self.models,
            ("GET", "/kv_transfer_info"): self.kv_transfer_info,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/chat/completions"): self.chat_completions,
        }
        if self.metrics is not None:
            routes[("GET", "/metrics")] = self.serve_metrics
        return routes

    async def serve_metrics(self, _req: Request) -> Response:
        assert self.metrics is not None
        return Response(200, self.metrics.render(), CONTENT_TYPE_LATEST)

    async def health(self, _req: Request) -> Response:
        return json_response({"status": "ok"})

    async def models(self, _req: Request) -> Response:
        card = {"id": self.cfg.served_name, "object": "model", "created": int(time.time()), "owned_by": "atom",
                "root": self.cfg.served_name, "max_model_len": self.cfg.max_model_len}
        return json_response({"object": "list", "data": [card]})

    async def kv_transfer_info(self, _req: Request) -> Response:
        return json_response({"tp_size": self.cfg.tp, "dp_size": self.cfg.dp, "kv_role": self.cfg.kv_role,
                              "handshake_port": self.cfg.handshake_port})

    async def completions(self, req: Request) -> Response:
        return await self._handle(req, chat=False)

    async def chat_completions(self, req: Request) -> Response:
        return await self._handle(req, chat=True)

    # ---- one request ---------------------------------------------------------------------

    async def _handle(self, req: Request, chat: bool) -> Response:
        if self.on_request:
            self.on_request()
        label = "chat_completions" if chat else "completions"
        try:
            body = req.json()
            if not isinstance(body, dict):
                raise RequestError(400, "request body must be a JSON object")
            self._validate_model(body.get("model"))
            prompt = self._prompt(body, chat)
            return await self._generate(body, prompt, chat)
        except RequestError as e:
            log(f"Validation error in {label}: {e.detail}" if e.status == 400 else f"Error in {label}: {e.detail}")
            return json_response({"detail": e.detail}, e.status)
        except (ValueError, TypeError) as e:
            log(f"Validation error in {label}: {e}")
            return json_response({"detail": str(e)}, 400)

    def _validate_model(self, requested: Any) -> None:
        if requested is None:
            return
        if str(requested).rstrip("/") != self.cfg.served_name.rstrip("/"):
            raise RequestError(400, f"Requested model '{requested}' does not match server model "
                                    f"'{self.cfg.served_name}'")

    @staticmethod
    def _prompt(body: dict, chat: bool) -> str:
        if chat:
            messages = body.get("messages") or body.get("prompt")
            if not isinstance(messages, list):
                raise RequestError(400, "Either 'messages' or 'prompt' field is required")
            return engine.render_chat(messages)
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        if not isinstance(prompt, str):
            raise RequestError(422, "field 'prompt' is required")
        return prompt

    async def _generate(self, body: dict, prompt: str, chat: bool) -> Response:
        seq_id = next(self.seq_ids)
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 256)
        if (self.cfg.output_cap is not None and not params_of(body).get("do_remote_decode")
                and time.monotonic() - self.born >= self.cfg.output_cap_after):
            max_tokens = min(max_tokens, max(0, self.cfg.output_cap))  # a fault: min_tokens/ignore_eos not honoured
        prompt_tokens = engine.tokenize(prompt)
        kv_len = engine.num_blocks(len(prompt_tokens), self.cfg.block_size) * BYTES_PER_BLOCK
        params = body.get("kv_transfer_params") if isinstance(body.get("kv_transfer_params"), dict) else {}
        out_params = None
        usage = {"prompt_tokens": len(prompt_tokens), "completion_tokens": max(0, max_tokens),
                 "total_tokens": len(prompt_tokens) + max(0, max_tokens)}
        extra: dict[str, Any] = {}
        if body.get("return_token_ids"):
            extra["prompt_token_ids"] = engine.token_ids(prompt_tokens)
        if self.kv is not None and params.get("do_remote_decode"):
            if not self.kv.is_producer:
                raise RequestError(500, "Only the producer side handles do_remote_decode")
            out_params = await self._prefill(seq_id, prompt, kv_len, len(prompt_tokens))
            ids = engine.generate(engine.compute_kv(self.cfg.model, prompt, kv_len), 1)
            out_params["first_token_id"] = ids[0] if ids else None
            extra["kv_transfer_params"] = out_params
            usage.update(completion_tokens=len(ids), total_tokens=len(prompt_tokens) + len(ids))
            return self._answer(request_id, ids, usage, chat, extra)
        if self.kv is not None and params.get("do_remote_prefill"):
            if self.kv.is_producer:
                raise RequestError(500, "Only the decode (consumer) side handles do_remote_prefill")
            work = self._remote_decode(params, seq_id, prompt, kv_len, len(prompt_tokens), max_tokens)
        else:
            work = self._local(prompt, kv_len, len(prompt_tokens), max_tokens)
        if body.get("stream"):
            if self.rev == "pin":
                log(f"API: Created request_id={request_id}, seq_id={seq_id}")
            # ATOM answers a stream's headers at once; tokens follow when the engine makes them.
            return sse_response(self._stream(request_id, work, usage, chat, extra))
        started = time.time()
        ids, seq = await work
        await self.sched.wait(seq)
        latency = time.time() - started
        text = engine.detokenize(ids)
        usage.update({"ttft_s": 0.0, "tpot_s": round(latency / max(1, len(ids)), 4), "latency_s": round(latency, 4)})
        return self._answer(request_id, ids, usage, chat, extra, text)

    def _answer(self, request_id: str, ids: list[int], usage: dict, chat: bool, extra: dict,
                text: str | None = None) -> Response:
        text = engine.detokenize(ids) if text is None else text
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
        resp = {"id": request_id, "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.cfg.served_name, "choices": [choice], "usage": usage}
        return json_response({**resp, **extra})

    async def _local(self, prompt: str, kv_len: int, n_prompt: int, max_tokens: int) -> tuple[list[int], Seq]:
        """Prefill and decode on this worker's engines."""
        seq = self.sched.submit(self.sched.pick_rank(), n_prompt, max_tokens)
        return engine.generate(engine.compute_kv(self.cfg.model, prompt, kv_len), max_tokens), seq

    async def _remote_decode(self, params: dict, seq_id: int, prompt: str, kv_len: int, n_prompt: int,
                             max_tokens: int) -> tuple[list[int], Seq]:
        """Receive the prefill's KV (parked until every write-done came), then decode from those bytes."""
        assert self.kv is not None
        rank = self.sched.pick_rank()
        expected = engine.compute_kv(self.cfg.model, prompt, kv_len)
        self.sched.parked += 1
        try:
            kv_bytes = await self.kv.receive(params, seq_id, expected, rank)
        except KVTransferError as e:
            raise RequestError(500, f"KV transfer failed: {e}") from e
        finally:
            self.sched.parked -= 1
        seq = self.sched.submit(rank, n_prompt, max_tokens, need_prefill=False)
        return engine.generate(kv_bytes, max_tokens), seq

    async def _prefill(self, seq_id: int, prompt: str, kv_len: int, n_prompt: int) -> dict:
        assert self.kv is not None
        dp_rank = self.sched.pick_rank()
        await self.sched.wait(self.sched.submit(dp_rank, n_prompt, 1))
        kv_bytes = engine.compute_kv(self.cfg.model, prompt, kv_len)
        try:
            block_ids = self.kv.store_prefill(seq_id, kv_bytes, dp_rank)
        except KVTransferError as e:
            raise RequestError(500, str(e)) from e
        params = {
            "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": block_ids,
            "remote_engine_id": self.kv.engine_id, "remote_host": self.kv.local_ip,
            "remote_port": self.kv.scheduler_port, "remote_handshake_port": self.kv.base_handshake_port,
            "tp_size": self.cfg.tp, "dp_rank": dp_rank, "transfer_id": seq_id, "first_token_id": None,
            "local_slot_index": -1,
        }
        return params

    async def _stream(self, request_id: str, work: Awaitable[tuple[list[int], Seq]], usage: dict, chat: bool,
                      extra: dict) -> AsyncIterator[bytes]:
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = (f'data: {{"id": "{request_id}", "object": "{obj}", "created": {created}, '
                f'"model": {json.dumps(self.cfg.served_name)}, "choices": [').encode()

        def event(text: str | None, finish: str | None) -> bytes:
            if chat:
                delta = {"content": text} if text else {}
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
            return head + json.dumps(choice).encode() + b"]}\n\n"

        seq = None
        try:
            try:
                ids, seq = await work
            except RequestError as e:
                log(f"Error in {'chat_completions' if chat else 'completions'}: {e.detail}")
                yield f"data: {json.dumps({'error': {'message': e.detail, 'code': e.status}})}\n\n".encode()
                return
            if chat:
                yield event("", None)
            sent = 0
            async for ready in self.sched.progress(seq):
                # Every token is its own SSE event; the events made ready by one engine step go out in one write.
                yield b"".join(event(engine.detokenize([t]), None) for t in ids[sent:ready])
                sent = ready
            last = {"id": request_id, "object": obj, "created": created, "model": self.cfg.served_name,
                    "choices": [{"index": 0, "text": "", "finish_reason": "length", "logprobs": None}
                                if not chat else {"index": 0, "delta": {}, "finish_reason": "length",
                                                  "logprobs": None}], **extra}
            usage_chunk = {"id": request_id, "object": obj, "created": created, "model": self.cfg.served_name,
                           "usage": usage}
            yield (f"data: {json.dumps(last)}\n\n" f"data: {json.dumps(usage_chunk)}\n\n" "data: [DONE]\n\n").encode()
        finally:
            if seq is not None:
                self.sched.cancel(seq)
