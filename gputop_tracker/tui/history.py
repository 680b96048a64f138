"""Session history: browse, inspect, compare, export and delete the sessions saved in the store.

`HistoryScreen(store_dir)` is a plain Screen so the live app can push it (`h`); `run_history` shows it in
its own small app (`gputop-track --history`). The list reads each file without its timeline
(`store.list_entries(timeline=False)`: 1,000 sessions in ~0.15 s; on the UI thread for a usual store, in a
worker past SYNC_LOAD_MAX files); the detail and compare screens read the one or two files they show in
full. Unreadable files are rows with the reason, never exceptions. Charts are drawn here in braille with
labelled axes (no plotting dependency).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, ScrollableContainer, Vertical, VerticalScroll
from textual.events import Resize
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Button, DataTable, Footer, Input, Label, Static, TabbedContent, TabPane

from gputop_tracker.core import report, store
from gputop_tracker.core.models import ResourceUsage, Session
from gputop_tracker.core.units import human_bytes, human_seconds

CSS_FILE = "history.tcss"
NARROW = 100  # columns: under this the list and the detail use their compact layouts


# --------------------------------------------------------------------------- figures of one session


def _fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def _local(t: float, fmt: str) -> str:
    return time.strftime(fmt, time.localtime(t))


def _start_from_id(sid: str) -> float | None:
    """An unreadable file still has a name that starts with its start time (local, as store names it)."""
    try:
        return time.mktime(time.strptime(sid[:15], "%Y%m%d-%H%M%S"))
    except (ValueError, OverflowError):
        return None


@dataclass
class Row:
    """One line of the list: the figures of a session, or why its file cannot be read."""

    id: str
    entry: store.Entry
    start: float | None
    command: str = ""
    host: str = ""
    duration: float | None = None
    exit: str = ""
    exit_rank: float = math.inf
    peak_ram: float | None = None
    peak_gpu: float | None = None
    cpu: float | None = None
    gpu_util: float | None = None
    running: bool = False
    error: str | None = None

    @classmethod
    def of(cls, entry: store.Entry) -> Row:
        s = entry.session
        if s is None:
            return cls(entry.id, entry, _start_from_id(entry.id), error=entry.error or "unreadable")
        from gputop_tracker.core.text import escape_controls  # a newline in a command must not split the row

        m = s.meta
        u = s.summary
        row = cls(entry.id, entry, m.start_time or None, command=escape_controls(" ".join(m.command)), host=m.host)
        row.running = entry.running
        if m.status == "running":
            row.exit, row.exit_rank = ("running", -1) if row.running else ("stale", 1e9)
        elif u is not None and u.exit_signal:
            row.exit, row.exit_rank = f"sig {u.exit_signal}", 1000 + u.exit_signal
        elif m.exit_code is not None:
            row.exit, row.exit_rank = str(m.exit_code), m.exit_code
        if u is not None:
            row.duration = u.compute_time.time
            row.peak_ram = u.max_ram.combined.total_rss
            row.peak_gpu = u.max_gpu_ram.combined if u.gpus else None
            row.cpu = u.cpu_utilization.combined.mean_sum_percent
            row.gpu_util = u.gpu_utilization.gpu_percentages.mean_sum_percent if u.gpus else None
        elif m.end_time:
            row.duration = m.end_time - m.start_time
        return row

    def haystack(self) -> str:
        """What the filter matches: command, host, date and time, id, state."""
        when = _local(self.start, "%Y-%m-%d %H:%M:%S") if self.start else ""
        extra = "unreadable " + (self.error or "") if self.error else self.exit
        return f"{self.command} {self.host} {when} {self.id} {extra}".lower()


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int
    sort: Callable[[Row], Any] | None
    right: bool = False
    descending: bool = True
    """Direction of the first click: newest, largest first; text A→Z."""


def _num(v: float | None) -> float:
    return -math.inf if v is None else v


COLUMNS: list[Column] = [
    Column("mark", "✓", 1, None),
    Column("start", "start", 16, lambda r: _num(r.start)),
    Column("command", "command", 30, lambda r: r.command.lower(), descending=False),
    Column("duration", "duration", 8, lambda r: _num(r.duration), right=True),
    Column("exit", "exit", 7, lambda r: r.exit_rank, right=True, descending=False),
    Column("ram", "peak RAM", 9, lambda r: _num(r.peak_ram), right=True),
    Column("gpu", "peak GPU", 9, lambda r: _num(r.peak_gpu), right=True),
    Column("cpu", "mean CPU", 8, lambda r: _num(r.cpu), right=True),
    Column("gpu_util", "mean GPU", 8, lambda r: _num(r.gpu_util), right=True),
    Column("host", "host", 12, lambda r: r.host.lower(), descending=False),
]
COLUMN_BY_KEY = {c.key: c for c in COLUMNS}
SORTABLE = [c.key for c in COLUMNS if c.sort is not None]


def filter_rows(rows: Iterable[Row], text: str) -> list[Row]:
    """Rows whose command, host, date, id or state contain every word of `text` (any case)."""
    words = text.lower().split()
    if not words:
        return list(rows)
    return [r for r in rows if all(w in r.haystack() for w in words)]


def sort_rows(rows: Iterable[Row], key: str, reverse: bool) -> list[Row]:
    """Readable sessions ordered by a column; unreadable files always last (they have no figures)."""
    by = COLUMN_BY_KEY[key].sort or (lambda r: r.start)
    rows = list(rows)
    good = sorted((r for r in rows if r.error is None), key=lambda r: (by(r), r.id), reverse=reverse)
    bad = sorted((r for r in rows if r.error is not None), key=lambda r: r.id, reverse=True)
    return good + bad


class Cell:
    """A list cell that DataTable does not measure: the list's columns have fixed widths, and measuring
    every Text of 1,000 rows (three terminal-size queries each) took longer than reading the store."""

    __slots__ = ("text",)

    def __init__(self, text: str, style: str = "", right: bool = False) -> None:
        self.text = Text(text, style=style, justify="right" if right else "left", no_wrap=True, overflow="ellipsis")

    def __rich_console__(self, console: Any, options: Any) -> Iterable[Text]:
        yield self.text

    def __str__(self) -> str:
        return self.text.plain


# --------------------------------------------------------------------------- charts


_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))  # braille dot bits by [column][row from top]
_BYTE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))


def nice_ceiling(v: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above v (an axis top that reads well)."""
    if v <= 0:
        return 1.0
    exp = math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        top = m * 10**exp
        if top >= v * (1 - 1e-9):
            return float(top)
    return float(10 ** (exp + 1))


