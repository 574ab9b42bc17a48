"""The registries engines and frontends plug into: what commands and lint see of a worker or router program
(the Engine and Frontend protocols), the base classes, and the decorators a module registers its class with.

Below the modules that register (atom.py, atomesh.py) and the package that looks them up (__init__.py): they
import this module, never their package, so the package may import them without a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from ..config.catalog import ModelEntry
    from ..design.plan import Endpoint, Plan
    from .args import Options


class Engine(Protocol):
    """A worker program, as commands (argv) and lint see it: the exact argv and env of one endpoint."""

    name: ClassVar[str]
    command: ClassVar[tuple[str, ...]]
    owned_flags: ClassVar[frozenset[str]]

    def options(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> Options: ...
    def argv(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> list[str]: ...
    def env(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> dict[str, str]: ...


class Frontend(Protocol):
    """A router program in front of the workers, as commands and lint see it."""

    name: ClassVar[str]
    command: ClassVar[tuple[str, ...]]
    backend: ClassVar[str]
    owned_flags: ClassVar[frozenset[str]]

    def options(self, plan: Plan) -> Options: ...
    def argv(self, plan: Plan) -> list[str]: ...
    def env(self, plan: Plan) -> dict[str, str]: ...


class EngineBase:
    """Shared code of the engines (argv from options); a subclass registers with @register_engine."""

    name: ClassVar[str]
    command: ClassVar[tuple[str, ...]]  # the program, e.g. ("python3", "-m", "atom.entrypoints.openai_server")
    owned_flags: ClassVar[frozenset[str]] = frozenset()  # canonical flags only atomdeck may set

    def options(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> Options:
        raise NotImplementedError

    def argv(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> list[str]:
        return [*self.command, *self.options(plan, ep, model).tokens()]

    def env(self, plan: Plan, ep: Endpoint, model: ModelEntry) -> dict[str, str]:
        raise NotImplementedError


class FrontendBase:
    """Shared code of the routers; a subclass registers with @register_frontend."""

    name: ClassVar[str]
    command: ClassVar[tuple[str, ...]]
    backend: ClassVar[str]  # the engine it must be told it talks to
    owned_flags: ClassVar[frozenset[str]] = frozenset()

    def options(self, plan: Plan) -> Options:
        raise NotImplementedError

    def argv(self, plan: Plan) -> list[str]:
        return [*self.command, *self.options(plan).tokens()]

    def env(self, plan: Plan) -> dict[str, str]:
        return {}


ENGINES: dict[str, type[EngineBase]] = {}
FRONTENDS: dict[str, type[FrontendBase]] = {}


def register_engine(name: str) -> Callable[[type[EngineBase]], type[EngineBase]]:
    def deco(cls: type[EngineBase]) -> type[EngineBase]:
        cls.name = name
        ENGINES[name] = cls
        return cls
    return deco


def register_frontend(name: str) -> Callable[[type[FrontendBase]], type[FrontendBase]]:
    def deco(cls: type[FrontendBase]) -> type[FrontendBase]:
        cls.name = name
        FRONTENDS[name] = cls
        return cls
    return deco
