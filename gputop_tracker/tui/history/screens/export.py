"""Export one saved session (JSON, or its timeline as CSV) to a path typed in a dialog."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Label

from gputop_tracker.core.store import export_session
from gputop_tracker.core.store import sessions as store
from gputop_tracker.tui.history.screens.base import CSS_FILE


class ExportScreen(ModalScreen[Path | None]):
    """Ask where to export; a name ending in .csv gets the timeline as CSV, anything else the full JSON."""

    CSS_PATH = CSS_FILE
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="history.cancel")]

    def __init__(self, entry: store.Entry) -> None:
        super().__init__(classes="history-modal")
        self.entry = entry

    def compose(self) -> ComposeResult:
        with Vertical(classes="history-dialog"):
            yield Label(Text(f"Export session {self.entry.id}", style="bold"))
            yield Label("Path (ending in .csv: timeline as CSV; otherwise: the whole session as JSON)")
            yield Input(str(Path.cwd() / f"{self.entry.id}.json"), id="export-path")
            yield Label("", id="export-error")
            with Horizontal(classes="history-buttons"):
                yield Button("Export", variant="primary", id="export-ok")
                yield Button("Cancel", id="export-cancel")

    @on(Input.Submitted, "#export-path")
    @on(Button.Pressed, "#export-ok")
    def _export(self) -> None:
        text = self.query_one("#export-path", Input).value.strip()
        if not text:
            self._error("type a path")
            return
        path = Path(text).expanduser()
        try:
            export_session(self.entry, path, make_dirs=True)  # typed in a dialog: its directory is made
        except (OSError, LookupError) as e:
            msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            self._error(f"cannot export: {msg}")
            return
        self.dismiss(path)

    def _error(self, message: str) -> None:
        self.query_one("#export-error", Label).update(Text(message, style="red"))

    @on(Button.Pressed, "#export-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


def ask_export(screen: Screen[Any], entry: store.Entry) -> None:
    if entry.session is None:
        screen.notify(f"cannot export an unreadable session: {entry.error}", severity="error", markup=False)
        return

    def done(path: Path | None) -> None:
        if path is not None:
            screen.notify(f"exported {entry.id} to {path}", markup=False)

    screen.app.push_screen(ExportScreen(entry), done)
