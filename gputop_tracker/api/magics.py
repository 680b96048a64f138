"""Jupyter: `%load_ext gputop_tracker`, then `%%gputop` on a cell, or `%gputop start` … `%gputop stop`.

The kernel process and every child it starts are tracked while the cell runs (the API's `Tracker`, which
attaches to the calling process). One display is updated in place about once a second: RAM and GPU memory
now and at their peak, CPU, a sparkline of RAM. At the end: the summary as a table and the figure (with
matplotlib). Each tracked cell is saved as a session like any run.

What the peak means here: the tracked tree is the kernel itself, which already holds memory when the cell
starts, so the peak is that of the kernel's whole tree *during* the cell (its memory from before included),
not the growth the cell caused. When the cell sets the kernel's new high-water mark, it equals the kernel's
own VmHWM.

Needs IPython only (the figure also needs matplotlib: `pip install gputop-tracker[notebook]`). Imported by
`load_ipython_extension`, never by the rest of the package.
"""

from __future__ import annotations

import html
import shlex
import sys
import threading
import time
from collections import deque
from typing import Any

from IPython.core.error import UsageError as IPythonUsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import Image, display

from gputop_tracker.api.tracker import Tracker, TrackerError
from gputop_tracker.console import Parser, UsageError
from gputop_tracker.core.model import ResourceUsage, Sample, UnitError, human_bytes, human_seconds

REFRESH_S = 1.0  # the live display, about once a second
SPARK = "▁▂▃▄▅▆▇█"
SPARK_POINTS = 40
USAGE = "%%gputop [--interval S] [--gpus LIST] [--mem-limit SIZE] [--store DIR] [--no-plot]  |  %gputop start|stop"


