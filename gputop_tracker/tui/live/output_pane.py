"""The command's output as a terminal shows it: a carriage return rewrites the line (a progress bar stays one
line), SGR colours are kept, the pane follows new output unless the user scrolled up, and it can be searched.

A Line-API ScrollView: each line is rendered to a `Strip` once and kept; new output repaints the last lines.
"""

from __future__ import annotations

import re
from collections import deque
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputop_tracker.core.model import clean_output

_PARTIAL_ESC = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|[ -/]+)?$")  # an escape sequence cut at the end of a chunk
_NOT_SGR = re.compile(r"\x1b(?!\[[0-?]*[ -/]*m)")  # what is left of an escape that is no colour
MATCH_STYLE = Style(bgcolor="yellow", color="black", bold=True)


class OutputPane(ScrollView, can_focus=True):
    """Lines of output with a terminal's carriage returns and colours; `search()` highlights a word."""

    DEFAULT_CSS = """
    OutputPane { background: $surface; color: $foreground; overflow-x: hidden; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_up", "Up", show=False, id="output.up"),
        Binding("down", "scroll_down", "Down", show=False, id="output.down"),
        Binding("pageup", "page_up", "Page up", show=False, id="output.page_up"),
        Binding("pagedown", "page_down", "Page down", show=False, id="output.page_down"),
        Binding("home", "scroll_home", "Top", show=False, id="output.top"),
        Binding("end", "scroll_end", "End", show=False, id="output.end"),
    ]

    def __init__(self, max_lines: int = 2000, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = max_lines
        self._lines: deque[Text] = deque(maxlen=max_lines)
        self._current: Text | None = None  # the line being written (no newline yet)
        self._rewrite = False  # a carriage return came: the next text replaces the current line
        self._carry = ""  # an escape sequence cut between two chunks
        self._strips: dict[int, Strip] = {}
        self._width = -1
        self.term = ""
        """The searched word (highlighted), or empty."""
        self.match_line: int | None = None
        """The line of the match found last (find, n, N), or None."""
        self.following = True
        """The last line is in view: new output and a resize keep it there (False once scrolled back)."""

    # ------------------------------------------------------------------ content

    @property
    def lines(self) -> list[str]:
        return [t.plain for t in self._all()]

    def _all(self) -> list[Text]:
        return [*self._lines, self._current] if self._current is not None else list(self._lines)

    def write(self, text: str) -> None:
        """Output as the command wrote it (SGR colours and carriage returns included)."""
        text = self._carry + text
        m = _PARTIAL_ESC.search(text)
        self._carry = text[m.start() :] if m else ""
        if m:
            text = text[: m.start()]
        # the halves of a sequence cut between two reads are whole only now: clean them together
        text = _NOT_SGR.sub("", clean_output(text))
        if not text:
            return
        follow = self.following
        pieces = text.split("\n")
        if len(pieces) > self.max_lines + 1:  # more lines than the pane keeps: parse only those it will keep
            pieces = pieces[-self.max_lines - 1 :]
            self._lines.clear()
            self._current = None
            self._rewrite = False
        first_dirty = len(self._lines)
        n_before = len(self._lines)
        for i, piece in enumerate(pieces):
            if i:  # a newline: the current line is done
                self._lines.append(self._current if self._current is not None else Text())
                self._current = None
                self._rewrite = False
            self._put(piece)
        dropped = n_before + (len(pieces) - 1) - len(self._lines)
        if dropped > 0:  # the oldest lines left the ring: every line moved up
            first_dirty = 0
            self._dropped(dropped, follow)
        for y in [y for y in self._strips if y >= first_dirty]:
            del self._strips[y]
        self.virtual_size = Size(0, len(self._lines) + (self._current is not None))  # lines are cropped
        if follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
            # and once laid out again: a scrollbar that appears now changes the room
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True, x_axis=False, force=True)
        self.refresh()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # only a scroll decides: a shorter pane has further to scroll, its end is still the end
        self.following = new_value >= self.max_scroll_y - 0.5

    def on_resize(self) -> None:
        if self.following:
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True, x_axis=False, force=True)

    def _dropped(self, n: int, follow: bool) -> None:
        """`n` old lines left the ring: scrolled back, the text being read stays where it is, and so does the
        find's match."""
        self._strips.clear()
        if not follow:
            self.scroll_to(y=max(0, self.scroll_y - n), animate=False, immediate=True, force=True)
        if self.match_line is not None:
            self.match_line = self.match_line - n if self.match_line >= n else None

    def _put(self, piece: str) -> None:
        parts = piece.split("\r")
        for j, part in enumerate(parts):
            if j:
                self._rewrite = True
            if not part:
                continue
            new = Text.from_ansi(part, no_wrap=True, end="")
            if self._rewrite or self._current is None:
                self._current = new
            else:
                self._current.append_text(new)
            self._rewrite = False

    def clear(self) -> None:
        self._lines.clear()
        self._current = None
        self._strips.clear()
        self.virtual_size = Size(0, 0)
        self.refresh()

    # ------------------------------------------------------------------ search

    def search(self, term: str) -> int | None:
        """Highlight `term` (case-insensitive) and scroll to its last occurrence; that line, or None."""
        self.term = term
        self._strips.clear()
        self.refresh()
        self.match_line = None
        if not term:
            return None
        return self.next_match(-1, start=len(self._all()))

    def next_match(self, step: int, start: int | None = None) -> int | None:
        """Scroll to the next line holding the term below (step 1) or above (-1) the last match, wrapping
        around; that line, or None."""
        if not self.term:
            return None
        low = self.term.lower()
        lines = self.lines
        n = len(lines)
        if not n:
            return None
        here = start if start is not None else self.match_line if self.match_line is not None else n
        for k in range(1, n + 1):
            y = (here + step * k) % n
            if low in lines[y].lower():
                self.match_line = y
                self.scroll_to(y=max(0, y - self.size.height // 2), animate=False, immediate=True, force=True)
                return y
        return None

    def match_number(self) -> tuple[int, int]:
        """(which match line the last match is, counting from the top, 1-based; how many lines match)."""
        low = self.term.lower()
        hits = [y for y, line in enumerate(self.lines) if low in line.lower()] if self.term else []
        where = hits.index(self.match_line) + 1 if self.match_line in hits else 0
        return where, len(hits)

    def count(self, term: str) -> int:
        low = term.lower()
        return sum(line.lower().count(low) for line in self.lines) if term else 0

    # ------------------------------------------------------------------ rendering

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._width:
            self._width = width
            self._strips.clear()
        row = round(self.scroll_y) + y
        strip = self._strips.get(row)
        if strip is None:
            lines = self._all()
            if row >= len(lines):
                return Strip.blank(width, self.rich_style)
            text = lines[row]
            if "\t" in text.plain:  # a tab would move the terminal's cursor past the pane's border
                text = text.copy()
                text.expand_tabs(8)
            if self.term:
                text = text.copy()
                text.highlight_words([self.term], MATCH_STYLE, case_sensitive=False)
            segments = list(text.render(self.app.console))
            strip = Strip(Segment.apply_style(segments, self.rich_style)).crop_extend(0, width, self.rich_style)
            self._strips[row] = strip
        return strip
