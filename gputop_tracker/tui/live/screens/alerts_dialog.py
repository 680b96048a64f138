"""a: every alert of the run, newest first (what crossed which limit, and when)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class AlertsScreen(ModalScreen[None]):
    """The run's alerts; opening it marks them read (the header's bright word on the latest goes quiet)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,a,q", "close", "Close", id="alerts.close")]

    def __init__(self, lines: list[Text]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="alerts-dialog", classes="dialog"):
            title = f"Alerts ({len(self.lines)}), newest first" if self.lines else "No alert so far"
            yield Static(Text(title, style="bold"))
            yield Static(Text("\n").join(self.lines), id="alerts-text")
            yield Static("esc / a: close", classes="dialog-help")

    def on_mount(self) -> None:
        self.query_one("#alerts-dialog").focus()  # its keys scroll a long list

    def action_close(self) -> None:
        self.dismiss(None)
