"""The live view's charts over time: the tree's RAM (with private) and CPU, per GPU its memory and utilization.

They plot `core.livestats.SampleHistory.chart` (a bounded ring over the whole run, kept while paused) with the
history's braille `TimeChart`; the peak of each chart is named in its title and marked on the plot. Narrow
terminals show one compact chart (RAM), wide ones all four side by side.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal

from gputop_tracker.core.livestats import SampleHistory
from gputop_tracker.tui.charts import GPU_COLORS, Series, TimeChart


class LiveCharts(Horizontal):
    """Four TimeCharts in a row; GPU charts only once a GPU was seen."""

    DEFAULT_CSS = """
    LiveCharts { height: 10; }
    LiveCharts TimeChart { width: 1fr; height: 100%; min-height: 4; padding: 0 1 0 0; }
    LiveCharts.narrow TimeChart { display: none; }
    LiveCharts.narrow #live-chart-ram { display: block; }
    LiveCharts.no-gpu .gpu-chart { display: none; }
    """

    def compose(self) -> ComposeResult:
        yield TimeChart("RAM (tree)", [], [], id="live-chart-ram")
        yield TimeChart("CPU (100% = one core)", [], [], unit="percent", y_top=100, id="live-chart-cpu")
        yield TimeChart("GPU memory (tree)", [], [], id="live-chart-gpu-memory", classes="gpu-chart")
        yield TimeChart("GPU util", [], [], unit="percent", y_top=100, id="live-chart-gpu-util", classes="gpu-chart")

    def show(self, history: SampleHistory, narrow: bool) -> None:
        ring = history.chart
        xs = ring.times
        self.set_class(narrow, "narrow")
        gpus = history.gpu_indices
        self.set_class(not gpus, "no-gpu")
        ram = self.query_one("#live-chart-ram", TimeChart)
        ram.set_data(
            xs,
            [Series("Σ PSS", ring.series("ram"), "bright_green"), Series("private", ring.series("private"), "cyan")],
            ring.peaks.get("ram"),
        )
        if narrow:
            return  # the others are hidden: not worth drawing
        self.query_one("#live-chart-cpu", TimeChart).set_data(
            xs, [Series("tree", ring.series("cpu"), "bright_blue")], ring.peaks.get("cpu")
        )
        if not gpus:
            return
        colors = {g: GPU_COLORS[i % len(GPU_COLORS)] for i, g in enumerate(gpus)}
        for kind, chart_id in (("memory", "#live-chart-gpu-memory"), ("util", "#live-chart-gpu-util")):
            names = [f"gpu{g}_{kind}" for g in gpus]
            peaks = [ring.peaks[n] for n in names if n in ring.peaks]
            self.query_one(chart_id, TimeChart).set_data(
                xs,
                [Series(f"GPU{g}", ring.series(n), colors[g]) for g, n in zip(gpus, names, strict=True)],
                max(peaks) if peaks else None,
            )
