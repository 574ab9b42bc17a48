"""One streamed request to an OpenAI-compatible server, timed token by token (aiohttp, SSE).

The body asks for exactly `max_tokens` output tokens (`ignore_eos`, `min_tokens`) and for the usage
chunk (`stream_options.include_usage`); the server's counts are used when it sends them. Every failure
(HTTP status, a broken stream, an error event, no token at all) becomes a record with the error text:
nothing is dropped.
"""

from __future__ import annotations

import json
import time

import aiohttp

from .stats import RequestRecord
from .workload import ENDPOINTS, Prompt

ERROR_TEXT = 300  # characters of an error body kept in the record
_decode = json.JSONDecoder().decode  # str in: skips json.loads' encoding detection on every chunk


def request_body(model: str, prompt: Prompt, max_tokens: int, endpoint: str) -> dict:
    body: dict = {"model": model, "max_tokens": max_tokens, "min_tokens": max_tokens, "ignore_eos": True,
                  "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    return body


def _token_text(event: dict, chat: bool) -> str:
    choices = event.get("choices") or ()
    if not choices:
        return ""
    c = choices[0]
    if chat:
        delta = c.get("delta") or {}
        return delta.get("content") or delta.get("reasoning_content") or ""
    return c.get("text") or ""


async def stream_request(session: aiohttp.ClientSession, base_url: str, model: str, prompt: Prompt,
                         max_tokens: int, endpoint: str, index: int, t0: float) -> RequestRecord:
    """Send one streaming request; `t0` is the step's start on time.perf_counter's clock."""
    chat = endpoint == "chat"
    rec = RequestRecord(index=index, start=0.0, prompt_words=prompt.words, max_tokens=max_tokens)
    body = request_body(model, prompt, max_tokens, endpoint)
    start = time.perf_counter()
    rec.start = start - t0
    last = start
    usage_prompt = usage_out = None
    try:
        async with session.post(base_url + ENDPOINTS[endpoint], json=body) as resp:
            if resp.status != 200:
                text = (await resp.text(errors="replace"))[:ERROR_TEXT]
                rec.error = f"HTTP {resp.status}: {text.strip()}"
                rec.e2el = time.perf_counter() - start
                return rec
            buf = b""
            done = False
            async for data in resp.content.iter_any():
                now = time.perf_counter()
                lines = (buf + data if buf else data).split(b"\n")
                buf = lines.pop()  # an unfinished line waits for the next read
                for line in lines:
                    if line[:5] != b"data:":
                        continue  # blank separators, comments, "event:" lines
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    try:
                        event = _decode(payload.decode())
                    except (ValueError, UnicodeDecodeError):
                        rec.error = f"bad SSE data: {payload[:ERROR_TEXT].decode(errors='replace')}"
                        rec.e2el = now - start
                        return rec
                    if "error" in event:
                        err = event["error"]
                        msg = err.get("message", err) if isinstance(err, dict) else err
                        rec.error = f"error event: {str(msg)[:ERROR_TEXT]}"
                        rec.e2el = now - start
                        return rec
                    usage = event.get("usage")
                    if usage:
                        usage_prompt = usage.get("prompt_tokens", usage_prompt)
                        usage_out = usage.get("completion_tokens", usage_out)
                    if _token_text(event, chat):
                        if rec.chunks == 0:
                            rec.ttft = now - start
                        else:
                            rec.itl.append(now - last)
                        rec.chunks += 1
                        last = now
            rec.e2el = time.perf_counter() - start
            if rec.chunks == 0:
                rec.error = "the stream ended without a token" + ("" if done else " (and without [DONE])")
                return rec
    except aiohttp.ClientError as e:
        rec.error = f"{type(e).__name__}: {str(e)[:ERROR_TEXT]}"
        rec.e2el = time.perf_counter() - start
        return rec
    except TimeoutError:
        rec.error = "timed out" + (" mid-stream" if rec.chunks else " with no token")  # (grouped by text)
        rec.e2el = time.perf_counter() - start
        return rec
    rec.success = True
    rec.usage = usage_out is not None
    rec.output_tokens = int(usage_out) if usage_out is not None else rec.chunks
    rec.prompt_tokens = int(usage_prompt) if usage_prompt is not None else (prompt.words or 0)
    return rec
