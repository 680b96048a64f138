"""A keyed table on Textual's Line API, for rows that change every second.

DataTable re-renders every visible cell after any `update_cell`; at one sample a second of 40 processes
that was most of the live view's cost. Here each row's `Strip` is rendered once and kept until one of its
values changes, and only the screen lines whose row changed (or moved) are marked for repaint.
"""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

Cell = tuple[str, str]  # text, Rich style ("" for none)
Column = tuple[str, str, int, bool]  # key, label, width in cells, right-aligned
PAD = 1  # blank cells on each side of a value


def _fit(text: str, width: int, right: bool) -> str:
    n = cell_len(text)
    if n > width:
        return set_cell_size(text, max(width - 1, 0)) + "…" if width > 0 else ""
    pad = " " * (width - n)
    return pad + text if right else text + pad


class ProcessTable(ScrollView, can_focus=True):
    """Rows keyed by an int (a PID), a fixed header line, a row cursor (keys and mouse)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"process-table--header", "process-table--cursor"}
    DEFAULT_CSS = """
    ProcessTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .process-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
        }
        & > .process-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        & > .process-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False, id="table.up"),
        Binding("down", "cursor(1)", "Down", show=False, id="table.down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="table.page_up"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="table.page_down"),
        Binding("home", "first", "First row", show=False, id="table.first"),
        Binding("end", "last", "Last row", show=False, id="table.last"),
    ]

    class HeaderSelected(Message):
        """A column label was clicked."""

        def __init__(self, table: ProcessTable, column: str) -> None:
            super().__init__()
            self.table = table
            self.column = column

    class CursorMoved(Message):
        """The cursor is on another row (key)."""

        def __init__(self, table: ProcessTable, key: int | None) -> None:
            super().__init__()
            self.table = table
            self.key = key

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._columns: list[Column] = []
        self._labels: dict[str, tuple[str, str]] = {}  # column key -> label text, style
        self._keys: list[int] = []
        self._index: dict[int, int] = {}
        self._cells: dict[int, tuple[Cell, ...]] = {}
        self._strips: dict[int, Strip] = {}  # rendered rows, without the cursor
        self._header: Strip | None = None
        self._styles: dict[str, Style] = {}
        self._base: Style | None = None  # the widget's own style (rows are drawn on it): kept until a style change
        self._cursor: tuple[int, tuple[Cell, ...], Strip] | None = None  # the cursor row: key, cells, strip
        self._width = -1
        self.cursor_row = 0

    # ------------------------------------------------------------------ public API

    @property
    def columns(self) -> list[str]:
        return [c[0] for c in self._columns]

    @property
    def widths(self) -> dict[str, int]:
        return {c[0]: c[2] for c in self._columns}

    @property
    def ordered_keys(self) -> list[int]:
        return list(self._keys)

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def cursor_key(self) -> int | None:
        return self._keys[self.cursor_row] if 0 <= self.cursor_row < len(self._keys) else None

    def get_cell(self, key: int, column: str) -> str:
        return self._cells[key][self.columns.index(column)][0]

    def column_label(self, column: str) -> str:
        return self._labels[column][0]

    def set_columns(self, columns: list[Column]) -> None:
        """New columns (a resize): every row must be given again."""
        self._columns = list(columns)
        self._labels = {k: (label, "") for k, label, _w, _r in columns}
        self.clear()

    def set_label(self, column: str, label: str, style: str = "") -> None:
        if column in self._labels and self._labels[column] != (label, style):
            self._labels[column] = (label, style)
            self._header = None
            self.refresh(Region(0, 0, self.size.width, 1))

    def clear(self) -> None:
        self._keys = []
        self._index = {}
        self._cells.clear()
        self._strips.clear()
        self._header = None
        self.cursor_row = 0
        self._set_height()
        self.refresh()

    def update_rows(self, rows: list[tuple[int, tuple[Cell, ...]]]) -> None:
        """Show these rows in this order; repaint only the lines whose row changed, moved, came or went."""
        keys = [k for k, _ in rows]
        selected = self.cursor_key
        dirty: set[int] = set()
        for i, (key, cells) in enumerate(rows):
            if self._cells.get(key) != cells:
                self._cells[key] = cells
                self._strips.pop(key, None)
                dirty.add(i)
            elif i >= len(self._keys) or self._keys[i] != key:
                dirty.add(i)
        new = set(keys)
        for key in [k for k in self._cells if k not in new]:
            del self._cells[key]
            self._strips.pop(key, None)
        n_old = len(self._keys)
        dirty.update(range(len(keys), n_old))  # rows that left: blank lines now
        self._keys = keys
        self._index = {k: i for i, k in enumerate(keys)}
        if len(keys) != n_old:
            self._set_height()
        if selected is not None and selected in self._index:
            if self._index[selected] != self.cursor_row:
                dirty.add(self.cursor_row)
                self.move_cursor(self._index[selected])
        elif self.cursor_row >= len(keys):
            self.move_cursor(len(keys) - 1)
        self._refresh_rows(dirty)

    def move_cursor(self, row: int) -> None:
        row = max(0, min(row, len(self._keys) - 1))
        old_key = self.cursor_key
        old, self.cursor_row = self.cursor_row, row
        if self.cursor_key != old_key:
            self.post_message(self.CursorMoved(self, self.cursor_key))
        self._refresh_rows({old, row})
        self._into_view(row)

    def scroll_to_row(self, key: int) -> None:
        """Scroll (the cursor stays) so that the row of `key` is in view."""
        row = self._index.get(key)
        if row is not None:
            self._into_view(row)

    def _into_view(self, row: int) -> None:
        top = round(self.scroll_y)
        visible = max(self.scrollable_content_region.height - 1, 1)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + visible:
            self.scroll_to(y=row - visible + 1, animate=False)

    # ------------------------------------------------------------------ actions and events

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * max(self.scrollable_content_region.height - 1, 1))

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self._keys) - 1)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            x = 0
            for key, _label, width, _right in self._columns:
                x += width + 2 * PAD
                if offset.x < x:
                    self.post_message(self.HeaderSelected(self, key))
                    break
            return
        row = round(self.scroll_y) + offset.y - 1
        if row < len(self._keys):
            self.move_cursor(row)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None
        self._cursor = None
        self._styles.clear()
        self._strips.clear()
        self._header = None

    # ------------------------------------------------------------------ rendering

    def _set_height(self) -> None:
        width = sum(w + 2 * PAD for *_, w, _r in self._columns)
        size = Size(width, len(self._keys) + 1)
        if size != self.virtual_size:
            self.virtual_size = size

    def _refresh_rows(self, rows: set[int]) -> None:
        if not rows:
            return
        top = round(self.scroll_y)
        height = self.size.height
        width = self.size.width
        lines = [i - top + 1 for i in rows if 1 <= i - top + 1 < height]
        if len(lines) > height // 2:
            self.refresh()
        elif lines:
            self.refresh(*(Region(0, y, width, 1) for y in lines))

    def _style(self, spec: str) -> Style:
        style = self._styles.get(spec)
        if style is None:
            if spec.startswith("."):
                style = self.get_component_styles(spec[1:]).rich_style
            else:
                style = Style.parse(spec) if spec else Style()
            self._styles[spec] = style
        return style

    def _render_cells(self, cells: list[Cell], base: Style, over: Style | None, width: int) -> Strip:
        segments = []
        for (_key, _label, w, right), (text, spec) in zip(self._columns, cells, strict=True):
            style = base + self._style(spec) if spec else base
            if over is not None:
                style += over
            segments.append(Segment(" " * PAD + _fit(text, w, right) + " " * PAD, style))
        return Strip(segments).adjust_cell_length(width, base + over if over is not None else base)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._width:
            self._width = width
            self._strips.clear()
            self._header = None
            self._cursor = None
        base = self._base
        if base is None:  # Textual computes it from every ancestor's styles: once, not for each line drawn
            base = self._base = self.rich_style
        if y == 0:
            if self._header is None:
                labels = [self._labels[k] for k, *_ in self._columns]
                self._header = self._render_cells(labels, base, self._style(".process-table--header"), width)
            return self._header
        row = round(self.scroll_y) + y - 1
        if row >= len(self._keys):
            return Strip.blank(width, base)
        key = self._keys[row]
        if row == self.cursor_row:
            cells = self._cells[key]
            if self._cursor is None or self._cursor[0] != key or self._cursor[1] is not cells:
                cursor = self._style(".process-table--cursor")
                self._cursor = (key, cells, self._render_cells(list(cells), base, cursor, width))
            return self._cursor[2]
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strips[key] = self._render_cells(list(self._cells[key]), base, None, width)
        return strip