def sparkline(values: list[float]) -> str:
    """Values as block characters scaled between their least and largest (flat: all lowest)."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * len(SPARK))) if span > 0 else 0] for v in values)


class LiveFigures:
    """The figures of the samples so far (fed on the tracker's reader thread, read by the display thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.n = 0
        self.ram = self.ram_peak = 0
        self.gpu = self.gpu_peak = 0
        self.has_gpu = False
        self.cpu = 0.0
        self.history: deque[float] = deque(maxlen=SPARK_POINTS)

    def add(self, sample: Sample) -> None:
        t = sample.tree
        with self.lock:
            self.n += 1
            self.ram = t.combined_total
            self.ram_peak = max(self.ram_peak, t.combined_total)
            self.gpu = t.gpu_memory
            self.gpu_peak = max(self.gpu_peak, t.gpu_memory)
            self.has_gpu = self.has_gpu or bool(sample.gpus)
            self.cpu = t.cpu_percent
            self.history.append(float(t.combined_total))

    def line(self, state: str = "tracking", elapsed: float | None = None) -> str:
        """`elapsed`: the session's own wall time once it ended (the summary's), so the cell has one duration."""
        with self.lock:
            if not self.n:
                return f"gputop: {state}, waiting for the first sample"
            seconds = elapsed if elapsed is not None else time.monotonic() - self.start
            parts = [
                f"gputop: {state} {human_seconds(seconds)}",
                f"RAM {human_bytes(self.ram)} (peak {human_bytes(self.ram_peak)}, sampled)",
                f"CPU {self.cpu:.0f}%",
            ]
            if self.has_gpu:
                parts.append(f"GPU mem {human_bytes(self.gpu)} (peak {human_bytes(self.gpu_peak)})")
            parts.append(sparkline(list(self.history)))
            return " · ".join(parts)


class LiveLine:
    """What the one display handle shows: a line of text (and the same in HTML, in a monospace box)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return f'<pre style="margin:0;padding:2px 6px;background:#f4f6f8">{html.escape(self.text)}</pre>'


def cell_title(cell: str, limit: int = 80) -> str:
    """The figure's title for a tracked cell: its first line of code (not the kernel's command line, which the
    session records as the tracked process's)."""
    first = next((ln.strip() for ln in cell.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    if len(first) > limit:
        first = first[: limit - 1] + "…"
    return f"%%gputop cell: {first}" if first else "%%gputop cell (empty)"


def summary_rows(u: ResourceUsage) -> list[tuple[str, str, str]]:
    """(figure, value, how measured) for the table after the cell."""
    r = u.max_ram
    rows = [
        ("wall time", human_seconds(u.compute_time.time), "exact"),
        ("peak RAM (tree)", human_bytes(r.combined.total_rss), r.peak_source),
        ("peak private RAM", human_bytes(r.combined.private_rss), "sampled"),
        ("CPU time", human_seconds(u.cpu_time.total), u.cpu_time.source),
        ("mean CPU", f"{u.cpu_time.mean_percent:.0f}% of a core", u.cpu_time.source),
        ("processes", str(u.n_processes), ""),
    ]
    if u.gpus:
        how = u.sources.get("max_gpu_ram.combined", "sampled")
        rows.append(("peak GPU memory (tree)", human_bytes(u.max_gpu_ram.combined), how))
        rows.append(("mean GPU utilization", f"{u.gpu_utilization.gpu_percentages.mean_sum_percent:.0f}%", "sampled"))
    return rows


class SummaryTable:
    """The summary after the cell: an HTML table (the peak also as bytes, `data-bytes`), plain text otherwise."""

    def __init__(self, usage: ResourceUsage) -> None:
        self.usage = usage

    def __repr__(self) -> str:
        u = self.usage
        lines = [f"gputop summary (session {u.session_id or 'not saved'})"]
        lines += [f"  {k:<24} {v:>14}  {how}" for k, v, how in summary_rows(u)]
        lines.append(f"  peak RAM bytes: {int(u.max_ram.combined.total_rss)}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        u = self.usage
        body = "".join(
            f"<tr><td>{html.escape(k)}</td><td style='text-align:right'"
            + (f" data-bytes='{int(u.max_ram.combined.total_rss)}' id='peak-ram'" if k == "peak RAM (tree)" else "")
            + f">{html.escape(v)}</td><td>{html.escape(how)}</td></tr>"
            for k, v, how in summary_rows(u)
        )
        sid = html.escape(u.session_id or "not saved")
        return (
            f"<table class='gputop-summary'><caption style='text-align:left'>gputop summary, session {sid}</caption>"
            f"<tr><th>figure</th><th>value</th><th>how measured</th></tr>{body}</table>"
        )


def _parser() -> Parser:
    p = Parser(prog="%%gputop", add_help=False)
    p.add_argument("action", nargs="?", choices=("start", "stop"))
    p.add_argument("--interval", type=float, default=0.5, metavar="S")
    p.add_argument("--gpus", metavar="LIST")
    p.add_argument("--mem-limit", metavar="SIZE")
    p.add_argument("--store", metavar="DIR")
    p.add_argument("--no-plot", action="store_true")
    return p


class Tracking:
    """One tracked span (a cell, or `%gputop start` to `stop`): the tracker, its live display, the updater."""

    def __init__(self, opts: Any, live: bool = True, title: str | None = None) -> None:
        self.plot = not opts.no_plot
        self.title = title  # the figure's: what was tracked (the cell), not the kernel's command line
        self.live = live  # refreshed in place: a notebook; a terminal would print a line a second
        self.tracker = Tracker(
            sleep_time=opts.interval,
            gpu_uuids=[g for g in opts.gpus.split(",") if g] if opts.gpus else None,
            mem_limit=opts.mem_limit,
            store=opts.store,
        )
        self.figures = LiveFigures()
        self.tracker.on_sample(self.figures.add)
        self.stopped = threading.Event()
        self.handle: Any = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.tracker.start()
        with self.figures.lock:  # the cell's time: not the sampler's start-up before it (the summary's wall time)
            self.figures.start = time.monotonic()
        self.handle = display(LiveLine(self.figures.line()), display_id=True)
        if not self.live:
            return
        self.thread = threading.Thread(target=self._refresh, name="gputop-live", daemon=True)
        self.thread.start()

    def _refresh(self) -> None:
        while not self.stopped.wait(REFRESH_S):
            try:
                self.handle.update(LiveLine(self.figures.line()))
            except Exception:  # the display is a nicety: never disturb the cell
                pass

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(5)
        try:
            usage = self.tracker.stop()
        except TrackerError:
            self.handle.update(LiveLine(self.figures.line("tracking failed after")))
            raise
        wall = self.tracker.raw_usage.compute_time.time  # seconds: the table's wall time, the same figure
        self.handle.update(LiveLine(self.figures.line("done after", elapsed=wall)))
        display(SummaryTable(self.tracker.raw_usage))
        _notes_line(usage)
        if self.plot:
            self._show_figure()

    def _show_figure(self) -> None:
        from gputop_tracker.core.report import plot

        try:
            plot.require_matplotlib()
        except plot.PlotUnavailable:
            return  # the table is the summary; the figure comes with the notebook extra
        try:
            display(Image(data=plot.render(self.tracker.plot(title=self.title), "png"), format="png"))
        except Exception as e:
            _error(f"no figure: {e}")


class CellFailed(Exception):
    """The tracked cell raised (or was interrupted): raised again by the magic once tracking has ended, so
    the cell counts as failed (Run All stops there, nbclient sees the error) without a second traceback."""

    def __init__(self, cause: BaseException | None) -> None:
        super().__init__(type(cause).__name__ if cause is not None else "the cell did not run")

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"gputop: the tracked cell failed ({self}); tracking stopped, its figures are above"]


def _updates_in_place(shell: Any) -> bool:
    """A Jupyter kernel's front end replaces a display in place; terminal IPython prints each update anew
    (a line a second, over the prompt between `%gputop start` and `stop`)."""
    return getattr(shell, "kernel", None) is not None


def _notes_line(usage: ResourceUsage) -> None:
    if not usage.session_path and usage.session_id:
        _error("session NOT saved")


def _usage(message: str) -> Exception:
    """A bad option or a magic used out of order: IPython shows one line (no traceback) and the cell fails, so
    Run All stops there, before work that was meant to be tracked runs untracked."""
    return IPythonUsageError(f"gputop: {message}")


def _error(message: str) -> None:
    print(f"gputop: error: {message}", file=sys.stderr)


@magics_class
class GputopMagics(Magics):
    """`%%gputop [options]` on a cell; `%gputop start [options]` and `%gputop stop` across cells."""

    current: Tracking | None = None

    @line_cell_magic
    def gputop(self, line: str, cell: str | None = None) -> None:
        try:
            opts = _parser().parse_args(shlex.split(line))  # --store '/data/my runs'
        except (ValueError, UsageError) as e:  # shlex: an unclosed quote; an unknown option or bad value
            raise _usage(f"{e} (usage: {USAGE})") from None
        if cell is None:
            self._line(opts)
            return
        if opts.action is not None:
            raise _usage(f"%%gputop on a cell takes options only, not {opts.action!r} (usage: {USAGE})")
        if self.current is not None:
            raise _usage("already tracking since `%gputop start`: run `%gputop stop` first")
        try:
            tracking = Tracking(opts, live=_updates_in_place(self.shell), title=cell_title(cell))
        except (ValueError, UnitError) as e:  # bad options: the cell is not run, as for any usage error
            raise _usage(str(e)) from None
        shell = self.shell
        assert shell is not None  # a magic always runs in a shell
        try:
            tracking.start()
        except TrackerError as e:  # tracking cannot start here: the work itself still runs
            _error(f"{e}; the cell runs untracked")
            if not (untracked := shell.run_cell(cell, store_history=False)).success:
                raise CellFailed(untracked.error_in_exec or untracked.error_before_exec) from None
            return
        try:
            result = shell.run_cell(cell, store_history=False)
        finally:
            self._end(tracking)
        if not result.success:
            raise CellFailed(result.error_in_exec or result.error_before_exec)

    def _line(self, opts: Any) -> None:
        if opts.action == "start":
            if self.current is not None:
                raise _usage("already tracking: `%gputop stop` first")
            self.current = self._begin(opts)
        elif opts.action == "stop":
            if self.current is None:
                raise _usage("not tracking: `%gputop start` first")
            tracking, self.current = self.current, None
            self._end(tracking)
        else:
            raise _usage(f"give start or stop, or use %%gputop on a cell (usage: {USAGE})")

    def _begin(self, opts: Any) -> Tracking | None:
        try:
            tracking = Tracking(opts, live=_updates_in_place(self.shell), title="cells from %gputop start to stop")
        except (ValueError, UnitError) as e:
            raise _usage(str(e)) from None
        try:
            tracking.start()
        except TrackerError as e:  # tracking cannot start here: the cells still run, untracked
            _error(str(e))
            return None
        return tracking

    def _end(self, tracking: Tracking) -> None:
        try:
            tracking.stop()
        except TrackerError as e:
            _error(str(e))


def load(ipython: Any) -> None:
    ipython.register_magics(GputopMagics)
