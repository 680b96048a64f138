"""What every history screen shares: history.tcss, the compact layout of a narrow terminal, the `?` help."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.markup import escape
from textual.binding import Binding, BindingType
from textual.events import Resize
from textual.screen import Screen

from gputop_tracker.tui.screens.help import HelpScreen

CSS_FILE = Path(__file__).resolve().parent.parent / "history.tcss"  # absolute: read from any screen's file
NARROW = 100  # columns: under this the list and the detail use their compact layouts


class HistoryScreenBase(Screen[None]):
    """Every history screen: shares history.tcss and switches to the compact layout in narrow terminals."""

    CSS_PATH = CSS_FILE
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark,f1", "keys_help", "Help", key_display="?", id="history.help", show=False)
    ]

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.width < NARROW, "narrow")

    def action_keys_help(self) -> None:
        """Every key of this screen, those the footer has no room for included (from its bindings: complete
        and remapped as they are); a live view's own keys under it are left out."""
        rows: dict[tuple[str, str], list[str]] = {}
        for active in self.active_bindings.values():
            binding = active.binding
            if active.node is self.app or binding.system or binding.action == "keys_help":
                continue
            text = binding.tooltip or binding.description
            rows.setdefault((binding.action, text), []).append(self.app.get_key_display(binding))
        lines = [f"[b]{escape(' '.join(keys))}[/b]  {escape(text)}" for (_a, text), keys in rows.items()]
        title = f"[b]{escape((type(self).__doc__ or 'Keys').splitlines()[0])}[/b]"
        self.app.push_screen(HelpScreen("\n".join([title, "", *lines, "", "Press escape or ? to close."])))
