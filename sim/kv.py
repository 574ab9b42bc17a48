"""Mooncake KV transfer for the simulated ATOM worker, with the real transfer engine.

Layout: one registered region per rank (``dp * tp`` ranks), ``NUM_BLOCKS`` blocks of
``BYTES_PER_BLOCK`` each. As with DeepSeek's MLA cache, every TP rank of a DP rank holds the
same latent KV. The flow is ATOM's push model, with JSON lines over TCP in place of ZMQ:

1. prefill (producer) computes KV into its blocks and answers with ``kv_transfer_params``;
2. each decode (consumer) rank sends a ``write_request`` to the producer's handshake listener
   ``remote_handshake_port + remote_dp_rank * remote_tp + tp_rank % remote_tp``;
3. the producer writes its blocks into the consumer's registered memory with
   ``batch_transfer_sync_write`` and sends ``write_done`` to the consumer's notification port;
4. the consumer checks the bytes it received against what the prompt must produce.
"""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import atomlog, simenv
from .kv_memory import (
    BYTES_PER_BLOCK,
    MAX_CHUNK,
    NUM_BLOCKS,
    BlockAllocator,
    KVTransferError,
    PrefillBlocks,
    Region,
    free_port,
)

__all__ = ["BYTES_PER_BLOCK", "NUM_BLOCKS", "KVTransferError", "MooncakeConnector"]

PREFILL_LOOKUP_TIMEOUT = 60.0
RDMA_RETRIES = 3
log = atomlog.atom


def coalesce(src_base: int, dst_base: int, pairs: list[tuple[int, int]]) -> tuple[list[int], list[int], list[int]]:
    """Transfer entries for (src block, dst block) pairs, runs of consecutive blocks merged into one entry.

    ATOM sends one entry per block, but its blocks are hundreds of KB; the simulator's are 2 KB, and
    Mooncake's cost per entry (about 0.3 ms over TCP) would then dwarf the bytes. Merging runs keeps
    the bytes and their time real without that artefact.
    """
    srcs: list[int] = []
    dsts: list[int] = []
    sizes: list[int] = []
    prev: tuple[int, int] | None = None
    for s, d in pairs:
        if prev is not None and s == prev[0] + 1 and d == prev[1] + 1:
            sizes[-1] += BYTES_PER_BLOCK
        else:
            srcs.append(src_base + s * BYTES_PER_BLOCK)
            dsts.append(dst_base + d * BYTES_PER_BLOCK)
            sizes.append(BYTES_PER_BLOCK)
        prev = (s, d)
    return srcs, dsts, sizes


