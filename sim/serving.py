"""The simulated ATOM server's HTTP endpoints (OpenAI shapes, SSE streaming, P/D roles)."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from . import atomlog, engine, simenv
from .httpd import Request, Response, json_response, sse_response
from .kv import BYTES_PER_BLOCK, KVTransferError, MooncakeConnector

log = atomlog.atom
TOKEN_TIME = 0.01        # simulated seconds per decoded token
PREFILL_TIME = 0.002     # simulated seconds per prompt token


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


class WorkerService:
    """Request handling for one simulated ATOM server."""

    def __init__(self, cfg: ServingConfig, connector: MooncakeConnector | None,
                 on_request: Callable[[], None] | None = None):
        self.cfg = cfg
        self.kv = connector
        self.on_request = on_request
        self.seq_ids = itertools.count()
        self.dp_ranks = itertools.cycle(range(max(1, cfg.dp)))

    def routes(self) -> dict:
        return {
            ("GET", "/health"): self.health,
            ("GET", "/v1/models"): self.models,
            ("GET", "/kv_transfer_info"): self.kv_transfer_info,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/chat/completions"): self.chat_completions,
        }

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
        prompt_tokens = engine.tokenize(prompt)
        kv_len = engine.num_blocks(len(prompt_tokens), self.cfg.block_size) * BYTES_PER_BLOCK
        params = body.get("kv_transfer_params") if isinstance(body.get("kv_transfer_params"), dict) else {}
        out_params = None
        if self.kv is not None and params.get("do_remote_decode"):
            if not self.kv.is_producer:
                raise RequestError(500, "Only the producer side handles do_remote_decode")
            kv_bytes, out_params = await self._prefill(seq_id, prompt, kv_len)
        elif self.kv is not None and params.get("do_remote_prefill"):
            if self.kv.is_producer:
                raise RequestError(500, "Only the decode (consumer) side handles do_remote_prefill")
            expected = engine.compute_kv(self.cfg.model, prompt, kv_len)
            try:
                kv_bytes = await self.kv.receive(params, seq_id, expected, next(self.dp_ranks))
            except KVTransferError as e:
                raise RequestError(500, f"KV transfer failed: {e}") from e
        else:
            await simenv.pause(PREFILL_TIME * len(prompt_tokens))
            kv_bytes = engine.compute_kv(self.cfg.model, prompt, kv_len)
        ids = engine.generate(kv_bytes, max_tokens)
        if out_params is not None:
            out_params["first_token_id"] = ids[0] if ids else None
        usage = {"prompt_tokens": len(prompt_tokens), "completion_tokens": len(ids),
                 "total_tokens": len(prompt_tokens) + len(ids)}
        extra: dict[str, Any] = {}
        if out_params is not None:
            extra["kv_transfer_params"] = out_params
        if body.get("return_token_ids"):
            extra["prompt_token_ids"] = engine.token_ids(prompt_tokens)
        if body.get("stream"):
            log(f"API: Created request_id={request_id}, seq_id={seq_id}")
            return sse_response(self._stream(request_id, ids, usage, chat, extra))
        started = time.time()
        await simenv.pause(TOKEN_TIME * len(ids))
        latency = time.time() - started
        text = engine.detokenize(ids)
        usage.update({"ttft_s": 0.0, "tpot_s": round(latency / max(1, len(ids)), 4), "latency_s": round(latency, 4)})
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
        resp = {"id": request_id, "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.cfg.served_name, "choices": [choice], "usage": usage}
        return json_response({**resp, **extra})

    async def _prefill(self, seq_id: int, prompt: str, kv_len: int) -> tuple[bytes, dict]:
        assert self.kv is not None
        await simenv.pause(PREFILL_TIME * (kv_len // BYTES_PER_BLOCK) * self.cfg.block_size)
        kv_bytes = engine.compute_kv(self.cfg.model, prompt, kv_len)
        dp_rank = next(self.dp_ranks)
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
        return kv_bytes, params

    async def _stream(self, request_id: str, ids: list[int], usage: dict, chat: bool,
                      extra: dict) -> AsyncIterator[bytes]:
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None, **more: Any) -> bytes:
            if chat:
                delta = {"content": text} if text else {}
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
            data = {"id": request_id, "object": obj, "created": created, "model": self.cfg.served_name,
                    "choices": [choice], **more}
            return f"data: {json.dumps(data)}\n\n".encode()

        if chat:
            yield chunk("", None)
        for token in ids:
            await simenv.pause(TOKEN_TIME)
            yield chunk(engine.detokenize([token]), None)
        yield chunk(None, "length", **extra)
        usage_chunk = {"id": request_id, "object": obj, "created": created, "model": self.cfg.served_name,
                       "usage": usage}
        yield f"data: {json.dumps(usage_chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"
