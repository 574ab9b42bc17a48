"""Engines (the worker programs) and frontends (routers) plug in through small registries (registry.py).

Adding an engine or a router is a new module that registers a class; nothing else changes. The modules that
register import registry.py; this package imports them (when a name is first looked up), never the other way.
Pure (no I/O, no asyncio): never imports remote/, launch/, run/, measure/ or cli/.
"""

from __future__ import annotations

from .registry import (
    ENGINES,
    FRONTENDS,
    Engine,
    EngineBase,
    Frontend,
    FrontendBase,
    register_engine,
    register_frontend,
)

__all__ = ["ENGINES", "FRONTENDS", "Engine", "EngineBase", "Frontend", "FrontendBase", "engine", "frontend", "known",
           "register_engine", "register_frontend"]


def engine(name: str) -> Engine:
    from . import atom, atomesh  # noqa: F401  (registration)

    if name not in ENGINES:
        raise KeyError(name)
    return ENGINES[name]()


def frontend(name: str) -> Frontend:
    from . import atom, atomesh  # noqa: F401

    if name not in FRONTENDS:
        raise KeyError(name)
    return FRONTENDS[name]()


def known() -> tuple[list[str], list[str]]:
    from . import atom, atomesh  # noqa: F401

    return sorted(ENGINES), sorted(FRONTENDS)
