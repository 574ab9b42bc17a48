"""A box opened by a key ("/" to filter the nodes or search a log) that keeps every key typed behind it.

Focus reaches a box on a later turn of the event loop, and a binding runs only once its key has bubbled
up to the app; so in a burst such as "/10.7.1" (typing fast, a paste, a loaded machine) the keys behind
"/" have already left for the table or the log underneath, where "1" or "n" are the view's own keys.
The screen here catches the opening key itself (the binding stays, for the footer, help and palette) and,
until the box has focus, puts each printable key into the box: the first in place of the text the box
opens with (which focus would have selected), the next ones after it.

A screen whose boxes open another way (the Open screen: any key typed on a list opens the name box under
it, with that key as its first) calls `typeahead_open` and `typeahead_put` from its own `on_key`.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class TypeAhead:
    """Mixin for a Screen. TYPEAHEAD = (key, the box's selector, the action that opens it)."""

    TYPEAHEAD: tuple[str, str, str] = ("slash", "", "")
    _typeahead_box: Input | None = None  # the box keys go to until it has focus; None: none opening
    _typeahead_keys = 0  # keys put into it since it opened

    def typeahead_open(self, box: Input) -> None:
        """Show the box and give it focus; call from the opening action."""
        box.display = True
        box.select_on_focus = True
        self._typeahead_box, self._typeahead_keys = box, 0
        box.focus()

    def typeahead_closed(self) -> None:
        self._typeahead_box = None

    def typeahead_opening(self) -> Input | None:
        """The box that was opened and has no focus yet."""
        return self._typeahead_box

    def typeahead_put(self, event: events.Key) -> None:
        """A printable key typed while the opened box waits for focus goes into it (and no further)."""
        box = self._typeahead_box
        if box is None or self.focused is box or not box.display:  # type: ignore[attr-defined]
            return
        if event.is_printable and event.character:
            box.select_on_focus = False  # focus, when it lands, must not select what was typed
            box.value = (box.value if self._typeahead_keys else "") + event.character
            box.cursor_position = len(box.value)
            self._typeahead_keys += 1
            event.stop()
            event.prevent_default()

    def on_key(self, event: events.Key) -> None:
        key, selector, action = self.TYPEAHEAD
        if event.key == key and self.focused is not self.query_one(selector, Input):  # type: ignore[attr-defined]
            getattr(self, f"action_{action}")()
            event.stop()
            event.prevent_default()
            return
        self.typeahead_put(event)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if event.widget is self._typeahead_box:
            self._typeahead_box = None  # the box has focus: keys go to it on their own now
