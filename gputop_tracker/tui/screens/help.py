"""A help dialog: keys beside what they do, laid out for the terminal's width (the live view's and the history's)."""

from __future__ import annotations

import re

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def key_lines(*rows: tuple[str, str]) -> Table:
    """A dialog's keys (bold), each with what it does."""
    return key_grid([(Text(key, style="bold"), Text(what)) for key, what in rows])


def key_grid(rows: list[tuple[Text, Text]]) -> Table:
    """Keys beside what they do: on a narrow terminal a description wraps under itself, beside its key, instead
    of being cut at the dialog's edge or wrapping back under the keys."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()  # measured at its whole length: the dialog is as wide as it may be before this wraps
    for key, what in rows:
        grid.add_row(key, what)
    return grid


_KEY_ROW = re.compile(r"^(\S.*?\S) {2,}(\S.*)$")  # keys, two spaces or more, what they do


def reflow(markup: str) -> Group:
    """Help text written for a wide terminal, laid out for any: the lines of a paragraph join and wrap at the
    dialog's width; a key row ("keys  what they do", its text continued on indented lines) becomes a row of a
    grid, its text wrapping beside the keys rather than back at the left edge."""
    parts: list[Text | Table] = []
    for kind, lines in _help_blocks(markup):
        if kind == "keys":
            parts.append(key_grid([(Text.from_markup(k), Text.from_markup(w)) for k, w in lines]))
        else:
            parts.append(Text.from_markup(" ".join(w for _k, w in lines)))
    return Group(*parts)


def _help_blocks(markup: str) -> list[tuple[str, list[list[str]]]]:
    """The help's lines in blocks: ("keys", [[keys, text], …]), ("text", [["", line], …]) or a blank line."""
    blocks: list[tuple[str, list[list[str]]]] = []
    for line in markup.splitlines():
        kind, rows = blocks[-1] if blocks else ("", [])
        m = _KEY_ROW.match(line)
        if not line.strip():
            blocks.append(("text", []))
        elif line[0] == " " and kind == "keys":
            rows[-1][1] += " " + line.strip()
        elif m is not None:
            if kind != "keys":
                blocks.append(("keys", []))
            blocks[-1][1].append([m.group(1), m.group(2)])
        elif kind == "text" and rows and not line.startswith("[b]"):  # a bold word at the left starts a paragraph
            rows.append(["", line.strip()])
        else:
            blocks.append(("text", [["", line.strip()]]))
    return blocks


class HelpScreen(ModalScreen[None]):
    """Keys and what the figures mean; longer than a small terminal (80x24 included): the arrows, pgup/pgdn,
    home/end and the wheel scroll it."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close", id="help.close")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-dialog", classes="dialog"):
            yield Static(reflow(self.text))

    def on_mount(self) -> None:
        self.query_one("#help-dialog").focus()  # its keys scroll it

    def action_close(self) -> None:
        self.dismiss(None)