class MooncakeConnector:
    """Producer or consumer side of ATOM's Mooncake connector, for all ranks of one worker."""

    def __init__(self, kv_cfg: dict, *, local_ip: str, listen_host: str, tp: int, dp: int,
                 block_len: int, handshake_fault: str | None, rev: str = "head"):
        self.cfg = kv_cfg
        self.rev = rev                        # "head" or "pin": whose wording and failure behaviour
        self.local_ip = local_ip
        self.listen_host = listen_host
        self.tp, self.dp = tp, dp
        self.ranks = tp * dp
        self.block_len = block_len
        self.is_producer = kv_cfg.get("kv_role", "kv_producer") == "kv_producer"
        self.protocol = kv_cfg.get("protocol", "rdma")
        self.base_handshake_port = int(kv_cfg.get("handshake_port", 6301))
        self.fault = handshake_fault if self.is_producer else None
        self.engine: Any = None
        self.rpc_port = 0
        self.engine_id = "None"
        self.regions: list[Region] = []
        self.alloc = BlockAllocator(NUM_BLOCKS)
        self.scheduler_port = 0
        self.notification_port = 0
        self._servers: list[asyncio.Server] = []
        self._prefills: dict[int, PrefillBlocks] = {}
        self._prefill_ready: dict[int, asyncio.Event] = {}
        self._done: dict[int, int] = {}
        self._done_events: dict[int, tuple[int, asyncio.Event]] = {}
        self._served: dict[tuple[int, int], int] = {}     # (transfer_id, producer rank) -> consumers served
        self._background: set[asyncio.Task] = set()
        self._pool = ThreadPoolExecutor(max_workers=int(kv_cfg.get("num_worker_threads", 16)),
                                        thread_name_prefix="mooncake-send-worker")

    # ---- startup -------------------------------------------------------------------------

    @staticmethod
    def load_engine_class() -> Any:
        """Import Mooncake as ATOM's connector module does at import time."""
        try:
            from mooncake.engine import TransferEngine
        except ImportError as e:
            log("Mooncake is not available — KV cache disaggregation via mooncake will not work. "
                "Install the mooncake package to enable push-mode RDMA transfers.")
            if os.environ.get("ATOMSIM_MOONCAKE") == "required":
                return None
            # The demo must work on a machine without Debian's libibverbs1 (no root to install it):
            # move the same bytes over plain TCP, and say so.
            from .tcp_engine import TcpTransferEngine

            log(f"atomdeck simulator: the Mooncake engine cannot load here ({e}); moving KV bytes with the "
                "simulator's TCP engine instead (install Debian's libibverbs1 for the real Mooncake engine)")
            return TcpTransferEngine
        log("Mooncake TransferEngine loaded successfully")
        return TransferEngine

    def ib_device(self) -> str:
        dev = self.cfg.get("ib_device", "") or os.environ.get("ATOM_MOONCAKE_IB_DEVICE", "")
        if dev:
            return dev
        if self.protocol == "tcp":
            log("Mooncake TCP selected; RDMA device selection is disabled")
            return ""
        log("Auto-selecting RDMA device rdma0 for GPU 0 (tp_rank=0)")
        return "rdma0"

    def initialize(self, engine_class: Any) -> None:
        """Start the transfer engine (P2P handshake, no metadata server). Raises on failure."""
        if engine_class is None:
            raise RuntimeError("Mooncake is not installed but kv_connector='mooncake' was requested. "
                               "Install the mooncake package to use push-mode RDMA transfers.")
        ib_device = self.ib_device()
        self.engine = engine_class()
        ret = self.engine.initialize(self.local_ip, "P2PHANDSHAKE", self.protocol, ib_device)
        if ret != 0:
            raise RuntimeError(f"Mooncake TransferEngine.initialize() failed (ret={ret}) on ip={self.local_ip}, "
                               f"protocol={self.protocol}, ib_device={ib_device}")
        self.rpc_port = self.engine.get_rpc_port()
        self.engine_id = f"{self.local_ip}:{self.rpc_port}"
        self.scheduler_port = free_port(self.listen_host)
        log(f"Mooncake TransferEngine initialized: ip={self.local_ip}, protocol={self.protocol}, "
            f"ib_device={ib_device}, rpc_port={self.rpc_port}")

    def register(self, fail: bool = False) -> None:
        """Allocate and register the KV regions. ``fail`` simulates a registration failure."""
        self.regions = [Region(NUM_BLOCKS * BYTES_PER_BLOCK) for _ in range(self.ranks)]
        ptrs = [r.base for r in self.regions]
        sizes = [r.size for r in self.regions]
        log(f"Registering {len(ptrs)} RDMA chunks ({len(ptrs)} block regions, 0 slot regions, "
            f"max_chunk={MAX_CHUNK / 1024**3:.2f} GiB)")
        ret = -1 if fail else self.engine.batch_register_memory(ptrs, sizes)
        if ret != 0:
            log(f"batch_register_memory FAILED (ret={ret}), trying individual registration as fallback...")
            raise RuntimeError(f"Mooncake register_memory failed: ptr={ptrs[0]:#x} size={sizes[0]} ret={ret}")
        log(f"batch_register_memory OK ({len(ptrs)} chunks)")
        role = "PRODUCER" if self.is_producer else "CONSUMER"
        slots = "is_v4" if self.rev == "pin" else "has_slot_regions"
        log(f"Mooncake KV registration complete: role={role}, engine_id={self.engine_id}, {slots}=False, "
            f"num_blocks={NUM_BLOCKS}, block_regions={len(ptrs)}, slot_regions=0")

    async def start_listeners(self) -> None:
        """Producer: one write listener per rank. Consumer: one notification listener."""
        if self.is_producer:
            for rank in range(self.ranks):
                port = self.base_handshake_port + rank
                if self.fault != "refuse":
                    server = await asyncio.start_server(
                        lambda r, w, k=rank: self._serve_producer(r, w, k), self.listen_host, port,
                        reuse_address=True)
                    self._servers.append(server)
                log(f"Mooncake write listener bound to tcp://*:{port}")
            later = os.environ.get("ATOMSIM_HANDSHAKE_CLOSE_AFTER", "").strip()
            if later:  # a KV path that breaks after serving (a drill; no line is logged, as in `refuse`)
                task = asyncio.get_running_loop().create_task(self._close_listeners_after(float(later)))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
        else:
            server = await asyncio.start_server(self._serve_notifications, self.listen_host, 0,
                                                reuse_address=True)
            self._servers.append(server)
            self.notification_port = server.sockets[0].getsockname()[1]
            log(f"Mooncake notification listener bound to tcp://*:{self.notification_port}")

    async def _close_listeners_after(self, seconds: float) -> None:
        """``ATOMSIM_HANDSHAKE_CLOSE_AFTER``: the write listeners close this many real seconds after they opened;
        from then on a decode's write_request goes nowhere (a DEALER send only queues) and its request waits."""
        await asyncio.sleep(max(0.0, seconds))
        for server in self._servers:
            server.close()

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        for task in list(self._background):
            task.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- producer ------------------------------------------------------------------------

    def rank_group(self, dp_rank: int) -> list[int]:
        return [dp_rank * self.tp + t for t in range(self.tp)]

    def store_prefill(self, transfer_id: int, kv: bytes, dp_rank: int) -> list[int]:
        """Put a finished prefill's KV into its blocks (every TP rank of ``dp_rank``)."""
        count = len(kv) // BYTES_PER_BLOCK
        block_ids = self.alloc.alloc(count)
        while block_ids is None and self._prefills:
            oldest = min(self._prefills, key=lambda t: self._prefills[t].created)
            self.alloc.release(self._prefills.pop(oldest).block_ids)
            block_ids = self.alloc.alloc(count)
        if block_ids is None:
            raise KVTransferError(f"KV cache exhausted: {count} blocks needed, {NUM_BLOCKS} in total")
        for rank in self.rank_group(dp_rank):
            for i, block in enumerate(block_ids):
                self.regions[rank].write(block, kv[i * BYTES_PER_BLOCK:(i + 1) * BYTES_PER_BLOCK])
        if self.fault == "lose":
            # The "lose" fault: the blocks are never handed to the write listener.
            self.alloc.release(block_ids)
            return block_ids
        self._prefills[transfer_id] = PrefillBlocks(block_ids)
        self._prefill_ready.setdefault(transfer_id, asyncio.Event()).set()
        log(f"[PRODUCER] Cached {len(block_ids)} prefill blocks (slot=-1) for req {transfer_id}")
        return block_ids

    async def _serve_producer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rank: int) -> None:
        try:
            while line := await reader.readline():
                try:
                    msg = json.loads(line)
                except ValueError:
                    log("Unknown message type: <unparsable>")
                    continue
                if msg.get("type") != "write_request":
                    log(f"Unknown message type: {msg.get('type')}")
                    continue
                log(f"[PRODUCER] Received write_request for req {msg.get('request_id')} "
                    f"(transfer_id={msg.get('transfer_id')}, consumer={msg.get('consumer_host')}:"
                    f"{msg.get('consumer_rpc_port')})")
                asyncio.get_running_loop().create_task(self._execute_transfer(msg, rank))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _wait_for_prefill(self, transfer_id: int) -> PrefillBlocks | None:
        event = self._prefill_ready.setdefault(transfer_id, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), max(0.5, simenv.scaled(PREFILL_LOOKUP_TIMEOUT)))
        except TimeoutError:
            self._prefill_ready.pop(transfer_id, None)
            return None
        return self._prefills.get(transfer_id)

    async def _execute_transfer(self, req: dict, rank: int) -> None:
        req_id, transfer_id = req["request_id"], req.get("transfer_id", req["request_id"])
        consumer = f"{req['consumer_host']}:{req['consumer_rpc_port']}"
        log(f"[PRODUCER] _execute_transfer: req_id={req_id}, transfer_id={transfer_id}, consumer={consumer}, "
            f"dst_blocks={len(req['dst_block_ids'])}, has_slot_data=False")
        prefill = await self._wait_for_prefill(transfer_id)
        if prefill is None:
            log(f"[PRODUCER] Timed out waiting for prefill data for transfer_id={transfer_id} "
                f"(req_id={req_id}). Available keys: {list(self._prefills)}")
            return
        # The "break" fault aims the write at a port nothing listens on.
        target = f"{req['consumer_host']}:1" if self.fault == "break" else consumer
        loop = asyncio.get_running_loop()
        if await loop.run_in_executor(self._pool, self.engine.get_first_buffer_address, target) == 0:
            log(f"[PRODUCER] Consumer {target} has NO registered buffers.")
        src_base, dst_base = self.regions[rank].base, req["consumer_base_addrs"][0]
        pairs = list(zip(prefill.block_ids, req["dst_block_ids"]))
        srcs, dsts, sizes = coalesce(src_base, dst_base, pairs)
        log(f"[PRODUCER] block RDMA write: req={req_id}, 1 regions × {len(pairs)} blocks, total_bytes={sum(sizes)}")
        ok = await self._write_with_retry(target, srcs, dsts, sizes, req_id)
        if not ok:
            log(f"[PRODUCER] block transfer failed for req {req_id}")
            if self.rev != "pin":
                # ATOM head: no write-done after a failed transfer; the consumer keeps waiting.
                log(f"[PRODUCER] transfer failed for req {req_id} (transfer_id={transfer_id}); not sending write-done")
                return
        # ATOM at the pin sends write-done even after a failed block transfer.
        self._deliver(req["notify_host"], int(req["notify_port"]), {"type": "write_done", "request_id": req_id})
        log(f"[PRODUCER] write-done sent for req {req_id}")
        # Each producer rank counts the consumer ranks it serves (consumer_tp // producer_tp, at least 1).
        per_rank = max(1, int(req.get("consumer_tp_size", 1)) // self.tp)
        key = (transfer_id, rank)
        self._served[key] = self._served.get(key, 0) + 1
        if self._served[key] >= per_rank:
            self._served.pop(key)
            log(f"[PRODUCER] All {per_rank} consumers served for transfer_id={transfer_id}")
        prefill.served += 1
        if prefill.served >= int(req.get("consumer_tp_size", 1)) and transfer_id in self._prefills:
            self.alloc.release(self._prefills.pop(transfer_id).block_ids)
            self._prefill_ready.pop(transfer_id, None)

    async def _write_with_retry(self, target: str, srcs: list[int], dsts: list[int], sizes: list[int],
                                req_id: int) -> bool:
        loop = asyncio.get_running_loop()
        delay = 2.0
        for attempt in range(1, RDMA_RETRIES + 1):
            ret = await loop.run_in_executor(
                self._pool, self.engine.batch_transfer_sync_write, target, srcs, dsts, sizes)
            if ret == 0:
                return True
            log(f"[PRODUCER] block RDMA chunk error {ret} for req {req_id} → {target} "
                f"(entries 0-{len(srcs)}/{len(srcs)}, attempt {attempt}/{RDMA_RETRIES})")
            if attempt < RDMA_RETRIES:
                await simenv.pause(delay)
                delay *= 2
        return False

    def _deliver(self, host: str, port: int, message: dict) -> None:
        """Send one side-channel message the way a ZMQ DEALER does: queued at once, delivered when the
        peer can be reached (reconnecting every 100 ms), never an error and never a log line."""
        task = asyncio.get_running_loop().create_task(self._deliver_until_sent(host, port, message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @staticmethod
    async def _deliver_until_sent(host: str, port: int, message: dict) -> None:
        payload = (json.dumps(message) + "\n").encode()
        while True:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5.0)
            except (TimeoutError, OSError):
                await asyncio.sleep(0.1)         # ZMQ's default reconnect interval
                continue
            try:
                writer.write(payload)
                await writer.drain()
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.1)

    # ---- consumer ------------------------------------------------------------------------

    async def _serve_notifications(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("type") != "write_done":
                    log(f"Unknown notification type: {msg.get('type')}")
                    continue
                req_id = msg["request_id"]
                self._done[req_id] = self._done.get(req_id, 0) + 1
                if self.rev == "pin":
                    log(f"[CONSUMER] Write-done received for req {req_id}, done_recving now: {{{req_id}}}")
                else:
                    log(f"[CONSUMER] Write-done received for req {req_id} (all stages), done_recving now: {{{req_id}}}")
                expected = self._done_events.get(req_id)
                if expected and self._done[req_id] >= expected[0]:
                    expected[1].set()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def receive(self, params: dict, req_id: int, expected: bytes, dp_rank: int) -> bytes:
        """Pull a prefill's KV into this decode's blocks (all TP ranks of ``dp_rank``); verify it."""
        transfer_id = params.get("transfer_id")
        remote_host = params.get("remote_host")
        remote_hp = int(params.get("remote_handshake_port", 6301))
        remote_tp = int(params.get("remote_tp_size", params.get("tp_size", 1)) or 1)
        remote_dp_rank = int(params.get("remote_dp_rank", params.get("dp_rank", 0)) or 0)
        count = len(params.get("remote_block_ids") or [])
        if count * BYTES_PER_BLOCK != len(expected):
            raise KVTransferError(f"remote_block_ids has {count} blocks, the prompt needs "
                                  f"{len(expected) // BYTES_PER_BLOCK}")
        dst = self.alloc.alloc(count)
        if dst is None:
            raise KVTransferError(f"KV cache exhausted: {count} blocks needed")
        ranks = self.rank_group(dp_rank)
        try:
            zero = bytes(BYTES_PER_BLOCK)
            for rank in ranks:
                for block in dst:
                    self.regions[rank].write(block, zero)
            cached = "" if self.rev == "pin" else ", 0 locally cached"
            log(f"[SCHEDULER-CONSUMER] Queued req {req_id} for remote KV recv ({count} blocks{cached}, slot=-1), "
                f"transfer_id={transfer_id}, remote_host={remote_host}, remote_handshake_port={remote_hp}")
            done = asyncio.Event()
            self._done_events[req_id] = (len(ranks), done)
            log(f"[CONSUMER] start_load_kv: 1 reqs_to_recv, id_map={{{req_id}: {transfer_id}}}")
            for rank in ranks:
                self._send_write_request(params, req_id, dst, rank, remote_host, remote_hp, remote_tp, remote_dp_rank)
            # ATOM parks the request until every write-done came: no timeout, no log line.
            await done.wait()
            return b"".join(self.regions[ranks[0]].read(b) for b in dst)
        finally:
            self._done_events.pop(req_id, None)
            self._done.pop(req_id, None)
            self.alloc.release(dst)

    def _send_write_request(self, params: dict, req_id: int, dst: list[int], rank: int, host: str,
                            handshake_port: int, remote_tp: int, remote_dp_rank: int) -> None:
        tp_rank = rank % self.tp
        remote_tp_rank = tp_rank % remote_tp
        port = handshake_port + remote_dp_rank * remote_tp + remote_tp_rank
        addr = f"tcp://{host}:{port}"
        request = {
            "type": "write_request", "request_id": req_id, "transfer_id": params.get("transfer_id"),
            "consumer_host": self.local_ip, "consumer_rpc_port": self.rpc_port,
            "consumer_base_addrs": [self.regions[rank].base], "dst_block_ids": dst,
            "notify_host": self.local_ip, "notify_port": self.notification_port, "consumer_tp_size": self.tp,
        }
        if self.rev == "pin":
            log(f"[CONSUMER] Sending write_request for req {req_id} (transfer_id={params.get('transfer_id')}) to "
                f"{addr} (handshake_port={handshake_port}, dp_rank={remote_dp_rank}, local_tp={tp_rank}, "
                f"remote_tp={remote_tp_rank}/{remote_tp}), dst_block_ids={dst[:10]}, num_regions=1, "
                f"bytes/block=[{BYTES_PER_BLOCK}], num_blocks={NUM_BLOCKS}")
        # A DEALER send only queues: a closed or unreachable port shows nowhere, the write-done just never comes.
        self._deliver(host, port, request)
        if self.rev == "pin":
            log(f"[CONSUMER] write_request sent for req {req_id} to {addr}")
        else:
            log(f"[CONSUMER] write_request sent for req {req_id} (transfer_id={params.get('transfer_id')}) to stage "
                f"0/1 at {addr}, off=0, dst_block_ids={dst[:10]}")
