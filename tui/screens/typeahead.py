"""A box opened by a key ("/" to filter the nodes or search a log) that keeps every key typed behind it.

Focus reaches a box on a later turn of the event loop, and a binding runs only once its key has bubbled
up to the app; so in a burst such as "/10.7.1" (typing fast, a paste, a loaded machine) the keys behind
"/" have already left for the table or the log underneath, where "1" or "n" are the view's own keys.
The screen here catches the opening key itself (the binding stays, for the footer, help and palette) and,
until the box has focus, puts each printable key into the box: the first in place of the text the box
opens with (which focus would have selected), the next ones after it.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class TypeAhead:
    """Mixin for a Screen. TYPEAHEAD = (key, the box's selector, the action that opens it)."""

    TYPEAHEAD: tuple[str, str, str] = ("slash", "", "")
    _typeahead_keys: int | None = None  # keys put into the box since it opened; None: not opening

    def typeahead_open(self, box: Input) -> None:
        """Show the box and give it focus; call from the opening action."""
        box.display = True
        box.select_on_focus = True
        self._typeahead_keys = 0
        box.focus()

    def typeahead_closed(self) -> None:
        self._typeahead_keys = None

    def on_key(self, event: events.Key) -> None:
        key, selector, action = self.TYPEAHEAD
        box = self.query_one(selector, Input)  # type: ignore[attr-defined]
        focused = self.focused  # type: ignore[attr-defined]
        if event.key == key and focused is not box:
            getattr(self, f"action_{action}")()
            event.stop()
            event.prevent_default()
            return
        if self._typeahead_keys is None or focused is box or not box.display:
            return
        if event.is_printable and event.character:
            box.select_on_focus = False  # focus, when it lands, must not select what was typed
            box.value = (box.value if self._typeahead_keys else "") + event.character
            box.cursor_position = len(box.value)
            self._typeahead_keys += 1
            event.stop()
            event.prevent_default()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if event.widget.id == self.TYPEAHEAD[1].lstrip("#"):
            self._typeahead_keys = None  # the box has focus: keys go to it on their own now
