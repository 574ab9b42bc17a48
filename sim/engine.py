"""The simulated model: a word tokenizer, "KV cache" bytes computed from the prompt, and
tokens generated from KV bytes.

Generation reads only the KV bytes it is given, so a decode worker's answer depends on the
bytes Mooncake actually delivered: a failed or corrupted transfer cannot produce the right text.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

VOCAB = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "by", "at", "this", "are", "from", "or", "an", "but", "not", "which", "all", "one", "have", "they", "you", "were", "her", "his", "their", "has", "more", "will", "if", "can", "when", "there", "so", "been", "some", "what", "into", "other", "than", "then", "its", "only", "two", "these", "may", "new", "also", "time", "first", "could", "any", "like", "over", "such", "our", "way", "even", "most", "made", "after", "many", "before", "well", "must", "through", "back", "years", "where", "much", "your", "cache", "block", "prefill", "decode", "token", "kernel", "tensor", "rank", "node", "port", "router", "engine", "mooncake", "transfer", "handshake", "latency", "throughput", "batch", "stream", "graph", "expert", "layer", "attention", "memory", "queue", "request", "worker", "barrier", "signal", "model", "weight", "shard", "quant", "scale", "vector", "matrix", "sample", "river", "stone", "cloud", "light", "north", "quiet", "amber", "signal", "garden", "winter", "copper", "silver", "harbor", "lantern"]


def tokenize(text: str) -> list[str]:
    """Split text into word and punctuation tokens (at least one)."""
    return _TOKEN_RE.findall(text) or [""]


@functools.lru_cache(maxsize=65536)
def _token_id(token: str) -> int:
    return int.from_bytes(hashlib.sha1(token.encode()).digest()[:4], "big") % 150000


def token_ids(tokens: list[str]) -> list[int]:
    """Stable ids for prompt tokens (a 150k vocabulary, like a real tokenizer's)."""
    return [_token_id(t) for t in tokens]


def render_chat(messages: list[dict]) -> str:
    """A chat template: one tagged line per message, then the assistant tag."""
    parts = []
    for message in messages:
        content = message.get("content", "")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|{message.get('role', 'user')}|>{content}")
    return "\n".join(parts) + "\n<|assistant|>"


def num_blocks(num_tokens: int, block_size: int) -> int:
    return max(1, -(-num_tokens // max(1, block_size)))


def compute_kv(model: str, prompt: str, nbytes: int) -> bytes:
    """The KV bytes a forward pass over ``prompt`` would leave behind (deterministic)."""
    seed = hashlib.sha256(f"{model}\0{prompt}".encode()).digest()
    return hashlib.shake_256(seed).digest(nbytes)


def generate(kv: bytes, count: int) -> list[int]:
    """``count`` token ids drawn from the KV bytes."""
    rng = random.Random(hashlib.sha256(kv).digest())
    return [rng.randrange(len(VOCAB)) for _ in range(max(0, count))]


def detokenize(ids: list[int]) -> str:
    return "".join(" " + VOCAB[i % len(VOCAB)] for i in ids)
