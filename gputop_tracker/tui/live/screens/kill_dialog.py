"""The tree outlived SIGTERM: SIGKILL it, wait, or detach."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from gputop_tracker.tui.screens.help import key_lines


class KillScreen(ModalScreen[str]):
    """The tree outlived SIGTERM's grace period: SIGKILL it, wait longer, or detach. Never SIGKILL unasked."""

    BINDINGS = [
        Binding("k", "choose('kill')", "SIGKILL", id="kill_dialog.kill"),
        Binding("w,escape", "choose('wait')", "Wait", id="kill_dialog.wait"),
        Binding("d", "choose('detach')", "Detach", id="kill_dialog.detach"),
    ]

    def __init__(self, n_alive: int, waited: float, what: str = "") -> None:
        super().__init__()
        self.n_alive = n_alive
        self.waited = waited
        self.what = what  # the tree's main process: PID and command

    def compose(self) -> ComposeResult:
        with Vertical(id="kill-dialog", classes="dialog"):
            of = f" of {self.what}" if self.what else " of the tree"
            yield Label(
                Content.from_markup(
                    "$n processes$of still run $waited s after SIGTERM.",
                    n=str(self.n_alive),
                    of=of,
                    waited=f"{self.waited:g}",
                )
            )
            yield Label(
                key_lines(
                    ("k", "SIGKILL every process of the tree"),
                    ("w", "wait longer (esc)"),
                    ("d", "detach: stop tracking, leave them running"),
                ),
                classes="dialog-help",
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("[u]W[/u]ait", id="wait", variant="primary")
                yield Button("SIGKILL ([u]k[/u])", id="kill", variant="error")
                yield Button("[u]D[/u]etach", id="detach")

    def on_mount(self) -> None:
        self.query_one("#wait", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "wait")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
