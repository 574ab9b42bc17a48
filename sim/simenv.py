"""Simulator settings read from the environment: pace, node address, timeouts.

Every variable is documented in sim/README.md.
"""

from __future__ import annotations

import asyncio
import math
import os

WILDCARDS = ("0.0.0.0", "::", "")


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        return default


def speed() -> float:
    """``ATOMSIM_SPEED``: simulated delays are divided by it; 0 or inf means no delays."""
    value = _float("ATOMSIM_SPEED", 1.0)
    if value <= 0 or math.isinf(value) or math.isnan(value):
        return math.inf
    return value


def scaled(seconds: float) -> float:
    """A simulated duration at the current pace."""
    s = speed()
    return 0.0 if math.isinf(s) else seconds / s


async def pause(seconds: float) -> None:
    """Sleep for a simulated duration (yields even when the pace makes it zero)."""
    await asyncio.sleep(scaled(seconds))


def node_ip() -> str | None:
    """``ATOMSIM_NODE_IP``: the loopback address standing in for this node."""
    value = os.environ.get("ATOMSIM_NODE_IP", "").strip()
    return value or None


def bind_host(host: str) -> str:
    """The address to bind for ``--host``: the node address replaces a wildcard."""
    node = node_ip()
    if host in WILDCARDS and node:
        return node
    return host or "0.0.0.0"


def listen_host(host: str) -> str:
    """Where side listeners bind (ATOM binds ``tcp://*``; a simulated node binds its own address)."""
    node = node_ip()
    if node:
        return node
    return host if host not in WILDCARDS else "0.0.0.0"


def advertised_ip(host: str) -> str:
    """The IP ATOM advertises: ``ATOM_HOST_IP``, else the node address, else a guess."""
    value = os.environ.get("ATOM_HOST_IP", "").strip()
    if value:
        return value
    node = node_ip()
    if node:
        return node
    return host if host not in WILDCARDS else "127.0.0.1"


def atom_rev() -> str:
    """``ATOMSIM_ATOM_REV``: whose log wording and behaviour to follow, ``head`` (default) or ``pin``.

    ``head`` is ROCm/ATOM ffdf3bb5 (has /metrics), ``pin`` is 087b82d9, the revision the router is
    pinned to (no /metrics). docs/log-patterns.md lists the lines that differ.
    """
    value = os.environ.get("ATOMSIM_ATOM_REV", "").strip().lower()
    return "pin" if value == "pin" else "head"
