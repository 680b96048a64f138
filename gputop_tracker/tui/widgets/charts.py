"""Line charts over elapsed time, drawn in braille with labelled axes (no plotting dependency): the
history's charts of one session and of two sessions compared."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rich.text import Text
from textual.widget import Widget

from gputop_tracker.core.model import Session, escape_controls
from gputop_tracker.core.report import BlockRun, block_spans, timeline_series

_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))  # braille dot bits by [column][row from top]
# the bits of a cell's dots from height a to b (0: its bottom row) in its left or right column: [column][a][b]
_RUNS = tuple(
    tuple(tuple(sum(dots[3 - y] for y in range(a, b + 1)) for b in range(4)) for a in range(4)) for dots in _DOTS
)
_BRAILLE = tuple(chr(0x2800 + b) for b in range(256))
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
    """Axis labels: 0.4s (under 10 s), 42s, 5m, 12m30s, 1h05m."""
    if s < 10 and round(s, 1) != round(s):
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        m, sec = divmod(round(s), 60)
        return f"{m}m" if sec == 0 else f"{m}m{sec:02d}s"
    h, m = divmod(round(s / 60), 60)
    return f"{h}h{m:02d}m"


def stepped_end(x: float) -> float:
    """The end of a growing time axis: a multiple of a round step near an eighth of it, so the axis moves
    about eight times per doubling of the run rather than on every sample."""
    step = nice_ceiling(x / 8) if x > 0 else 1.0
    return max(step, math.ceil(x / step - 1e-9) * step)


@dataclass
class Bands:
    """Code blocks shaded on a chart (their outermost runs, elapsed seconds) and marks on its time axis."""

    spans: Sequence[BlockRun]
    marks: Sequence[tuple[float, str]]


SHADES = ("on #1d2b3a", "on #2e2440")  # the block runs in turn: two neighbours stay apart
MARK_STYLE = "bold yellow"


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
        peak: tuple[float, float] | None = None,
        bands: Bands | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.bands = bands if bands is not None and (bands.spans or bands.marks) else None
        """Code blocks shaded on the plot and named in a row under it; marks as ticks on the time axis."""
        self.title = title
        self.xs = list(xs)
        self.series = list(series)
        self.unit = unit
        self.y_top = y_top
        self.peak = peak
        """(value, elapsed) of the first series' peak: named in the title and marked on the plot."""
        self.stepped_axis = False
        """The time axis ends on a round figure that grows in steps (a live chart: most lines stay the same)."""
        self._memos: list[PlotMemo] = []  # each series as last plotted
        self._rows: dict[tuple[object, ...], list[tuple[str, str]]] = {}

    def set_data(self, xs: Sequence[float], series: Sequence[Series], peak: tuple[float, float] | None = None) -> None:
        """New points (a live chart, once a sample): one repaint, no layout."""
        self.xs = list(xs)
        self.series = list(series)
        self.peak = peak
        self.refresh()

    def _scale(self) -> tuple[float, Callable[[float], str]]:
        peak = max((_largest(s.values) for s in self.series), default=0.0)
        if self.unit == "percent":
            top = max(self.y_top, nice_ceiling(peak))
            return top, lambda v: f"{v:.0f}%"
        # under 1 kB (nothing held yet, a job that exited at once): a kB axis, never fractions of a byte
        name, factor = next(((n, f) for n, f in _BYTE_UNITS if peak >= f and f > 1), ("kB", 1e3))
        top = max(self.y_top, nice_ceiling(peak / factor) * factor if peak > 0 else factor)
        return top, lambda v: f"{v / factor:g} {name}" if v else "0"

    def _exact(self, v: float) -> str:
        """A peak's figure, three significant digits."""
        if self.unit == "percent":
            return f"{v:.0f}%"
        name, factor = next(((n, f) for n, f in _BYTE_UNITS if v >= f), ("B", 1.0))
        return f"{v / factor:.3g} {name}"

    def render(self) -> Text:
        sink = TextSink()
        self.draw(sink, self.size.width, self.size.height)
        return sink.text

    def title_line(self, width: int) -> Text:
        """The title, the series' colours, and the peak (which stays when room is short)."""
        out = Text(no_wrap=True, overflow="crop")
        out.append(self.title, style="bold")
        for s in self.series:
            out.append("  ━ ", style=s.color)
            out.append(s.label)
        if self.peak is not None:
            # the peak first when room is short: the series names are also in the colours
            figure = f"{self._exact(self.peak[0])} at {short_time(self.peak[1])}"
            peak = Text(f"  ▲ peak {figure}", style="bold")
            if out.cell_len + peak.cell_len > width:
                if len(self.title) + peak.cell_len > width:
                    peak = Text(f" ▲{figure}", style="bold")
                out = Text.assemble((self.title, "bold"), peak, no_wrap=True, overflow="crop")
            else:
                out.append_text(peak)
        out.truncate(max(width, 1), overflow="ellipsis")
        return out

    def draw(self, sink: ChartSink, width: int, height: int) -> None:
        """The chart into `sink`: a title line, the plot rows, the time axis."""
        sink.title(self.title_line(width))
        top, fmt = self._scale()
        if not self.xs or width < 12 or height < 4:
            if not self.xs:
                sink.newline()
                sink.append("  no samples recorded", "")
            return
        band_row = self.bands is not None and bool(self.bands.spans) and height >= 5
        plot_h = height - 3 - band_row
        fractions = (1.0, 0.75, 0.5, 0.25, 0.0) if plot_h >= 9 else (1.0, 0.5, 0.0)
        labels: dict[int, str] = {}
        for f in fractions:
            labels.setdefault(round((1 - f) * (plot_h - 1)), fmt(top * f))
        label_w = max(len(v) for v in labels.values())
        plot_w = max(1, width - label_w - 1)
        canvas = _Canvas(plot_w, plot_h)
        x_end = max([self.xs[-1], *(s.xs[-1] for s in self.series if s.xs)], default=0.0)
        x_end = stepped_end(x_end) if self.stepped_axis else x_end
        x_end = max(x_end, 1.0)  # a run shorter than a second: a 1 s axis, not 0s 0s 0s
        columns = _pixel_columns(self.xs, x_end, canvas.px_w)
        self._memos += [PlotMemo() for _ in range(len(self.series) - len(self._memos))]
        for s, memo in zip(self.series, self._memos, strict=False):
            # one point per pixel column: the largest value in it, so peaks survive narrow terminals
            points = _column_peaks(_pixel_columns(s.xs, x_end, canvas.px_w) if s.xs else columns, s.values)
            canvas.plot(sorted(points.items()), top, s.color, few=len(self.xs) <= 3, memo=memo)
        if self.peak is not None and self.series:
            canvas.mark(self.peak[0], top, self.peak[1], x_end, f"bold reverse {self.series[0].color}")
        cells, colors = canvas.cells, canvas.colors
        shade = _shades(self.bands, plot_w, x_end) if self.bands is not None else None
        rows, self._rows = self._rows, {}  # each row's runs, as last drawn: most rows stay the same
        shaded = tuple(shade) if shade is not None else None
        for r in range(plot_h):
            sink.newline()
            label = labels.get(r)
            sink.append(f"{label or '':>{label_w}}" + ("┤" if label else "│"), "dim")
            key = (tuple(cells[r]), tuple(colors[r]), shaded)
            runs = self._rows[key] = rows.get(key) or _runs(cells[r], colors[r], shade)
            for text, style in runs:
                sink.append(text, style)
        _time_axis(sink, label_w, plot_w, x_end, self.bands)
        if band_row and self.bands is not None:
            sink.newline()
            _band_row(sink, label_w, plot_w, x_end, self.bands)