def short_time(s: float) -> str:
    """Axis labels: 42s, 5m, 12m30s, 1h05m."""
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        m, sec = divmod(round(s), 60)
        return f"{m}m" if sec == 0 else f"{m}m{sec:02d}s"
    h, m = divmod(round(s / 60), 60)
    return f"{h}h{m:02d}m"


@dataclass
class Series:
    label: str
    values: Sequence[float | None]
    color: str
    xs: Sequence[float] | None = None
    """Elapsed seconds of each value, when not the chart's (two sessions of different lengths on one chart)."""


class TimeChart(Widget):
    """A line chart over elapsed time drawn in braille, with a labelled y axis (unit) and time axis."""

    DEFAULT_CSS = """
    TimeChart { height: 10; min-height: 6; }
    """

    def __init__(
        self,
        title: str,
        xs: Sequence[float],
        series: Sequence[Series],
        *,
        unit: str = "bytes",
        y_top: float = 0.0,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.title = title
        self.xs = list(xs)
        self.series = list(series)
        self.unit = unit
        self.y_top = y_top

    def _scale(self) -> tuple[float, Callable[[float], str]]:
        peak = max((v for s in self.series for v in s.values if v is not None), default=0.0)
        if self.unit == "percent":
            top = max(self.y_top, nice_ceiling(peak))
            return top, lambda v: f"{v:.0f}%"
        name, factor = next(((n, f) for n, f in _BYTE_UNITS if peak >= f), ("B", 1.0))
        top = max(self.y_top, nice_ceiling(peak / factor) * factor if peak > 0 else 1.0)
        return top, lambda v: f"{v / factor:g} {name}" if v else "0"

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        out = Text(no_wrap=True, overflow="crop")
        out.append(self.title, style="bold")
        for s in self.series:
            out.append("  ━ ", style=s.color)
            out.append(s.label)
        if not self.xs or width < 12 or height < 4:
            out.append("\n  no samples recorded" if not self.xs else "")
            return out
        plot_h = height - 3
        top, fmt = self._scale()
        fractions = (1.0, 0.75, 0.5, 0.25, 0.0) if plot_h >= 9 else (1.0, 0.5, 0.0)
        labels: dict[int, str] = {}
        for f in fractions:
            labels.setdefault(round((1 - f) * (plot_h - 1)), fmt(top * f))
        label_w = max(len(v) for v in labels.values())
        plot_w = max(1, width - label_w - 1)
        cells = [[0] * plot_w for _ in range(plot_h)]
        colors: list[list[str | None]] = [[None] * plot_w for _ in range(plot_h)]
        px_w, px_h = plot_w * 2, plot_h * 4
        x_end = max([self.xs[-1], *(s.xs[-1] for s in self.series if s.xs)], default=0.0) or 1e-9

        def dot(px: int, py: int, color: str) -> None:
            py = min(max(py, 0), px_h - 1)
            r, c = plot_h - 1 - py // 4, px // 2
            cells[r][c] |= _DOTS[px % 2][3 - py % 4]
            colors[r][c] = color

        for s in self.series:
            # one point per pixel column: the largest value in it, so peaks survive narrow terminals
            points: dict[int, float] = {}
            for x, v in zip(s.xs or self.xs, s.values, strict=False):
                if v is None:
                    continue
                px = min(px_w - 1, int(x / x_end * (px_w - 1) + 0.5))
                points[px] = max(points.get(px, v), v)
            known = sorted(points.items())
            for (c0, v0), (c1, v1) in itertools.pairwise(known):
                for c in range(c0, c1):
                    ya = (v0 + (v1 - v0) * (c - c0) / (c1 - c0)) / top * (px_h - 1)
                    yb = (v0 + (v1 - v0) * (c + 1 - c0) / (c1 - c0)) / top * (px_h - 1)
                    lo, hi = sorted((round(ya), round(yb)))
                    for py in range(lo, max(lo, hi - 1) + 1):
                        dot(c, py, s.color)
            if known:
                c, v = known[-1]
                dot(c, round(v / top * (px_h - 1)), s.color)
        for r in range(plot_h):
            out.append("\n")
            label = labels.get(r)
            out.append(f"{label or '':>{label_w}}", style="dim")
            out.append("┤" if label else "│", style="dim")
            for c in range(plot_w):
                out.append(chr(0x2800 + cells[r][c]), style=colors[r][c] or "")
        out.append("\n" + " " * label_w + "└" + "─" * plot_w, style="dim")
        axis = [" "] * (plot_w + 1)
        ticks = [(0, short_time(0))]
        if plot_w >= 24:
            ticks.append((plot_w // 2, short_time(x_end / 2)))
        end = short_time(x_end)
        ticks.append((plot_w + 1 - len(end), end))
        for at, text in ticks:
            for i, ch in enumerate(text):
                if 0 <= at + i < len(axis):
                    axis[at + i] = ch
        out.append("\n" + " " * label_w + "".join(axis), style="dim")
        return out


def timeline_series(session: Session) -> tuple[list[float], dict[str, list[float | None]]]:
    """The timeline as columns: elapsed seconds and each column by name."""
    tl = session.timeline
    index = {c: i for i, c in enumerate(tl.columns)}
    at = index.get("elapsed", 0)
    rows = [r for r in tl.rows if len(r) > at and r[at] is not None]
    xs = [float(r[at] or 0.0) for r in rows]
    cols = {c: [r[i] if i < len(r) else None for r in rows] for c, i in index.items()}
    return xs, cols


GPU_COLORS = ("magenta", "bright_cyan", "yellow", "bright_green", "bright_red", "blue", "bright_magenta", "cyan")


def session_charts(session: Session) -> list[TimeChart]:
    xs, cols = timeline_series(session)
    gpus = sorted(int(m[1]) for c in cols if (m := re.fullmatch(r"gpu(\d+)_memory", c)))
    charts = [
        TimeChart(
            "RAM",
            xs,
            [
                Series("combined", cols.get("combined_total", []), "bright_green"),
                Series("main", cols.get("main_rss", []), "cyan"),
                Series("descendants", cols.get("descendants_total", []), "yellow"),
            ],
            id="chart-ram",
        ),
        TimeChart(
            "CPU (100% = one core)",
            xs,
            [Series("tree", cols.get("cpu_percent", []), "bright_blue")],
            unit="percent",
            y_top=100,
            id="chart-cpu",
        ),
    ]
    if gpus:
        charts.append(
            TimeChart(
                "GPU memory (tree)",
                xs,
                [
                    Series(f"GPU {g}", cols.get(f"gpu{g}_memory", []), GPU_COLORS[i % len(GPU_COLORS)])
                    for i, g in enumerate(gpus)
                ],
                id="chart-gpu-memory",
            )
        )
        charts.append(
            TimeChart(
                "GPU utilization",
                xs,
                [
                    Series(f"GPU {g}", cols.get(f"gpu{g}_util", []), GPU_COLORS[i % len(GPU_COLORS)])
                    for i, g in enumerate(gpus)
                ],
                unit="percent",
                y_top=100,
                id="chart-gpu-util",
            )
        )
    return charts


# --------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class Figure:
    label: str
    get: Callable[[ResourceUsage], float | None]
    kind: str  # bytes | seconds | percent | count
    better: str | None  # "lower" or "higher" is better; None: neither


def _gpu_or_none(u: ResourceUsage, v: float) -> float | None:
    return v if u.gpus else None


FIGURES: list[Figure] = [
    Figure("wall time", lambda u: u.compute_time.time, "seconds", "lower"),
    Figure("peak RAM (combined)", lambda u: u.max_ram.combined.total_rss, "bytes", "lower"),
    Figure("peak RAM main", lambda u: u.max_ram.main.total_rss, "bytes", "lower"),
    Figure("peak RAM descendants", lambda u: u.max_ram.descendants.total_rss, "bytes", "lower"),
    Figure("peak GPU memory", lambda u: _gpu_or_none(u, u.max_gpu_ram.combined), "bytes", "lower"),
    Figure("CPU time", lambda u: u.cpu_time.total, "seconds", "lower"),
    Figure("mean CPU", lambda u: u.cpu_utilization.combined.mean_sum_percent, "percent", None),
    Figure("max CPU", lambda u: u.cpu_utilization.combined.max_sum_percent, "percent", None),
    Figure(
        "mean GPU util",
        lambda u: _gpu_or_none(u, u.gpu_utilization.gpu_percentages.mean_sum_percent),
        "percent",
        "higher",
    ),
    Figure("peak threads", lambda u: float(u.peak_threads), "count", None),
    Figure("processes", lambda u: float(u.n_processes), "count", None),
]


def _fmt(kind: str, v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    sign = "+" if signed and v > 0 else ("−" if signed and v < 0 else "")
    a = abs(v) if signed else v
    if kind == "bytes":
        return sign + human_bytes(a)
    if kind == "seconds":
        return sign + human_seconds(a)
    if kind == "percent":
        return f"{sign}{a:.1f}%"
    if kind == "percent0":
        return f"{sign}{a:.0f}%"
    return f"{sign}{a:g}"


def compare_rows(a: ResourceUsage, b: ResourceUsage) -> list[tuple[str, str, str, str, str, str]]:
    """(figure, A, B, B − A, change %, which is better) for each figure, in the user's units."""
    out = []
    for f in FIGURES:
        va, vb = f.get(a), f.get(b)
        if va is None or vb is None:
            out.append((f.label, _fmt(f.kind, va), _fmt(f.kind, vb), "-", "", ""))
            continue
        diff = vb - va
        pct = _fmt("percent0", diff / va * 100, signed=True) if va else ""
        if f.better is None or abs(diff) <= 1e-9 * max(abs(va), abs(vb), 1.0):
            verdict = "same" if abs(diff) <= 1e-9 * max(abs(va), abs(vb), 1.0) else ""
        else:
            b_wins = diff < 0 if f.better == "lower" else diff > 0
            verdict = "B" if b_wins else "A"
        out.append((f.label, _fmt(f.kind, va), _fmt(f.kind, vb), _fmt(f.kind, diff, signed=True), pct, verdict))
    ea, eb = a.exit_code, b.exit_code
    ok_a, ok_b = ea == 0, eb == 0
    verdict = "same" if ok_a == ok_b else ("A" if ok_a else "B")
    out.append(("exit code", str(ea if ea is not None else "-"), str(eb if eb is not None else "-"), "", "", verdict))
    return out


# --------------------------------------------------------------------------- screens


SYNC_LOAD_MAX = 2000  # session files read on the UI thread when the list opens; more are read in a worker


def _count_files(store_dir: Path) -> int:
    try:
        with os.scandir(store_dir) as it:
            return sum(1 for e in it if e.name.endswith(store.SUFFIX))
    except OSError:
        return 0


def _load_full(entry: store.Entry) -> store.Entry:
    return store.load(entry.path) if entry.partial or entry.session is None else entry


class _HistoryScreenBase(Screen[None]):
    """Every history screen: shares history.tcss and switches to the compact layout in narrow terminals."""

    CSS_PATH = CSS_FILE

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.width < NARROW, "narrow")


class SessionDetailScreen(_HistoryScreenBase):
    """One session: charts over time, the text report, the processes with their peaks."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("1", "tab('charts')", "Charts", id="history.tab_charts"),
        Binding("2", "tab('summary')", "Summary", id="history.tab_summary"),
        Binding("3", "tab('processes')", "Processes", id="history.tab_processes"),
        Binding("e", "export", "Export", id="history.export"),
    ]

    def __init__(self, entry: store.Entry, store_dir: Path | None = None) -> None:
        super().__init__(classes="history-screen")
        self.entry = _load_full(entry)
        self.store_dir = store_dir

    def compose(self) -> ComposeResult:
        s = self.entry.session
        if s is None:
            yield Static(Text(f"session {self.entry.id} is unreadable: {self.entry.error}", style="red"))
            yield Footer()
            return
        yield Static(_title(s), classes="history-title")
        with TabbedContent(initial="charts"):
            with TabPane("Charts", id="charts"), VerticalScroll(), Grid(classes="history-charts"):
                yield from session_charts(s)
            with TabPane("Summary", id="summary"), ScrollableContainer():
                text = report.to_text(s.summary, max_processes=50) if s.summary else "no summary saved yet\n"
                if s.events:  # the event timeline, after the report (sessions from before events have none)
                    text += "\n".join(["", f"Events ({len(s.events)})", *report.events_lines(s.events)]) + "\n"
                yield Static(Text(text.rstrip("\n"), no_wrap=True), classes="history-report")
            with TabPane("Processes", id="processes"):
                yield DataTable(id="processes-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        s = self.entry.session
        if s is None or s.summary is None:
            return
        t = self.query_one("#processes-table", DataTable)
        for label, right in (
            ("pid", True),
            ("ppid", True),
            ("role", False),
            ("name", False),
            ("peak RSS", True),
            ("private", True),
            ("PSS", True),
            ("peak GPU", True),
            ("CPU s", True),
            ("max CPU", True),
            ("threads", True),
            ("RSS from", False),
            ("exit", True),
            ("command line", False),
        ):
            t.add_column(Text(label, justify="right" if right else "left"), key=label)
        for p in sorted(s.summary.processes, key=lambda p: p.peak_rss, reverse=True):
            numbers = [
                str(p.pid),
                str(p.ppid),
                None,
                None,
                human_bytes(p.peak_rss),
                human_bytes(p.peak_private),
                human_bytes(p.peak_pss),
                human_bytes(p.peak_gpu_memory) if p.peak_gpu_memory else "-",
                f"{p.cpu_seconds:.1f}",
                _fmt_pct(p.max_cpu_percent),
                str(p.peak_threads),
                None,
                "" if p.exit_code is None else str(p.exit_code),
                None,
            ]
            texts = {2: p.role, 3: p.name, 11: p.peak_rss_source, 13: " ".join(p.cmdline)[:200]}
            t.add_row(
                *(Text(n, justify="right") if n is not None else Text(texts[i]) for i, n in enumerate(numbers)),
                key=str(p.pid),
            )

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_export(self) -> None:
        _ask_export(self, self.entry)


def _title(s: Session) -> Text:
    m = s.meta
    from gputop_tracker.core.text import escape_controls

    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(escape_controls(" ".join(m.command)) or "-", style="bold")
    when = _local(m.start_time, "%Y-%m-%d %H:%M:%S") if m.start_time else "-"
    t.append(f"  {when} on {m.host or '?'}  ", style="dim")
    t.append(m.id, style="dim")
    return t


class CompareScreen(_HistoryScreenBase):
    """Two sessions side by side: each figure, the difference (B − A) and which is better."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("x", "swap", "Swap A/B", id="history.swap"),
    ]

    def __init__(self, a: store.Entry, b: store.Entry) -> None:
        super().__init__(classes="history-screen")
        self.a = _load_full(a)
        self.b = _load_full(b)

    def compose(self) -> ComposeResult:
        sa, sb = self.a.session, self.b.session
        if sa is None or sb is None or sa.summary is None or sb.summary is None:
            bad = self.a if sa is None or sa.summary is None else self.b
            yield Static(Text(f"cannot compare: session {bad.id} is {bad.error or 'without a summary'}", "red"))
            yield Footer()
            return
        with Vertical(classes="history-compare-heads"):
            yield Static(Text("A  ", style="bold cyan") + _title(sa), classes="history-title")
            yield Static(Text("B  ", style="bold magenta") + _title(sb), classes="history-title")
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

    def on_mount(self) -> None:
        self._fill()

    def _fill(self) -> None:
        sa, sb = self.a.session, self.b.session
        if sa is None or sb is None or sa.summary is None or sb.summary is None:
            return
        t = self.query_one("#compare-table", DataTable)
        t.clear(columns=True)
        t.add_column("figure", key="figure")
        t.add_column(Text("A", style="bold cyan", justify="right"), key="a")
        t.add_column(Text("B", style="bold magenta", justify="right"), key="b")
        t.add_column(Text("B − A", justify="right"), key="diff")
        t.add_column(Text("change", justify="right"), key="pct")
        t.add_column("better", key="better")
        for label, va, vb, diff, pct, verdict in compare_rows(sa.summary, sb.summary):
            style = {"A": "bold cyan", "B": "bold magenta"}.get(verdict, "dim")
            t.add_row(
                label,
                Text(va, justify="right"),
                Text(vb, justify="right"),
                Text(diff, justify="right"),
                Text(pct, justify="right"),
                Text(verdict, style=style),
                key=label,
            )

    def action_swap(self) -> None:
        self.a, self.b = self.b, self.a
        self.refresh(recompose=True)
        self.call_after_refresh(self._fill)


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
            export_session(self.entry, path)
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


def export_session(entry: store.Entry, path: Path) -> str:
    """Write the session (JSON) or its timeline (CSV, by the path's suffix); returns the format written."""
    from gputop_tracker.sessions_cli import timeline_csv

    full = store.load(entry.path)
    if full.session is None:
        raise LookupError(f"session {entry.id} is unreadable: {full.error}")
    if path.suffix.lower() == ".csv":
        store.write_output(path, timeline_csv(full.session).encode())
        return "csv"
    store.write_output(path, (json.dumps(full.session.model_dump(mode="json"), indent=2) + "\n").encode())
    return "json"


def _ask_export(screen: Screen[Any], entry: store.Entry) -> None:
    if entry.session is None:
        screen.notify(f"cannot export an unreadable session: {entry.error}", severity="error")
        return

    def done(path: Path | None) -> None:
        if path is not None:
            screen.notify(f"exported {entry.id} to {path}")

    screen.app.push_screen(ExportScreen(entry), done)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; No is the default."""

    CSS_PATH = CSS_FILE
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="history.yes"),
        Binding("n,escape", "answer(False)", "No", id="history.no"),
    ]

    def __init__(self, question: str, detail: str = "", yes: str = "Delete") -> None:
        super().__init__(classes="history-modal")
        self.question = question
        self.detail = detail
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="history-dialog"):
            yield Label(Text(self.question, style="bold"))
            if self.detail:
                yield Label(Text(self.detail))
            with Horizontal(classes="history-buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="confirm-yes")
                yield Button("Cancel (n)", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class HistoryScreen(_HistoryScreenBase):
    """Every saved session: sort, filter, mark two to compare, open, export, delete."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", id="history.back", show=False),
        Binding("slash", "focus_filter", "Filter", key_display="/", id="history.filter"),
        Binding("enter", "open", "Open", key_display="⏎", id="history.open"),
        Binding("space", "mark", "Mark", id="history.mark", tooltip="mark up to two sessions to compare"),
        Binding("c", "compare", "Compare", id="history.compare"),
        Binding("s", "sort_next", "Sort", id="history.sort", tooltip="sort by the next column"),
        Binding("r", "sort_reverse", "Reverse", id="history.reverse"),
        Binding("e", "export", "Export", id="history.export"),
        Binding("d,delete", "delete", "Delete", id="history.delete"),
        Binding("f5,ctrl+r", "reload", "Reload", id="history.reload", show=False),
    ]

    class Loaded(Message):
        """The store was read (in a worker thread)."""

        def __init__(self, entries: list[store.Entry], seconds: float) -> None:
            super().__init__()
            self.entries = entries
            self.seconds = seconds

    def __init__(self, store_dir: Path) -> None:
        super().__init__(classes="history-screen")
        self.store_dir = store_dir
        self.rows: list[Row] = []
        self.shown: list[Row] = []
        self.marked: list[str] = []
        self.sort_key = "start"
        self.sort_reverse = True
        self.loaded = False
        self.load_seconds = 0.0
        self._narrow: bool | None = None

    def compose(self) -> ComposeResult:
        yield Input(placeholder="/ filter: command, host, date (e.g. train 2025-01-02)", id="history-filter")
        yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
        yield Static(Text("reading sessions…"), id="history-status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#history-table", DataTable).focus()
        if _count_files(self.store_dir) <= SYNC_LOAD_MAX:
            # Read at once: ~0.15 s per 1,000 files. A thread racing the app's own start-up for the GIL
            # took three times as long; past SYNC_LOAD_MAX the worker keeps the screen responsive.
            self.on_history_screen_loaded(self.Loaded(*self._read()))
        else:
            self._load()

    def _read(self) -> tuple[list[store.Entry], float]:
        t0 = time.perf_counter()
        entries = store.list_entries(self.store_dir, timeline=False)
        for e in entries:
            _ = e.running  # checks a pid
        return entries, time.perf_counter() - t0

    @work(thread=True, group="history-load", exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.Loaded(*self._read()))

    def on_history_screen_loaded(self, message: Loaded) -> None:
        self.rows = [Row.of(e) for e in message.entries]
        self.load_seconds = message.seconds
        self.loaded = True
        known = {r.id for r in self.rows}
        self.marked = [m for m in self.marked if m in known]
        self._rebuild()

    # -- table

    def _columns_for(self, width: int) -> list[tuple[Column, int]]:
        """Each column with its width: the command gets what the others leave (the start is shorter when narrow)."""
        narrow = width < NARROW
        widths = {c.key: (11 if c.key == "start" and narrow else c.width) for c in COLUMNS}
        fixed = sum(w + 2 for k, w in widths.items() if k != "command")
        widths["command"] = max(16, min(60, width - fixed - 2 - 2))  # its cell padding, the scroll bar
        return [(c, widths[c.key]) for c in COLUMNS]

    def _rebuild(self) -> None:
        table = self.query_one("#history-table", DataTable)
        width = self.size.width or 80
        narrow = width < NARROW
        cursor_id = self._cursor_id()
        table.clear(columns=True)
        for c, w in self._columns_for(width):
            label = c.label
            if c.key == self.sort_key:
                label += " ▼" if self.sort_reverse else " ▲"
            table.add_column(Text(label, justify="right" if c.right else "left"), width=w, key=c.key)
        self._narrow = narrow
        rows = filter_rows(self.rows, self.query_one("#history-filter", Input).value)
        self.shown = sort_rows(rows, self.sort_key, self.sort_reverse)
        start_fmt = "%m-%d %H:%M" if narrow else "%Y-%m-%d %H:%M"
        for r in self.shown:
            table.add_row(*self._cells(r, start_fmt), key=r.id)
        if cursor_id is not None and cursor_id in table.rows:
            table.move_cursor(row=table.get_row_index(cursor_id), animate=False)
        self._status()

    def _cells(self, r: Row, start_fmt: str) -> list[Cell]:
        mark = Cell("✓", "bold green") if r.id in self.marked else Cell("")
        start = Cell(_local(r.start, start_fmt) if r.start else "?")
        if r.error is not None:
            blank = Cell("")
            error = [Cell(f"unreadable: {r.error}", "red"), blank, Cell("error", "red", right=True)]
            return [mark, start, *error, blank, blank, blank, blank, Cell(r.id, "dim")]
        exit_style = {"running": "bold green", "stale": "yellow", "0": ""}.get(r.exit, "red")
        return [
            mark,
            start,
            Cell(r.command or "-"),
            Cell(short_time(r.duration) if r.duration is not None else "-", right=True),
            Cell(r.exit or "-", exit_style, right=True),
            Cell(human_bytes(r.peak_ram) if r.peak_ram is not None else "-", right=True),
            Cell(human_bytes(r.peak_gpu) if r.peak_gpu is not None else "-", right=True),
            Cell(_fmt_pct(r.cpu), right=True),
            Cell(_fmt_pct(r.gpu_util), right=True),
            Cell(r.host),
        ]

    def _status(self) -> None:
        n_bad = sum(r.error is not None for r in self.rows)
        n_run = sum(r.running for r in self.rows)
        parts = [f"{len(self.rows)} sessions in {self.store_dir}"]
        if n_run:
            parts.append(f"{n_run} running")
        if n_bad:
            parts.append(f"{n_bad} unreadable")
        if len(self.shown) != len(self.rows):
            parts.append(f"{len(self.shown)} match the filter")
        col = COLUMN_BY_KEY[self.sort_key]
        parts.append(f"sorted by {col.label} {'▼' if self.sort_reverse else '▲'}")
        if self.marked:
            parts.append(f"marked {len(self.marked)}/2")
        self.query_one("#history-status", Static).update(Text(" · ".join(parts), no_wrap=True, overflow="ellipsis"))

    def _cursor_id(self) -> str | None:
        table = self.query_one("#history-table", DataTable)
        if not table.row_count:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except Exception:
            return None
        return key.value

    def _cursor_row(self) -> Row | None:
        sid = self._cursor_id()
        return next((r for r in self.shown if r.id == sid), None)

    def on_resize(self, event: Resize) -> None:
        super().on_resize(event)
        if self.loaded and (event.size.width < NARROW) != self._narrow:
            self._rebuild()

    # -- filter and sort

    @on(Input.Changed, "#history-filter")
    def _filter_changed(self) -> None:
        if self.loaded:
            self._rebuild()

    @on(Input.Submitted, "#history-filter")
    def _filter_done(self) -> None:
        self.query_one("#history-table", DataTable).focus()

    def action_focus_filter(self) -> None:
        self.query_one("#history-filter", Input).focus()

    def action_back(self) -> None:
        flt = self.query_one("#history-filter", Input)
        if flt.has_focus:
            self.query_one("#history-table", DataTable).focus()
        elif flt.value:
            flt.value = ""
        elif len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    @on(DataTable.HeaderSelected, "#history-table")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key not in SORTABLE:
            return
        self.sort_by(key, not self.sort_reverse if key == self.sort_key else COLUMN_BY_KEY[key].descending)

    def sort_by(self, key: str, reverse: bool) -> None:
        self.sort_key, self.sort_reverse = key, reverse
        self._rebuild()

    def action_sort_next(self) -> None:
        nxt = COLUMN_BY_KEY[SORTABLE[(SORTABLE.index(self.sort_key) + 1) % len(SORTABLE)]]
        self.sort_by(nxt.key, nxt.descending)

    def action_sort_reverse(self) -> None:
        self.sort_by(self.sort_key, not self.sort_reverse)

    # -- actions on sessions

    @on(DataTable.RowSelected, "#history-table")
    def _selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        row = self._cursor_row()
        if row is None:
            return
        if row.error is not None:
            self.notify(f"{row.id} is unreadable: {row.error}", severity="error")
            return
        self.app.push_screen(SessionDetailScreen(row.entry, self.store_dir))

    def action_mark(self) -> None:
        row = self._cursor_row()
        if row is None:
            return
        if row.id in self.marked:
            self.marked.remove(row.id)
        elif row.error is not None:
            self.notify("an unreadable session cannot be compared", severity="warning")
            return
        else:
            self.marked.append(row.id)
            del self.marked[:-2]  # a third mark replaces the oldest
        table = self.query_one("#history-table", DataTable)
        for r in self.shown:
            table.update_cell(r.id, "mark", Cell("✓", "bold green") if r.id in self.marked else Cell(""))
        table.action_cursor_down()
        self._status()

    def action_compare(self) -> None:
        by_id = {r.id: r for r in self.rows}
        ids = list(self.marked)
        if len(ids) == 1:
            cur = self._cursor_row()
            if cur is not None and cur.id != ids[0] and cur.error is None:
                ids.append(cur.id)
        if len(ids) != 2:
            self.notify("mark two sessions with space, then press c", severity="warning")
            return
        # A is the earlier run, B the later: "did the change help?" reads B against A
        a, b = sorted((by_id[i] for i in ids), key=lambda r: (r.start or 0, r.id))
        self.app.push_screen(CompareScreen(a.entry, b.entry))

    def action_export(self) -> None:
        row = self._cursor_row()
        if row is not None:
            _ask_export(self, row.entry)

    def action_delete(self) -> None:
        row = self._cursor_row()
        if row is None:
            return
        if row.running:
            self.notify("this session is still running; stop its gputop-track first", severity="warning")
            return
        detail = f"{row.command or row.error}\nThe file {row.entry.path} is removed; this cannot be undone."

        def done(yes: bool | None) -> None:
            if yes:
                self.delete_session(row)

        self.app.push_screen(ConfirmScreen(f"Delete session {row.id}?", detail), done)

    def delete_session(self, row: Row) -> None:
        try:
            store.delete(self.store_dir, row.id)
        except (OSError, LookupError) as e:
            msg = e.strerror if isinstance(e, OSError) else str(e)
            self.notify(f"cannot delete {row.id}: {msg}", severity="error")
            return
        self.rows = [r for r in self.rows if r.id != row.id]
        self.shown = [r for r in self.shown if r.id != row.id]
        if row.id in self.marked:
            self.marked.remove(row.id)
        self.query_one("#history-table", DataTable).remove_row(row.id)
        self._status()
        self.notify(f"deleted {row.id}")

    def action_reload(self) -> None:
        self._load()


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
