"""Registered KV memory for the simulated worker: per-rank regions and a block allocator."""

from __future__ import annotations

import ctypes
import mmap
import socket
import time
from collections import deque
from dataclasses import dataclass, field

BYTES_PER_BLOCK = 2048
NUM_BLOCKS = 4096
MAX_CHUNK = 2 * 1024**3 - 64 * 1024


class KVTransferError(RuntimeError):
    """A KV transfer that did not deliver the right bytes."""


class Region:
    """One rank's registered KV memory (anonymous mmap: untouched pages cost no RSS)."""

    def __init__(self, size: int):
        self.mm = mmap.mmap(-1, size)
        self.size = size
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))

    def write(self, block: int, data: bytes) -> None:
        off = block * BYTES_PER_BLOCK
        self.mm[off:off + len(data)] = data

    def read(self, block: int) -> bytes:
        off = block * BYTES_PER_BLOCK
        return self.mm[off:off + BYTES_PER_BLOCK]


class BlockAllocator:
    """Free-list of block ids, shared by all ranks' regions."""

    def __init__(self, count: int):
        self.free_ids = deque(range(count))

    def alloc(self, count: int) -> list[int] | None:
        if count > len(self.free_ids):
            return None
        return [self.free_ids.popleft() for _ in range(count)]

    def release(self, ids: list[int]) -> None:
        self.free_ids.extend(ids)


@dataclass
class PrefillBlocks:
    """A finished prefill waiting for its consumers."""

    block_ids: list[int]
    served: int = 0
    created: float = field(default_factory=time.monotonic)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
