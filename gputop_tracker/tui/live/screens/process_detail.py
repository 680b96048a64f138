"""Enter: one process in full."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class ProcessDetailScreen(ModalScreen[None]):
    """One process in full: the row's figures, its whole command line, its peaks and GPUs."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "close", "Close", id="details.close"),
    ]

    def __init__(self, text: Text) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details-dialog", classes="dialog"):
            yield Static(self.text, id="details-text")
            yield Static("esc / enter: close", classes="dialog-help")

    def action_close(self) -> None:
        self.dismiss(None)
