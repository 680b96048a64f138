"""q while the command runs: stop the tree, detach, or stay (no default)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Label

from gputop_tracker.tui.screens.help import key_lines

KILL_GRACE = 5.0  # seconds the quit dialog announces (control.KILL_AFTER)


class QuitScreen(ModalScreen[str]):
    """The command still runs: stop it (its whole tree), detach (leave it running), or stay. No default: a
    habitual q, Enter must not stop a job, so nothing is focused and Enter only says which keys choose."""

    AUTO_FOCUS = None
    BINDINGS = [
        Binding("s", "choose('stop')", "Stop tree", id="quit_dialog.stop"),
        Binding("d", "choose('detach')", "Detach", id="quit_dialog.detach"),
        Binding("escape,c,n", "choose('cancel')", "Cancel", key_display="esc", id="quit_dialog.cancel"),
        Binding("enter", "no_default", "", show=False, id="quit_dialog.enter"),
    ]

    def __init__(self, what: str, attach: bool) -> None:
        super().__init__()
        self.what = what
        self.attach = attach

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-dialog", classes="dialog"):
            yield Label(Content.from_markup("[b]$what[/b] is still running.", what=self.what))
            left = "the process" if self.attach else "the command"
            yield Label(
                key_lines(
                    (
                        "s",
                        f"stop: SIGTERM to {left} and every process of its tree; after {KILL_GRACE:g} s asks "
                        "before SIGKILL; the session is saved",
                    ),
                    ("d", f"detach: stop tracking, {left} keeps running"),
                    ("esc", "cancel: stay here"),
                ),
                classes="dialog-help",
            )
            with Horizontal(classes="dialog-buttons"):
                # buttons for the mouse; they take no focus, so Enter presses none of them
                for button in (
                    Button("[u]S[/u]top tree", id="stop", variant="error"),
                    Button("[u]D[/u]etach", id="detach", variant="primary"),
                    Button("Cancel (esc)", id="cancel"),
                ):
                    button.can_focus = False
                    yield button
        yield Footer()

    def action_no_default(self) -> None:
        self.notify("choose: s stop the tree, d detach, esc stay", timeout=3, markup=False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "cancel")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
