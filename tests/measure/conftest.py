"""A small real OpenAI-style streaming server (aiohttp.web on loopback) whose misbehaviours the client
must count: HTTP errors, error events, cut streams, short outputs, missing usage. Which one is chosen by
a word in the prompt. The simulator covers the well-behaved path in test_bench_local.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web


class Server:
    def __init__(self):
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.url = ""
        self.gap = 0.0

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request, body)
        finally:
            self.in_flight -= 1

    async def _answer(self, request, body):
        prompt = body.get("prompt") or body["messages"][0]["content"]
        chat = "messages" in body
        n = int(body["max_tokens"])
        if "fail500" in prompt:
            return web.json_response({"detail": "the engine fell over"}, status=500)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)

        async def event(obj) -> None:
            await resp.write(f"data: {json.dumps(obj)}\n\n".encode())

        def chunk(text):
            if chat:
                return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
            return {"choices": [{"index": 0, "text": text, "finish_reason": None}]}

        if "errevent" in prompt:
            await event(chunk(" a"))
            await event({"error": {"message": "KV transfer failed: timeout", "code": 500}})
            await resp.write(b"data: [DONE]\n\n")
            return resp
        if "cut" in prompt:
            await event(chunk(" a"))
            await asyncio.sleep(0.01)
            request.transport.close()  # the server goes away mid-stream
            return resp
        count = n // 2 if "short" in prompt else n
        if chat:
            await event({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
        for _ in range(count):
            if self.gap:
                await asyncio.sleep(self.gap)
            await event(chunk(" tok"))
        if "nousage" not in prompt:
            await event({"choices": [], "usage": {"prompt_tokens": len(prompt.split()) + 1,
                                                  "completion_tokens": count}})
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(self, request):
        return web.json_response({"data": [{"id": "m", "max_model_len": 2048}]})


@pytest.fixture
async def server():
    s = Server()
    app = web.Application()
    app.router.add_post("/v1/completions", s.completions)
    app.router.add_post("/v1/chat/completions", s.completions)
    app.router.add_get("/v1/models", s.models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    s.url = f"http://127.0.0.1:{port}"
    yield s
    await runner.cleanup()
