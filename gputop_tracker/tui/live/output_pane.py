"""The command's output as a terminal shows it: a carriage return rewrites the line (a progress bar stays one
line), SGR colours are kept, the pane follows new output whenever its end is on screen, and it can be searched.

A Line-API ScrollView: each line is rendered to a `Strip` once and kept, and only the lines on screen are. Output
that comes while the view runs (`feed`) is drawn at most once a frame, all that came meanwhile at once: a job
printing all the time cost the view 5-10 % of a core when each of its writes was drawn. The pane's scroll range
grows without laying the screen out again (Textual lays out the whole screen on any change of a widget's virtual
size): only when the scroll bar comes or goes, which changes the pane's width, is it laid out.
"""

from __future__ import annotations

import re
import time
from collections import deque
from math import ceil
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar
from textual.strip import Strip
from textual.timer import Timer

from gputop_tracker.core.model import clean_output

_PARTIAL_ESC = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|[ -/]+)?$")  # an escape sequence cut at the end of a chunk
_NOT_SGR = re.compile(r"\x1b(?!\[[0-?]*[ -/]*m)")  # what is left of an escape that is no colour
MATCH_STYLE = Style(bgcolor="yellow", color="black", bold=True)
# Seconds at least between two draws of output fed while the view runs (the live view gives its own draw period).
# The live view's redraw of a sample draws it too, in the same screen update; the pane's timer draws it otherwise,
# LATE after a frame so as not to race that redraw (two screen updates where one does).
FRAME = 1.0
LATE = 0.25
SCROLLED_BACK = "scrolled back — End to follow"


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

    def __init__(
        self,
        max_lines: int = 2000,
        *,
        id: str | None = None,
        classes: str | None = None,
        title: str | None = None,
        frame: float = 0.0,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = max_lines
        self.frame = frame or FRAME
        """Seconds at least between two draws of fed output (`feed`)."""
        self._lines: deque[Text] = deque(maxlen=max_lines)
        self._current: Text | None = None  # the line being written (no newline yet)
        self._rewrite = False  # a carriage return came: the next text replaces the current line
        self._carry = ""  # an escape sequence cut between two chunks
        self._strips: dict[int, Strip] = {}
        self._width = -1
        self._line_count = 0  # lines as last drawn (the current one included)
        self._base: Style | None = None  # the pane's style, from its ancestors' (kept until a style change)
        self._blank: Strip | None = None  # a row under the last line
        self.term = ""
        """The searched word (highlighted), or empty."""
        self.match_line: int | None = None
        """The line of the match found last (find, n, N), or None."""
        self.following = True
        """The last line is in view: new output and a resize keep it there (False while scrolled back)."""
        self.title = title
        """The border's title; scrolled back, a note follows it (None: no title, no note: a saved output)."""
        self.unseen = 0
        """Lines that came while scrolled back (the title counts them until the pane follows again)."""
        self._pending: list[str] = []  # output fed since the last draw
        self._frame: Timer | None = None  # the draw of what is pending, at the end of the frame
        self._drawn = -1e9  # monotonic time of the last draw of fed output
        self._shown_title: str | None = None
        self._show_title()

    # ------------------------------------------------------------------ content

    @property
    def lines(self) -> list[str]:
        return [t.plain for t in self._all()]

    def _all(self) -> list[Text]:
        return [*self._lines, self._current] if self._current is not None else list(self._lines)

    def feed(self, text: str) -> None:
        """Output as it comes while the view runs: drawn at once if nothing was drawn for a frame, else with all
        that comes meanwhile at the end of the frame."""
        self._pending.append(text)
        if self._frame is not None:
            return
        wait = self._drawn + self.frame - time.monotonic()
        if wait <= 0 or not self.is_attached:
            self.flush()
        else:
            self._frame = self.set_timer(wait + LATE, self.flush)

    def flush(self) -> None:
        """Draw the output fed and not drawn yet."""
        if self._frame is not None:
            self._frame.stop()
            self._frame = None
        if self._pending:  # a lone write after a quiet frame is drawn at once
            self._drawn = time.monotonic()
            text = "".join(self._pending)
            self._pending.clear()
            self.write(text)

    def write(self, text: str) -> None:
        """Output as the command wrote it (SGR colours and carriage returns included), drawn now."""
        text = self._carry + text
        m = _PARTIAL_ESC.search(text)
        self._carry = text[m.start() :] if m else ""
        if m:
            text = text[: m.start()]
        # the halves of a sequence cut between two reads are whole only now: clean them together
        text = _NOT_SGR.sub("", clean_output(text))
        if text:
            follow = self.following
            first_dirty = self._add(text, follow)
            self._draw(first_dirty, follow)

    def _add(self, text: str, follow: bool) -> int:
        """The lines of `text` into the ring; the first line that changed."""
        pieces = text.split("\n")
        if len(pieces) > self.max_lines + 1:  # more lines than the pane keeps: parse only those it will keep
            pieces = pieces[-self.max_lines - 1 :]
            self._lines.clear()
            self._current = None
            self._rewrite = False
        first_dirty = n_before = len(self._lines)
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
        if not follow:
            self.unseen += len(pieces) - 1
            self._show_title()
        return first_dirty

    def _draw(self, first_dirty: int, follow: bool) -> None:
        """Following, to the new end; else the lines that changed on screen, if any."""
        for y in [y for y in self._strips if y >= first_dirty]:
            del self._strips[y]
        n_before = self._line_count
        self._line_count = len(self._lines) + (self._current is not None)
        laid_out = self._set_line_count(self._line_count, follow)
        top = round(self.scroll_y)
        if follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
            if laid_out:  # and once laid out again: a scrollbar that appears now changes the room
                self.call_after_refresh(self.scroll_end, animate=False, immediate=True, x_axis=False, force=True)
        end = min(top + self.size.height, max(n_before, self._line_count))  # the rows below stay blank
        if round(self.scroll_y) == top and first_dirty < end:
            # not scrolled (scrolling repaints the pane): only the changed lines on screen
            start = max(first_dirty, top)
            self.refresh_lines(start, end - start)

    def _set_line_count(self, n: int, follow: bool = False) -> bool:
        """The scroll range: `n` lines. True when the screen is laid out again for it: only when the scroll bar
        comes or goes (the pane's width changes), not for each new line. `follow`: the pane scrolls to the new
        end next (the scroll bar is given where it will be)."""
        new = Size(0, n)
        old = self.virtual_size
        if new == old:
            return False
        room = self.scrollable_content_region.height
        if not self.is_attached or not room or (old.height > room) != (n > room):
            self.virtual_size = new  # a reactive that lays the screen out
            return True
        self.set_reactive(OutputPane.virtual_size, new)  # while the lines fit, no bar: nothing to lay out either
        if self.show_vertical_scrollbar:
            self._set_bar(n, room, max(0, n - room) if follow else self.vertical_scrollbar.position)
        return False

    def _set_bar(self, virtual: int, window: int, position: float) -> None:
        """The scroll bar's figures; repainted only when its thumb moves on screen. Output that comes all the
        time moved it by less than a cell: the same bar was drawn again every second (as costly as the pane's
        own lines), by the reactives' repaint."""
        bar = self.vertical_scrollbar
        position = bar.validate_position(position)
        size = bar.size.height
        if bar.is_attached and thumb(size, virtual, window, position) == thumb(
            size, bar.window_virtual_size, bar.window_size, bar.position
        ):
            bar.set_reactive(ScrollBar.window_virtual_size, virtual)
            bar.set_reactive(ScrollBar.window_size, window)
            bar.set_reactive(ScrollBar.position, position)
            return
        bar.window_virtual_size = virtual
        bar.window_size = window
        bar.position = position

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        # ScrollView's, less the scroll bar's repaint when its thumb stays where it is
        if self.show_vertical_scrollbar:
            bar = self.vertical_scrollbar
            self._set_bar(bar.window_virtual_size, bar.window_size, new_value)
        if round(old_value) != round(new_value):
            self.refresh(self.size.region)
        # only a scroll decides: a shorter pane has further to scroll, its end is still the end
        self.following = new_value >= self.max_scroll_y - 0.5
        if self.following:
            self.unseen = 0
        self._show_title()

    def _show_title(self) -> None:
        """The border's title, and while scrolled back that the pane does not follow, with the lines that came."""
        if self.title is None:
            return
        title = self.title
        if not self.following:
            new = f", {self.unseen} new line{'s' if self.unseen != 1 else ''}" if self.unseen else ""
            title = f"{title} · {SCROLLED_BACK}{new}"
        if title != self._shown_title:  # setting it repaints the whole pane
            self._shown_title = title
            self.border_title = Content(title)

    # keys scroll at once, never animated: an animation ends where the end was when it began, and output that
    # came meanwhile left the pane short of its end, not following (End, then nothing new showed)

    def action_scroll_end(self) -> None:
        self.flush()  # what waits for its frame is shown at once
        self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)

    def action_scroll_home(self) -> None:
        self.scroll_home(animate=False, immediate=True, x_axis=False, force=True)

    def action_scroll_up(self) -> None:
        self.scroll_up(animate=False, immediate=True, force=True)

    def action_scroll_down(self) -> None:
        self.scroll_down(animate=False, immediate=True, force=True)

    def action_page_up(self) -> None:
        self.scroll_page_up(animate=False, force=True)

    def action_page_down(self) -> None:
        self.scroll_page_down(animate=False, force=True)

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
        """A piece of a line: after a carriage return it replaces the line. Only the last part that is not
        empty is parsed: a progress bar redrawn ten times a second leaves the line as its last redraw."""
        parts = piece.split("\r")
        last = len(parts) - 1
        k = last
        while k and not parts[k]:
            k -= 1
        if k:
            self._rewrite = True  # a carriage return came before part k: it replaces the line
        if part := parts[k]:
            if part.isprintable():  # no escape sequence, tab or line separator: what from_ansi makes of it
                new = Text(part, no_wrap=True, end="", tab_size=8)
            else:
                new = Text.from_ansi(part, no_wrap=True, end="")
            if self._rewrite or self._current is None:
                self._current = new
            else:
                self._current.append_text(new)
            self._rewrite = False
        if k < last:  # carriage returns after it: the next text replaces the line
            self._rewrite = True

    def clear(self) -> None:
        self._lines.clear()
        self._current = None
        self._strips.clear()
        self._line_count = 0
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

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None
        self._blank = None
        self._strips.clear()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._width:
            self._width = width
            self._strips.clear()
            self._blank = None
        base = self._base
        if base is None:  # Textual computes it from every ancestor's styles: once, not for each line drawn
            base = self._base = self.rich_style
        row = round(self.scroll_y) + y
        strip = self._strips.get(row)
        if strip is None:
            n = len(self._lines)
            if row > n or (row == n and self._current is None):
                if self._blank is None:
                    self._blank = Strip.blank(width, base)
                return self._blank
            text = self._current if row == n else self._lines[row]
            assert text is not None
            if "\t" in text.plain:  # a tab would move the terminal's cursor past the pane's border
                text = text.copy()
                text.expand_tabs(8)
            if self.term:
                text = text.copy()
                text.highlight_words([self.term], MATCH_STYLE, case_sensitive=False)
            segments = list(text.render(self.app.console))
            strip = Strip(Segment.apply_style(segments, base)).crop_extend(0, width, base)
            self._strips[row] = strip
        return strip


def thumb(size: int, virtual: float, window: float, position: float) -> tuple[int, ...]:
    """Where a vertical scroll bar `size` cells high draws its thumb (in eighths of a cell), as Textual's
    ScrollBar and ScrollBarRender work it out from its figures; its height alone when it draws none (the same
    answer: the same bar, tests/test_tui_output.py)."""
    virtual, window = ceil(virtual), ceil(window) if window < virtual else 0
    if not (window and size and virtual and size != virtual):
        return (size,)
    thumb = max(1, window / (virtual / size))
    start = int((size - thumb) * (position / (virtual - window)) * 8)
    return size, start, start + ceil(thumb * 8)
