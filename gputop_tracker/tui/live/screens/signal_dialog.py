"""k: a signal to the selected process of the tree, or to the processes tagged with Space, or to their subtrees."""

from __future__ import annotations

import signal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label

SIGNALS = {"term": signal.SIGTERM, "int": signal.SIGINT, "hup": signal.SIGHUP, "kill": signal.SIGKILL}
Target = tuple[int, str, str]  # pid, name, its whole command line


class SignalScreen(ModalScreen[tuple[int, bool] | None]):
    """Confirm a signal to processes of the tracked tree, or to them and their descendants (`a`). Each is named
    with its whole command line, wrapped (the end of a command is what tells workers apart). No default: Enter
    sends nothing (it sent SIGTERM), so nothing is focused and Enter only says which keys choose."""

    AUTO_FOCUS = None
    BINDINGS = [
        Binding("t", "choose('term')", "SIGTERM", id="signal_dialog.term"),
        Binding("i", "choose('int')", "SIGINT", id="signal_dialog.int"),
        Binding("9", "choose('kill')", "SIGKILL", id="signal_dialog.kill"),
        Binding("a", "subtree", "Process / subtree", id="signal_dialog.subtree"),
        Binding("escape,n", "choose('cancel')", "Cancel", id="signal_dialog.cancel"),
        Binding("enter", "no_default", "", show=False, id="signal_dialog.enter"),
    ]

    def __init__(
        self, pid: int, name: str, n_descendants: int = 0, command: str = "", *, more: list[Target] | None = None
    ) -> None:
        """`pid`, `name`, `command`: the process; `more`: other processes tagged with it; `n_descendants`: the
        processes below them all."""
        super().__init__()
        self.pid = pid
        self.proc_name = name
        self.n_descendants = n_descendants
        self.command = command  # its command line, so the target is on screen whatever row was selected
        self.targets: list[Target] = [(pid, name, command), *(more or [])]
        self.subtree = False

    def compose(self) -> ComposeResult:
        with Vertical(id="signal-dialog", classes="dialog"):
            if len(self.targets) == 1:
                yield Label(
                    Content.from_markup(f"Send a signal to PID [b]{self.pid}[/b] ($name)?", name=self.proc_name)
                )
                if self.command:
                    yield Label(Content.from_markup("[dim]$command[/dim]", command=self.command), id="signal-command")
            else:
                yield Label(Content.from_markup(f"Send a signal to the [b]{len(self.targets)}[/b] tagged processes?"))
                for pid, name, command in self.targets:
                    yield Label(
                        Content.from_markup(f"[b]{pid}[/b] [dim]$command[/dim]", command=command or name),
                        classes="signal-command",
                    )
            yield Label(self._target_text(), id="signal-target")
            yield Label(
                "[b]t[/b] SIGTERM  [b]i[/b] SIGINT  [b]9[/b] SIGKILL  [b]a[/b] process/subtree  esc cancel",
                classes="dialog-help",
            )
            with Horizontal(classes="dialog-buttons"):
                # buttons for the mouse; they take no focus, so Enter presses none of them
                for button in (
                    Button("SIGTERM ([u]t[/u])", id="term", variant="warning"),
                    Button("SIGINT ([u]i[/u])", id="int"),
                    Button("SIGKILL ([u]9[/u])", id="kill", variant="error"),
                    Button("Cancel (esc)", id="cancel"),
                ):
                    button.can_focus = False
                    yield button

    def _target_text(self) -> str:
        if len(self.targets) == 1:
            if self.subtree:
                return f"to: the process and its {self.n_descendants} descendants (a: the process only)"
            more = f" (a: also its {self.n_descendants} descendants)" if self.n_descendants else ""
            return f"to: this process only{more}"
        if self.subtree:
            return f"to: these processes and their {self.n_descendants} descendants (a: these only)"
        more = f" (a: also their {self.n_descendants} descendants)" if self.n_descendants else ""
        return f"to: these processes only{more}"

    def action_subtree(self) -> None:
        if self.n_descendants:
            self.subtree = not self.subtree
            self.query_one("#signal-target", Label).update(self._target_text())

    def action_no_default(self) -> None:
        self.notify("choose: t SIGTERM, i SIGINT, 9 SIGKILL, esc cancel", timeout=3, markup=False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_choose(event.button.id or "cancel")

    def action_choose(self, choice: str) -> None:
        sig = SIGNALS.get(choice)
        self.dismiss((int(sig), self.subtree) if sig is not None else None)
