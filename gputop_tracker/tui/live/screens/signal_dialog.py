"""k: a signal to one process of the tree, or to its subtree."""

from __future__ import annotations

import signal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label

SIGNALS = {"term": signal.SIGTERM, "int": signal.SIGINT, "hup": signal.SIGHUP, "kill": signal.SIGKILL}


class SignalScreen(ModalScreen[tuple[int, bool] | None]):
    """Confirm a signal to one process of the tracked tree, or to it and its descendants (`a`)."""

    BINDINGS = [
        Binding("t,enter", "choose('term')", "SIGTERM", id="signal_dialog.term"),
        Binding("i", "choose('int')", "SIGINT", id="signal_dialog.int"),
        Binding("9", "choose('kill')", "SIGKILL", id="signal_dialog.kill"),
        Binding("a", "subtree", "Process / subtree", id="signal_dialog.subtree"),
        Binding("escape,n", "choose('cancel')", "Cancel", id="signal_dialog.cancel"),
    ]

    def __init__(self, pid: int, name: str, n_descendants: int = 0, command: str = "") -> None:
        super().__init__()
        self.pid = pid
        self.proc_name = name
        self.n_descendants = n_descendants
        self.command = command  # its command line, so the target is on screen whatever row was selected
        self.subtree = False

    def compose(self) -> ComposeResult:
        with Vertical(id="signal-dialog", classes="dialog"):
            yield Label(Content.from_markup(f"Send a signal to PID [b]{self.pid}[/b] ($name)?", name=self.proc_name))
            if self.command:
                yield Label(Content.from_markup("[dim]$command[/dim]", command=self.command), id="signal-command")
            yield Label(self._target_text(), id="signal-target")
            yield Label(
                "[b]t[/b]/enter SIGTERM  [b]i[/b] SIGINT  [b]9[/b] SIGKILL  [b]a[/b] process/subtree  esc cancel",
                classes="dialog-help",
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("SIGTERM ([u]t[/u])", id="term", variant="warning")
                yield Button("SIGINT ([u]i[/u])", id="int")
                yield Button("SIGKILL ([u]9[/u])", id="kill", variant="error")
                yield Button("Cancel (esc)", id="cancel")

    def _target_text(self) -> str:
        if self.subtree:
            return f"to: the process and its {self.n_descendants} descendants (a: the process only)"
        more = f" (a: also its {self.n_descendants} descendants)" if self.n_descendants else ""
        return f"to: this process only{more}"

    def action_subtree(self) -> None:
        if self.n_descendants:
            self.subtree = not self.subtree
            self.query_one("#signal-target", Label).update(self._target_text())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_choose(event.button.id or "cancel")

    def action_choose(self, choice: str) -> None:
        sig = SIGNALS.get(choice)
        self.dismiss((int(sig), self.subtree) if sig is not None else None)
