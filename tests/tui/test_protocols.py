"""The protocols the App hands down (tui/protocols.py) name only what the App and its run controller have:
screens, drills and the run controller reach the App through them, never by importing tui.app, and tui/ is not
type-checked in CI, so this is what keeps a protocol from promising a member the App lost or never had."""

from __future__ import annotations

from typing import Protocol

import pytest
from atomdeck.tui.protocols import Console, ContextSide, ControllerHost, DrillHost, RunSide

from .conftest import make_app


def members(proto: type) -> set[str]:
    """Every attribute, property and method a protocol names (its own and its bases')."""
    out: set[str] = set()
    for cls in proto.__mro__:
        if cls in (Protocol, object) or not getattr(cls, "_is_protocol", False):
            continue
        out |= {n for n in (*vars(cls), *getattr(cls, "__annotations__", {})) if not n.startswith("_")}
    return out


def lacks(obj: object, proto: type) -> list[str]:
    return sorted(n for n in members(proto) if n not in vars(obj) and not hasattr(type(obj), n))


@pytest.mark.parametrize("proto", [Console, DrillHost, ControllerHost])
def test_the_app_has_every_member_of_what_it_hands_down(proto):
    app = make_app()
    assert members(proto), proto
    assert lacks(app, proto) == []


def test_the_run_controller_is_what_the_run_views_use():
    app = make_app()
    assert lacks(app.runs, RunSide) == []


def test_a_member_the_app_lacks_is_found():
    class Wider(Console, Protocol):
        def no_such_thing(self) -> None: ...

    assert lacks(make_app(), Wider) == ["no_such_thing"]


def test_the_context_book_is_what_the_views_read_of_the_contexts():
    app = make_app()
    assert lacks(app.contexts, ContextSide) == []
