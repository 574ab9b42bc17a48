"""The recipe's layout knobs as form fields, each bound to a recipe key path.

The form never validates or applies anything itself: it posts `Edited(path, value)` with the raw
value, the Layout screen passes it to core (set_field), and the form shows core's verdict (the
ConfigIssue text) next to the field.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Literal

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Select, Static

from ...core.config.errors import ConfigIssue
from ...core.config.recipe import Policy, Recipe
from ...core.design.edit import get_field

Kind = Literal["int", "bool", "choice"]


@dataclass(frozen=True)
class FormField:
    path: str  # recipe key path, e.g. "prefill.tp"
    label: str
    kind: Kind = "int"
    choices: tuple[str, ...] = ()
    only: str = ""  # "disagg" / "aggregate": shown only in that mode

    @property
    def wid(self) -> str:
        return "f-" + self.path.replace(".", "-").replace("_", "-")


@dataclass(frozen=True)
class Section:
    title: str
    only: str = ""


def _role(role: str, title: str, only: str) -> list[FormField | Section]:
    return [Section(title, only),
            FormField(f"{role}.workers", "workers", only=only),
            FormField(f"{role}.tp", "TP", only=only),
            FormField(f"{role}.per_node", "per node", only=only),
            FormField(f"{role}.dp_attention", "DP attention", "bool", only=only),
            FormField(f"{role}.expert_parallel", "expert par.", "bool", only=only)]


# Sections and fields, top to bottom.
FIELDS: list[FormField | Section] = [
    Section("Layout"),
    FormField("mode", "mode", "choice", ("disagg", "aggregate")),
    *_role("prefill", "Prefill", "disagg"),
    *_role("decode", "Decode", "disagg"),
    *_role("aggregate", "Workers", "aggregate"),
    Section("Router"),
    FormField("router.policy", "policy", "choice", typing.get_args(Policy)),
    Section("Ports"),
    FormField("ports.prefill_http", "prefill http", only="disagg"),
    FormField("ports.decode_http", "decode http", only="disagg"),
    FormField("ports.worker_http", "worker http", only="aggregate"),
    FormField("ports.handshake", "handshake", only="disagg"),
    FormField("ports.router", "router"),
    FormField("ports.router_prometheus", "prometheus"),
]


def fields() -> list[FormField]:
    return [f for f in FIELDS if isinstance(f, FormField)]


class RecipeForm(VerticalScroll, can_focus=False):
    @dataclass
    class Edited(Message):
        path: str
        value: Any

    def __init__(self, recipe: Recipe, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.recipe = recipe
        self.shown: dict[str, Any] = {}  # what each field shows (the recipe's value or a refused draft)

    def compose(self) -> ComposeResult:
        recipe = self.recipe
        for item in FIELDS:
            if isinstance(item, Section):
                yield Static(item.title, classes=f"form-section {self._only_class(item.only)}")
                continue
            with Vertical(classes=f"field-box {self._only_class(item.only)}"):
                with Horizontal(classes="field", id=f"row-{item.wid}"):
                    yield Label(item.label, classes="field-label")
                    yield self._control(item, get_field(recipe, item.path))
                yield Static("", classes="field-error", id=f"err-{item.wid}")

    @staticmethod
    def _control(item: FormField, value: Any) -> Input | Select:
        if item.kind == "bool":
            return Select([("off", False), ("on", True)], value=bool(value), allow_blank=False, id=item.wid,
                          compact=True)
        if item.kind == "choice":
            return Select([(c, c) for c in item.choices], value=value, allow_blank=False, id=item.wid,
                          compact=True)
        return Input(str(value), id=item.wid, compact=True, classes="field-input")

    @staticmethod
    def _only_class(only: str) -> str:
        return f"only-{only}" if only else ""

    def load(self, recipe: Recipe, drafts: dict[str, Any], issues: dict[str, list[ConfigIssue]]) -> None:
        """Show the recipe's values (a refused edit keeps the operator's draft) and core's issues."""
        mode = drafts.get("mode", recipe.mode)
        self.set_class(mode == "aggregate", "-aggregate")
        with self.prevent(Input.Changed, Select.Changed):
            for f in fields():
                value = drafts[f.path] if f.path in drafts else get_field(recipe, f.path)
                control = self.query_one(f"#{f.wid}")
                if isinstance(control, Input):
                    if control.value != str(value) and not (control.has_focus and f.path not in drafts
                                                            and _same_number(control.value, value)):
                        control.value = str(value)
                elif isinstance(control, Select) and control.value != value:
                    control.value = value
                self.shown[f.path] = str(value) if isinstance(control, Input) else value
                err = self.query_one(f"#err-{f.wid}", Static)
                found = issues.get(f.path, [])
                err.update("\n".join(_issue_text(f.path, i) for i in found))
                err.set_class(bool(found), "-shown")

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._edited(event.input.id, event.value, event.input.value)

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._edited(event.select.id, event.value, event.select.value)

    def _edited(self, wid: str | None, value: Any, current: Any) -> None:
        """Post an edit only for a change the operator made: not a stale message from before a
        load (a Select picks its first option when mounted), not the value already shown."""
        path = self._path(wid)
        if value != current or path not in self.shown or self.shown[path] == value:
            return
        self.shown[path] = value
        self.post_message(self.Edited(path, value))

    @staticmethod
    def _path(wid: str | None) -> str:
        return next(f.path for f in fields() if f.wid == wid)


def _same_number(text: str, value: Any) -> bool:
    try:
        return int(text) == value
    except (TypeError, ValueError):
        return False


def _issue_text(path: str, issue: ConfigIssue) -> str:
    """Core's message; the key is named when the refusal is about another key."""
    return issue.message if issue.path == path else f"{issue.path}: {issue.message}"
