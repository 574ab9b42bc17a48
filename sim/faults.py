"""Fault injection from the environment (documented in sim/README.md).

A process applies its faults only if ``ATOMSIM_ONLY`` is unset or names it: ``<ip>`` matches
any of the process's addresses (bind, node, advertised), ``<ip>:<port>`` also needs the port
(the worker's ``--server-port``, the router's ``--port``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import atomlog

WORKER_STAGES = ("tokenizer", "engine", "mooncake", "kv_register", "cudagraph", "ready", "serving")
ROUTER_STAGES = ("start", "workers", "kv_info", "ready", "serving")


def _float(raw: str | None) -> float | None:
    if raw is None or not raw.strip():
        return None
    try:
        return float(raw)
    except ValueError:
        atomlog.err(f"atomsim: ignoring unparsable value {raw!r}")
        return None


def _int(raw: str | None) -> int | None:
    value = _float(raw)
    return None if value is None else int(value)


def _switch(raw: str | None) -> bool | None:
    value = (raw or "").strip().lower()
    if not value:
        return None
    return value not in ("0", "false", "no", "off")


def targets_me(only: str | None, addresses: set[str], port: int) -> bool:
    """Whether ``ATOMSIM_ONLY`` selects this process."""
    if not only:
        return True
    ip, _, want_port = only.strip().partition(":")
    if ip and ip not in addresses:
        return False
    return not (want_port and str(port) != want_port.strip())


@dataclass
class Faults:
    """The faults that apply to this process (all off when not targeted)."""

    stages: tuple[str, ...] = WORKER_STAGES
    slow_load: float = 0.0
    crash_at: str | None = None
    crash_code: int = 1
    crash_after: float | None = None
    crash_after_served: float | None = None  # ATOMSIM_CRASH_AFTER_SERVED: as crash_after, from the first request
    never_bind: bool = False
    kv_role: str | None = None
    handshake: str | None = None
    flood: float = 0.0
    freeze_after: float | None = None
    stall_after: float | None = None
    bind_delay: float = 0.0
    bind_port: int | None = None
    bind_host: str | None = None
    metrics: bool | None = None          # ATOMSIM_METRICS: None follows ATOMSIM_ATOM_REV
    crash_rank: str = "0"                # ATOMSIM_CRASH_RANK: the rank ATOMSIM_CRASH_AFTER kills
    rank_setsid: str | None = None       # ATOMSIM_RANK_SETSID: a rank that leaves its process group
    hang_after: float | None = None      # ATOMSIM_HANG_AFTER: a rank hangs in its collective this long after serving
    hang_rank: str = "0"                 # ATOMSIM_HANG_RANK: which rank
    output_tokens: int | None = None     # ATOMSIM_OUTPUT_TOKENS: at most this many output tokens per request
    output_after: float = 0.0            # ATOMSIM_OUTPUT_AFTER: ... from this many seconds after the start
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls, stages: tuple[str, ...], addresses: set[str], port: int) -> Faults:
        env = os.environ
        if not targets_me(env.get("ATOMSIM_ONLY"), {a for a in addresses if a}, port):
            return cls(stages=stages)
        code = _int(env.get("ATOMSIM_EXIT_CODE"))
        crash_at = None
        raw = env.get("ATOMSIM_CRASH_AT", "").strip()
        if raw:
            stage, _, stage_code = raw.partition(":")
            stage = stage.strip().lower()
            if stage in stages:
                crash_at = stage
                if stage_code.strip():
                    code = _int(stage_code)
            else:
                atomlog.err(f"atomsim: unknown ATOMSIM_CRASH_AT stage {stage!r} (known: {', '.join(stages)})")
        handshake = env.get("ATOMSIM_HANDSHAKE", "").strip().lower() or None
        if handshake not in (None, "refuse", "break", "lose"):
            atomlog.err(f"atomsim: unknown ATOMSIM_HANDSHAKE {handshake!r} (known: refuse, break, lose)")
            handshake = None
        return cls(
            stages=stages,
            slow_load=max(0.0, _float(env.get("ATOMSIM_SLOW_LOAD")) or 0.0),
            crash_at=crash_at,
            crash_code=1 if code is None else code,
            crash_after=_float(env.get("ATOMSIM_CRASH_AFTER")),
            crash_after_served=_float(env.get("ATOMSIM_CRASH_AFTER_SERVED")),
            never_bind=env.get("ATOMSIM_NEVER_BIND", "").strip().lower() in ("1", "true", "yes", "on"),
            kv_role=env.get("ATOMSIM_KV_ROLE", "").strip() or None,
            handshake=handshake,
            flood=max(0.0, _float(env.get("ATOMSIM_FLOOD")) or 0.0),
            freeze_after=_float(env.get("ATOMSIM_FREEZE_AFTER")),
            stall_after=_float(env.get("ATOMSIM_STALL_AFTER")),
            bind_delay=max(0.0, _float(env.get("ATOMSIM_BIND_DELAY")) or 0.0),
            bind_port=_int(env.get("ATOMSIM_BIND_PORT")),
            bind_host=env.get("ATOMSIM_BIND_HOST", "").strip() or None,
            metrics=_switch(env.get("ATOMSIM_METRICS")),
            crash_rank=env.get("ATOMSIM_CRASH_RANK", "").strip() or "0",
            rank_setsid=env.get("ATOMSIM_RANK_SETSID", "").strip() or None,
            hang_after=_float(env.get("ATOMSIM_HANG_AFTER")),
            hang_rank=env.get("ATOMSIM_HANG_RANK", "").strip() or "0",
            output_tokens=_int(env.get("ATOMSIM_OUTPUT_TOKENS")),
            output_after=max(0.0, _float(env.get("ATOMSIM_OUTPUT_AFTER")) or 0.0),
        )

    def crashes_at(self, stage: str) -> bool:
        return self.crash_at == stage


async def freeze_later(seconds: float) -> None:
    """``ATOMSIM_FREEZE_AFTER``: stop this process (state T) as ``kill -STOP`` does; SIGCONT resumes it."""
    import asyncio
    import signal

    await asyncio.sleep(max(0.0, seconds))
    os.kill(os.getpid(), signal.SIGSTOP)


def python_crash(frames: list[tuple[str, str, str]], exception: str, code: int) -> None:
    """Print a Python traceback for ``exception`` (stderr) and exit with ``code``."""
    lines = ["Traceback (most recent call last):"]
    site = "/usr/local/lib/python3.12/dist-packages"
    lines.append('  File "<frozen runpy>", line 198, in _run_module_as_main')
    lines.append('  File "<frozen runpy>", line 88, in _run_code')
    lines.append(f'  File "{site}/atom/entrypoints/openai_server.py", line 12, in <module>')
    lines.append("    main()")
    for number, (path, func, source) in enumerate(frames):
        lines.append(f'  File "{site}/{path}", line {101 + 37 * number}, in {func}')
        lines.append(f"    {source}")
    lines.append(exception)
    atomlog.emit_many(lines, __import__("sys").stderr)
    from .engine_tree import close_all  # the interpreter's exit runs CoreManager's finalizer: EngineCores closed

    close_all()
    atomlog.hard_exit(code)


def rust_error(message: str, code: int = 1) -> None:
    """What a Rust ``main`` returning ``Err(String)`` prints, then exit."""
    atomlog.err("Error: " + '"' + message.replace("\\", "\\\\").replace('"', '\\"') + '"')
    atomlog.hard_exit(code)
