"""Two saved sessions side by side."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Static

from gputop_tracker.core.report import (
    compare_rows,
    load_full,
    timeline_series,
)
from gputop_tracker.core.store import sessions as store
from gputop_tracker.tui.history.parts import TitleLine
from gputop_tracker.tui.history.screens.base import HistoryScreenBase
from gputop_tracker.tui.widgets.charts import Series, TimeChart


class CompareScreen(HistoryScreenBase):
    """Two sessions side by side: each figure, the difference (B − A) and which is better."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("x", "swap", "Swap A/B", id="history.swap"),
    ]

    def __init__(self, entry_a: store.Entry, entry_b: store.Entry) -> None:
        super().__init__(classes="history-screen")
        self.a = load_full(entry_a)
        self.b = load_full(entry_b)

    def compose(self) -> ComposeResult:
        sa, sb = self.a.session, self.b.session
        if sa is None or sb is None or sa.summary is None or sb.summary is None:
            bad = self.a if sa is None or sa.summary is None else self.b
            yield Static(Text(f"cannot compare: session {bad.id} is {bad.error or 'without a summary'}", "red"))
            yield Footer()
            return
        with Vertical(classes="history-compare-heads"):
            yield TitleLine(sa, Text("A  ", style="bold cyan"))
            yield TitleLine(sb, Text("B  ", style="bold magenta"))
        yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
        xa, ca = timeline_series(sa)
        xb, cb = timeline_series(sb)
        with Horizontal(classes="history-compare-charts"):
            for title, col, unit in (("RAM combined", "combined_total", "bytes"), ("CPU", "cpu_percent", "percent")):
                yield TimeChart(
                    title,
                    xa or xb,
                    [Series("A", ca.get(col, []), "cyan", xa), Series("B", cb.get(col, []), "magenta", xb)],
                    unit=unit,
                    y_top=100 if unit == "percent" else 0.0,
                    id=f"compare-{col}",
                )
        yield Footer()

    AUTO_FOCUS = ""  # none: focused in `_fill`, without the scroll that hid A's command line (below)

    def on_mount(self) -> None:
        self._fill()

    def _fill(self) -> None:
        sa, sb = self.a.session, self.b.session
        if sa is None or sb is None or sa.summary is None or sb.summary is None:
            return
        table = self.query_one("#compare-table", DataTable)
        table.clear(columns=True)
        table.add_column("figure", key="figure")
        table.add_column(Text("A", style="bold cyan", justify="right"), key="a")
        table.add_column(Text("B", style="bold magenta", justify="right"), key="b")
        table.add_column(Text("B − A", justify="right"), key="diff")
        table.add_column(Text("change", justify="right"), key="pct")
        table.add_column("better", key="better")
        for label, va, vb, diff, pct, verdict in compare_rows(sa.summary, sb.summary):
            style = {"A": "bold cyan", "B": "bold magenta"}.get(verdict, "dim")
            table.add_row(
                label,
                Text(va, justify="right"),
                Text(vb, justify="right"),
                Text(diff, justify="right"),
                Text(pct, justify="right"),
                Text(verdict, style=style),
                key=label,
            )
        # Taller than a short terminal (80x24), the screen scrolled to show the focused table whole, and A's
        # command line (which run is A) went above the edge: it stays at its top; the charts are a scroll away.
        self.set_focus(table, scroll_visible=False)
        self.scroll_home(animate=False, immediate=True)

    def action_swap(self) -> None:
        self.a, self.b = self.b, self.a
        self.refresh(recompose=True)
        self.call_after_refresh(self._fill)