Bits = tuple[int, int, int]  # a cell's row, column and braille dot bits


@dataclass
class PlotMemo:
    """One series as last plotted: the plot's scale and size, its points, and the dots of each line between two."""

    params: tuple[float, int, int] = (0.0, 0, 0)
    known: list[tuple[int, float]] = field(default_factory=list)
    segments: list[list[Bits]] = field(default_factory=list)


class _Canvas:
    """Braille cells of a plot `plot_w` x `plot_h` characters (2 x 4 dots each), and each cell's colour."""

    def __init__(self, plot_w: int, plot_h: int) -> None:
        self.plot_w, self.plot_h = plot_w, plot_h
        self.px_w, self.px_h = plot_w * 2, plot_h * 4
        self.cells = [[0] * plot_w for _ in range(plot_h)]
        self.colors: list[list[str | None]] = [[None] * plot_w for _ in range(plot_h)]

    def dot(self, px: int, py: int, color: str) -> None:
        py = min(max(py, 0), self.px_h - 1)
        r, c = self.plot_h - 1 - py // 4, px // 2
        self.cells[r][c] |= _DOTS[px % 2][3 - py % 4]
        self.colors[r][c] = color

    def plot(
        self, known: list[tuple[int, float]], top: float, color: str, *, few: bool, memo: PlotMemo | None = None
    ) -> None:
        """A series' (pixel column, value) points as a line; 1-3 samples (`few`) as the points alone, two dots
        wide (a line through two readings would invent what happened between). `memo`: the same series as last
        drawn on this plot: the line between points that did not move is not worked out again."""
        h = self.px_h - 1
        if not few:
            for bits in self._segments(known, top, memo):
                for r, c, mask in bits:
                    self.cells[r][c] |= mask
                    self.colors[r][c] = color
        for c, v in known if few else known[-1:]:
            self.dot(c, round(v / top * h), color)
            if few:
                self.dot(min(c + 1, self.px_w - 1), round(v / top * h), color)

    def _segments(self, known: list[tuple[int, float]], top: float, memo: PlotMemo | None) -> list[list[Bits]]:
        """The dots of the line between each two neighbouring points, as (row, column, bits) of cells; those of
        the memo's where both points are the same (a live chart gains points at its right end)."""
        params = (top, self.px_w, self.px_h)
        keep = 0
        if memo is not None and memo.params == params:
            old, n = memo.known, min(len(memo.known), len(known))
            while keep < n and old[keep] == known[keep]:
                keep += 1
        segments = memo.segments[: max(keep - 1, 0)] if memo is not None and keep else []
        h = self.px_h - 1
        for (c0, v0), (c1, v1) in itertools.pairwise(known[len(segments) :]):
            # the line's height at each pixel column from c0 to c1; a column is drawn from its height to
            # one dot short of the next one's (the next column draws that one)
            ys = [round((v0 + (v1 - v0) * (c - c0) / (c1 - c0)) / top * h) for c in range(c0, c1 + 1)]
            bits: list[Bits] = []
            for c, ya, yb in zip(range(c0, c1), ys, ys[1:], strict=False):
                lo, hi = (ya, yb) if ya <= yb else (yb, ya)
                self._column(bits, c, lo, max(lo, hi - 1))
            segments.append(bits)
        if memo is not None:
            memo.params, memo.known, memo.segments = params, known, segments
        return segments

    def _column(self, out: list[Bits], px: int, lo: int, hi: int) -> None:
        """The dots of pixel column `px` from height `lo` to `hi` (as `dot` for each: clamped to the plot),
        one cell at a time, added to `out`."""
        top = self.px_h - 1
        lo = 0 if lo < 0 else top if lo > top else lo
        hi = 0 if hi < 0 else top if hi > top else hi
        masks, c, row = _RUNS[px & 1], px >> 1, self.plot_h - 1 - (lo >> 2)
        for band in range(lo >> 2, (hi >> 2) + 1):
            a = lo - band * 4 if band == lo >> 2 else 0
            b = hi - band * 4 if band == hi >> 2 else 3
            out.append((row, c, masks[a][b]))
            row -= 1

    def mark(self, y: float, top: float, x: float, x_end: float, color: str) -> None:
        """The cell at (x, y) filled and coloured: the peak."""
        pc = min(self.plot_w - 1, int(x / x_end * (self.px_w - 1) + 0.5) // 2)
        pr = self.plot_h - 1 - min(max(round(y / top * (self.px_h - 1)), 0), self.px_h - 1) // 4
        self.colors[pr][pc] = color
        self.cells[pr][pc] |= 0xFF if not self.cells[pr][pc] else 0


def _largest(values: Sequence[float | None]) -> float:
    """The largest value, 0 for none (a chart redraws each second: no generator per value)."""
    try:
        top = max(values, default=0.0)  # type: ignore[type-var]
    except TypeError:  # a gap (None) among numbers
        return max([v for v in values if v is not None], default=0.0)
    return 0.0 if top is None else top  # only gaps: max() compared nothing


def _pixel_columns(xs: Sequence[float], x_end: float, px_w: int) -> list[int]:
    """The pixel column of each elapsed time on a plot `px_w` pixels wide ending at x_end."""
    last = px_w - 1
    return [min(last, int(x / x_end * last + 0.5)) for x in xs]


def _column_peaks(columns: Sequence[int], values: Sequence[float | None]) -> dict[int, float]:
    """The largest value in each pixel column."""
    points: dict[int, float] = {}
    get = points.get
    for px, v in zip(columns, values, strict=False):
        if v is not None:
            old = get(px)
            if old is None or v > old:
                points[px] = v
    return points


class ChartSink(Protocol):
    """Where a chart is drawn: a Rich Text (a static chart) or lines of segments (a live one)."""

    def title(self, text: Text) -> None: ...
    def append(self, text: str, style: str) -> None: ...
    def newline(self) -> None: ...


class TextSink:
    def __init__(self) -> None:
        self.text = Text(no_wrap=True, overflow="crop")

    def title(self, text: Text) -> None:
        self.text.append_text(text)

    def append(self, text: str, style: str) -> None:
        self.text.append(text, style=style)

    def newline(self) -> None:
        self.text.append("\n")


def _runs(cells: list[int], colors: list[str | None], shade: list[str] | None = None) -> list[tuple[str, str]]:
    """One row of braille cells as (text, style) runs, one per run of one colour (a live chart redraws each
    second); `shade`: a background per column (the code blocks)."""
    styles: Sequence[str | None] = colors
    if shade is not None:
        styles = [f"{c or ''} {b}".strip() for c, b in zip(colors, shade, strict=True)]
    runs = []
    start = 0
    for c in range(1, len(cells) + 1):
        if c == len(cells) or styles[c] != styles[start]:
            runs.append(("".join([_BRAILLE[b] for b in cells[start:c]]), styles[start] or ""))
            start = c
    return runs


def _column(x: float, x_end: float, plot_w: int) -> int:
    """The plot column of elapsed time x (as the series' points are placed)."""
    return min(plot_w - 1, max(0, int(x / x_end * (plot_w * 2 - 1) + 0.5) // 2))


def _shades(bands: Bands, plot_w: int, x_end: float) -> list[str]:
    shade = [""] * plot_w
    for i, (_name, t0, t1) in enumerate(bands.spans):
        for c in range(_column(t0, x_end, plot_w), _column(t1, x_end, plot_w) + 1):
            shade[c] = SHADES[i % 2]
    return shade


def _styled_line(out: ChartSink, chars: list[str], styles: list[str]) -> None:
    start = 0
    for c in range(1, len(chars) + 1):
        if c == len(chars) or styles[c] != styles[start]:
            out.append("".join(chars[start:c]), styles[start])
            start = c


def _time_axis(out: ChartSink, label_w: int, plot_w: int, x_end: float, bands: Bands | None) -> None:
    """The axis line (marks as ┴ ticks) and its labels: the start, middle and end, and the marks' names where
    they fit between."""
    line, line_styles = ["└"] + ["─"] * plot_w, ["dim"] * (plot_w + 1)
    axis, styles = [" "] * (plot_w + 1), ["dim"] * (plot_w + 1)
    ticks = [(0, short_time(0))]
    if plot_w >= 24:
        ticks.append((plot_w // 2, short_time(x_end / 2)))
    end = short_time(x_end)
    ticks.append((plot_w + 1 - len(end), end))
    for at, text in ticks:
        for i, ch in enumerate(text):
            if 0 <= at + i < len(axis):
                axis[at + i] = ch
    for t, name in bands.marks if bands is not None else []:
        at = 1 + _column(t, x_end, plot_w)
        line[at], line_styles[at] = "┴", MARK_STYLE
        text = escape_controls(name)[:16]
        lo, hi = max(at - 1, 0), min(at + len(text) + 1, len(axis))  # a blank on each side
        if at + len(text) <= len(axis) and all(ch == " " for ch in axis[lo:hi]):
            axis[at : at + len(text)] = list(text)
            styles[at : at + len(text)] = [MARK_STYLE] * len(text)
    pad, pad_styles = [" " * label_w] if label_w else [], ["dim"] if label_w else []
    out.newline()
    _styled_line(out, pad + line, pad_styles + line_styles)
    out.newline()
    _styled_line(out, pad + axis, pad_styles + styles)


def _band_row(out: ChartSink, label_w: int, plot_w: int, x_end: float, bands: Bands) -> None:
    """Under the time axis: each block's run as a bar in its shade, named where the bar has room."""
    chars, styles = [" "] * plot_w, [""] * plot_w
    free = 0  # the first column after the last name written and a blank
    for i, (name, t0, t1) in enumerate(bands.spans):
        c0, c1 = _column(t0, x_end, plot_w), _column(t1, x_end, plot_w)
        for c in range(c0, c1 + 1):
            chars[c], styles[c] = " ", f"bold {SHADES[i % 2]}"
        at = max(c0, free)
        text = escape_controls(name)[: max(c1 - at, 0)]  # a blank before the next bar
        if text:
            chars[at : at + len(text)] = list(text)
            free = at + len(text) + 1
    out.append(" " * (label_w + 1), "")
    _styled_line(out, chars, styles)


GPU_COLORS = ("magenta", "bright_cyan", "yellow", "bright_green", "bright_red", "blue", "bright_magenta", "cyan")


def session_charts(session: Session) -> list[TimeChart]:
    xs, cols = timeline_series(session)
    spans, marks = block_spans(session)
    bands = Bands(spans, marks)
    gpus = sorted(int(m[1]) for c in cols if (m := re.fullmatch(r"gpu(\d+)_memory", c)))
    u = session.summary
    sim = ", simulated" if u is not None and any(g.simulated for g in u.gpus) else ""
    charts = [
        TimeChart(
            "RAM",
            xs,
            [
                Series("combined", cols.get("combined_total", []), "bright_green"),
                Series("main", cols.get("main_rss", []), "cyan"),
                Series("descendants", cols.get("descendants_total", []), "yellow"),
            ],
            bands=bands,
            id="chart-ram",
        ),
        TimeChart(
            "CPU (100% = one core)",
            xs,
            [Series("tree", cols.get("cpu_percent", []), "bright_blue")],
            unit="percent",
            y_top=100,
            bands=bands,
            id="chart-cpu",
        ),
    ]
    if gpus:
        charts.append(
            TimeChart(
                f"GPU memory (tree{sim})",
                xs,
                [
                    Series(f"GPU {g}", cols.get(f"gpu{g}_memory", []), GPU_COLORS[i % len(GPU_COLORS)])
                    for i, g in enumerate(gpus)
                ],
                bands=bands,
                id="chart-gpu-memory",
            )
        )
        charts.append(
            TimeChart(
                f"GPU utilization (per GPU{sim})",
                xs,
                [
                    Series(f"GPU {g}", cols.get(f"gpu{g}_util", []), GPU_COLORS[i % len(GPU_COLORS)])
                    for i, g in enumerate(gpus)
                ],
                unit="percent",
                y_top=100,
                bands=bands,
                id="chart-gpu-util",
            )
        )
    return charts
