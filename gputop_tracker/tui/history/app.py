"""`gputop-track --history`: the session list in its own small app."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from gputop_tracker.tui.history.screens.base import CSS_FILE
from gputop_tracker.tui.history.screens.sessions import HistoryScreen


class HistoryApp(App[None]):
    """`gputop-track --history`: the history screen on its own."""

    TITLE = "gputop-track history"
    CSS_PATH = CSS_FILE  # the default screen's own CSS_PATH is not read by Textual
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit", id="history.quit")]

    def __init__(self, store_dir: Path) -> None:
        super().__init__()
        self.store_dir = store_dir

    def get_default_screen(self) -> Screen[Any]:
        return HistoryScreen(self.store_dir)


def run_history(store_dir: Path) -> int:
    HistoryApp(store_dir).run()
    return 0
