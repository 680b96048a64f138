"""The live view's charts over time: the tree's RAM (with private) and CPU, per GPU its memory and utilization.

They plot `core.livestats.SampleHistory.chart` (a bounded ring over the whole run, kept while paused) with the
history's braille `TimeChart`; the peak of each chart is named in its title and marked on the plot. Narrow
terminals show one compact chart (RAM), wide ones all four side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.geometry import Region
from textual.strip import Strip

from gputop_tracker.core.summary import SampleHistory
from gputop_tracker.tui.widgets.charts import GPU_COLORS, Series, TimeChart


class LiveTimeChart(TimeChart):
    """A TimeChart redrawn once a sample that repaints only the lines that changed (Line API): with its time
    axis growing in steps, a new sample changes a few cells at the right end, not the whole plot."""

    def __init__(self, title: str, *, unit: str = "bytes", y_top: float = 0.0, id: str, classes: str = "") -> None:
        super().__init__(title, [], [], unit=unit, y_top=y_top, id=id, classes=classes)
        self.stepped_axis = True
        self._strips: list[Strip] = []
        self._lines: dict[tuple[Segment, ...], Strip] = {}  # the strip of each line's segments, as last drawn
        self._base: Style | None = None  # the widget's style, from its ancestors' (kept until a style change)

    def set_data(self, xs: Sequence[float], series: Sequence[Series], peak: tuple[float, float] | None = None) -> None:
        self.xs = list(xs)
        self.series = list(series)
        self.peak = peak
        self._rebuild(full=False)

    def set_peak(self, peak: tuple[float, float]) -> bool:
        """A new peak named in the title alone, where the plot's scale still holds it (its rows redrawn at the
        chart's next period, the peak's mark with them); False where the whole chart must be drawn again."""
        width = self.size.width
        top, _ = self._scale()
        if not self._strips or width <= 0 or self._base is None or peak[0] > top:
            return False
        self.peak = peak
        sink = StripSink(self._base, self.app.console, width)
        sink.title(self.title_line(width))
        self._strips[0] = sink.strips()[0]
        self.refresh(Region(0, 0, width, 1))
        return True

    def on_resize(self, _event: events.Resize) -> None:
        self._rebuild(full=True)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None
        if self.is_mounted:
            self._rebuild(full=True)

    def _rebuild(self, *, full: bool) -> None:
        width = self.size.width
        if width <= 0 or not self.is_mounted:
            return
        if self._base is None:
            self._base = self.rich_style
        sink = StripSink(self._base, self.app.console, width)
        self.draw(sink, width, self.size.height)
        strips = sink.strips(self._lines if not full else {})
        self._lines = dict(zip(sink.keys, strips, strict=True))
        old, self._strips = self._strips, strips
        if full or len(old) != len(strips):
            self.refresh()
            return
        changed = [Region(0, y, width, 1) for y, (a, b) in enumerate(zip(old, strips, strict=True)) if a is not b]
        if changed:
            self.refresh(*changed)

    def render_line(self, y: int) -> Strip:
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.rich_style)


class StripSink:
    """A chart drawn straight into segments, one Strip a line (no Rich Text to lay out each second)."""

    _styles: ClassVar[dict[tuple[str, Style], Style]] = {}

    def __init__(self, base: Style, console: Console, width: int) -> None:
        self.base = base
        self.console = console
        self.width = width
        self.lines: list[list[Segment]] = [[]]
        self.keys: list[tuple[Segment, ...]] = []

    def title(self, text: Text) -> None:
        self.lines[-1].extend(Segment.apply_style(text.render(self.console), self.base))

    def append(self, text: str, style: str) -> None:
        key = (style, self.base)
        st = self._styles.get(key)
        if st is None:
            st = self._styles[key] = self.base + Style.parse(style) if style else self.base
        self.lines[-1].append(Segment(text, st))

    def newline(self) -> None:
        self.lines.append([])

    def strips(self, known: dict[tuple[Segment, ...], Strip] | None = None) -> list[Strip]:
        """A Strip a line; `known`: the strips of lines drawn before (the same segments: the same Strip, kept)."""
        self.keys = [tuple(line) for line in self.lines]
        known = known or {}
        return [
            known.get(key) or Strip(line).adjust_cell_length(self.width, self.base)
            for key, line in zip(self.keys, self.lines, strict=True)
        ]


CHART_PERIOD = 2.0  # seconds of the run between two chart redraws (btop's default); the ring keeps every sample


class LiveCharts(Horizontal):
    """Four TimeCharts in a row; GPU charts only once a GPU was seen. Redrawn every CHART_PERIOD of the run
    (a chart moves by a pixel or two a second: drawing each sample doubled the view's CPU cost), and a chart
    at once when its peak rose."""

    _drawn_at: float | None = None

    DEFAULT_CSS = """
    LiveCharts { height: 10; }
    LiveCharts TimeChart { width: 1fr; height: 100%; min-height: 4; padding: 0 1 0 0; }
    LiveCharts.narrow TimeChart { display: none; }
    LiveCharts.narrow #live-chart-ram { display: block; }
    LiveCharts.no-gpu .gpu-chart { display: none; }
    """

    def compose(self) -> ComposeResult:
        yield LiveTimeChart("RAM (tree)", id="live-chart-ram")
        yield LiveTimeChart("CPU (100% = one core)", unit="percent", y_top=100, id="live-chart-cpu")
        yield LiveTimeChart("GPU memory (tree)", id="live-chart-gpu-memory", classes="gpu-chart")
        yield LiveTimeChart("GPU util", unit="percent", y_top=100, id="live-chart-gpu-util", classes="gpu-chart")

    def show(self, history: SampleHistory, narrow: bool, *, force: bool = False) -> None:
        ring = history.chart
        xs = ring.times
        now = xs[-1] if xs else 0.0
        due = force or self._drawn_at is None or now - self._drawn_at >= CHART_PERIOD - 1e-6
        if due:
            self._drawn_at = now
        gpus = history.gpu_indices
        if self.has_class("narrow") != narrow or self.has_class("no-gpu") != (not gpus):
            self.set_class(narrow, "narrow")
            self.set_class(not gpus, "no-gpu")
        _draw(
            self.query_one("#live-chart-ram", LiveTimeChart),
            due,
            xs,
            [Series("Σ PSS", ring.series("ram"), "bright_green"), Series("private", ring.series("private"), "cyan")],
            ring.peaks.get("ram"),
        )
        if narrow:
            return  # the others are hidden: not worth drawing
        _draw(
            self.query_one("#live-chart-cpu", LiveTimeChart),
            due,
            xs,
            [Series("tree", ring.series("cpu"), "bright_blue")],
            ring.peaks.get("cpu"),
        )
        if not gpus:
            return
        colors = {g: GPU_COLORS[i % len(GPU_COLORS)] for i, g in enumerate(gpus)}
        for kind, chart_id in (("memory", "#live-chart-gpu-memory"), ("util", "#live-chart-gpu-util")):
            names = [f"gpu{g}_{kind}" for g in gpus]
            peaks = [ring.peaks[n] for n in names if n in ring.peaks]
            _draw(
                self.query_one(chart_id, LiveTimeChart),
                due,
                xs,
                [Series(f"GPU{g}", ring.series(n), colors[g]) for g, n in zip(gpus, names, strict=True)],
                max(peaks) if peaks else None,
            )


def _draw(
    chart: LiveTimeChart, due: bool, xs: list[float], series: list[Series], peak: tuple[float, float] | None
) -> None:
    """Redraw a chart when its period is due, or at once its title when the figure of its peak changed: the peak
    in its title never reads below a figure the rest of the screen shows now (the whole chart where the peak
    went over its scale)."""
    rose = peak is not None and (chart.peak is None or chart._exact(peak[0]) != chart._exact(chart.peak[0]))
    if due or (rose and peak is not None and not chart.set_peak(peak)):
        chart.set_data(xs, series, peak)
