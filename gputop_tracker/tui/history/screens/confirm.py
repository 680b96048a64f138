"""A yes/no question whose default is No."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from gputop_tracker.tui.history.screens.base import CSS_FILE


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; No is the default."""

    CSS_PATH = CSS_FILE
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="history.yes"),
        Binding("n,escape", "answer(False)", "No", id="history.no"),
    ]

    def __init__(self, question: str, detail: str = "", yes: str = "Delete") -> None:
        super().__init__(classes="history-modal")
        self.question = question
        self.detail = detail
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="history-dialog"):
            yield Label(Text(self.question, style="bold"))
            if self.detail:
                yield Label(Text(self.detail))
            with Horizontal(classes="history-buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="confirm-yes")
                yield Button("Cancel (n)", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
