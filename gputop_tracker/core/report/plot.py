"""A picture of a session: tree RAM, CPU, GPU memory and utilization over time, with alerts, OOM kills and
code blocks marked. Written as PNG, SVG or a self-contained HTML page (`gputop-track sessions plot`,
`--plot FILE`, `Tracker.plot()`, the notebook magic).

matplotlib is optional (`pip install gputop-tracker[plot]`) and imported only when a figure is drawn, never
through pyplot: the figure gets its own Agg canvas, so no window opens and a notebook's own matplotlib
backend is left as it was. Every series carries a `gid` (`series-tree_ram`, `series-gpu0_util`,
`event-oom-0`, `block-0` …), which the SVG keeps as element ids.
"""

from __future__ import annotations

import base64
import html
import io
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputop_tracker.core.model.text import command_line, escape_controls
from gputop_tracker.core.model.units import human_bytes, human_seconds
from gputop_tracker.core.report.blockspans import block_runs, elapsed_at
from gputop_tracker.core.report.columns import TimelineColumns
from gputop_tracker.core.report.plotlabels import ROW_Y, PanelLabels, arrange

if TYPE_CHECKING:
    from gputop_tracker.core.model.models import Session

# the library itself works installed from an index or from a checkout alike; the extra is named for both
EXTRA_HINT = "pip install 'matplotlib>=3.7' (the plot extra: 'gputop-tracker[plot]', or '.[plot]' in a checkout)"
FORMATS = {".png": "png", ".svg": "svg", ".html": "html", ".htm": "html"}
DEFAULT_WIDTH = 1200
LEGEND_BLOCKS = 12  # block names listed in a legend at most
PANEL_HEIGHT = 260
HEADER_HEIGHT = 90
DPI = 100
MIN_SIZE, MAX_SIZE = 300, 20000  # below 300 px the panels and legends collapse (matplotlib warns)
TOP_PROCESSES = 3
HEADROOM = 1.12
MIN_BYTES_AXIS = float(2**20)  # an axis of bytes spans at least 1 MiB: below, ticks read `0 B, 1 B, 1 B`
LEVEL_GIDS = ("level-warning", "level-critical")
LEVELS_SHOWN_UP_TO = 2.0  # alert levels drawn while below this many times the largest RAM seen
COLORS = {
    "tree_ram": "#1f77b4",
    "private": "#2ca02c",
    "main_rss": "#9467bd",
    "cpu": "#ff7f0e",
    "warning": "#e6a700",
    "critical": "#d62728",
    "oom": "#8b0000",
    "gpu_oom": "#8b0000",
    "gpu_lost": "#7f7f7f",
    "mark": "#555555",
}


BLOCK_HUES = ("#17becf", "#bcbd22", "#e377c2", "#8c564b", "#7f7f7f")


class PlotUnavailable(ImportError):
    """matplotlib is not installed: the message names the extra that brings it."""


class PlotError(ValueError):
    """A bad output name or size: one line, exit 2."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailable(f"plotting needs matplotlib, which is not installed: {EXTRA_HINT}") from None


def format_of(path: str | Path) -> str:
    """png, svg or html from the file name's extension; PlotError for anything else."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        shown = suffix or "no extension"
        raise PlotError(f"cannot tell the picture format of {path} ({shown}): end the name in .png, .svg or .html")
    return FORMATS[suffix]


def parse_pixel_size(text: str) -> tuple[int, int]:
    """`WIDTHxHEIGHT` in pixels, e.g. 1200x800, each 300 to 20000."""
    match = re.fullmatch(r"\s*(\d{1,6})\s*[xX×]\s*(\d{1,6})\s*", text or "")
    if not match:
        raise PlotError(f"--size must be WIDTHxHEIGHT in pixels, e.g. 1200x800, not {text!r}")
    width, height = int(match.group(1)), int(match.group(2))
    if not (MIN_SIZE <= width <= MAX_SIZE and MIN_SIZE <= height <= MAX_SIZE):
        raise PlotError(f"--size {width}x{height}: each side must be {MIN_SIZE} to {MAX_SIZE} pixels")
    return width, height


def check_size(size: object) -> tuple[int, int]:
    """The API's `size=(width, height)`, as --size checks it: huge or empty figures fail late and badly."""
    sides = size if isinstance(size, tuple) and len(size) == 2 else ()
    if not sides or not all(type(side) is int and MIN_SIZE <= side <= MAX_SIZE for side in sides):
        raise PlotError(f"size must be (width, height) in pixels, each {MIN_SIZE} to {MAX_SIZE}, not {size!r}")
    return int(sides[0]), int(sides[1])


# --------------------------------------------------------------------------- the figure


@dataclass
class _Axis:
    """The time axis: seconds, minutes or hours, whichever reads best for the session's length."""

    divisor: float
    label: str

    @classmethod
    def for_length(cls, seconds: float) -> _Axis:
        if seconds > 3 * 3600:
            return cls(3600.0, "hours since start")
        if seconds > 180:
            return cls(60.0, "minutes since start")
        return cls(1.0, "seconds since start")

    def xs(self, ts: Sequence[float | None]) -> list[float]:
        return [float(elapsed or 0.0) / self.divisor for elapsed in ts]


def figure(session: Session, size: tuple[int, int] | None = None, *, title: str | None = None) -> Any:
    """The session as a matplotlib Figure (with an Agg canvas): one panel each for RAM and CPU, two more for
    GPU memory and utilization when the session saw GPUs. `size` in pixels; default 1200 wide."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = TimelineColumns.of_session(session)
    gpus = cols.gpus
    n_panels = 4 if gpus else 2
    width, height = check_size(size) if size is not None else (DEFAULT_WIDTH, HEADER_HEIGHT + PANEL_HEIGHT * n_panels)
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_panels, 1, sharex=True, squeeze=False)[:, 0]
    fig.suptitle(_title(session, title), fontsize=10, x=0.01, ha="left")
    end = max([float(elapsed or 0) for elapsed in cols.t] + [_duration(session)])
    axis = _Axis.for_length(end)
    _ram_panel(axes[0], session, cols, axis)
    _cpu_panel(axes[1], session, cols, axis)
    if gpus:
        _gpu_panels(axes[2], axes[3], session, cols, axis)
    labels = PanelLabels()
    for ax in axes:
        _mark_events(ax, session, axis, end, labels if ax is axes[0] else None)
        ax.grid(True, alpha=0.3)
        ax.set_xlim(0, max(end, 1e-3) / axis.divisor)
    axes[-1].set_xlabel(axis.label)
    if not len(cols):
        axes[0].text(0.5, 0.5, "no samples saved", transform=axes[0].transAxes, ha="center", va="center")
    arrange(fig, axes[0], labels, lambda names: _legend_blocks(axes[0], names))
    return fig


def _legend_blocks(ax: Any, names: list[tuple[str, str]]) -> None:
    """Block names that found no room on the panel: in its legend, each with its colour."""
    from matplotlib.patches import Patch

    handles, texts = ax.get_legend_handles_labels()
    for name, hue in names[:LEGEND_BLOCKS]:
        handles.append(Patch(color=hue, alpha=0.3, lw=0))
        texts.append(f"block {_shown(name, 24)}")
    if len(names) > LEGEND_BLOCKS:  # a legend taller than the panel would squeeze it
        handles.append(Patch(color="none", lw=0))
        texts.append(f"… {len(names) - LEGEND_BLOCKS} more blocks")
    ax.legend(handles, texts, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, borderaxespad=0.0)


def _duration(session: Session) -> float:
    usage = session.summary
    if usage is not None:
        return float(usage.compute_time.time if usage.compute_time.unit == "seconds" else 0.0)
    meta = session.meta
    return (meta.end_time or meta.start_time) - meta.start_time


def _shown(text: str, limit: int | None = None) -> str:
    """Outside text (a command, a process, block or GPU name) as matplotlib draws it literally: controls
    escaped, cut to `limit`, and `$` escaped (two of them, as in `bash -c 'kill $$'`, start mathtext, whose
    parser then fails the whole figure)."""
    text = escape_controls(text)[:limit]
    return text.replace("$", r"\$")


def _title(session: Session, title: str | None = None) -> str:
    meta = session.meta
    cmd = title if title is not None else command_line(meta.command) or "-"
    if len(cmd) > 90:
        cmd = cmd[:89] + "…"
    cmd = _shown(cmd)
    line2 = f"session {_shown(meta.id)} on {_shown(meta.host or '?')}"
    usage = session.summary
    if usage is not None:
        line2 += (
            f" · {human_seconds(_duration(session))} · peak RAM {human_bytes(usage.max_ram.combined.total_rss)}"
            f" ({usage.max_ram.peak_source})"
        )
        if usage.gpus:
            line2 += f" · peak GPU memory {human_bytes(usage.max_gpu_ram.combined)}"
    return f"{cmd}\n{line2}"


def _event_label(event: Any) -> str:
    if event.type in ("oom", "gpu_oom"):
        return "GPU OOM" if event.type == "gpu_oom" else "OOM"
    return _shown(event.name or event.type, 20) if event.type == "mark" else str(event.type)


def _legend(ax: Any) -> None:
    """Beside the panel, on the right: it never hides a curve."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, borderaxespad=0.0)


def _bytes_axis(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: human_bytes(value) if value > 0 else "0"))


def _line(ax: Any, xs: list[float], ys: Sequence[float | None], gid: str, **kw: Any) -> Any:
    nan = float("nan")
    (line,) = ax.plot(xs, [nan if value is None else float(value) for value in ys], **kw)
    line.set_gid(gid)
    return line


def _ram_panel(ax: Any, session: Session, cols: TimelineColumns, axis: _Axis) -> None:
    xs = axis.xs(cols.t)
    _line(ax, xs, cols.tree_ram, "series-tree_ram", color=COLORS["tree_ram"], lw=1.8, label="tree RAM (Σ PSS)")
    _line(ax, xs, cols.private, "series-private", color=COLORS["private"], lw=1.2, label="private (Σ USS)")
    if any(value for value in cols.descendants):  # with one process the main process's line is the tree's
        _line(ax, xs, cols.main_rss, "series-main_rss", color=COLORS["main_rss"], lw=1, label="main process RSS")
    ax.set_title("RAM of the process tree", fontsize=9, loc="left")
    _bytes_axis(ax)
    usage = session.summary
    seen = max([float(value) for value in cols.tree_ram if value is not None] + [0.0])
    if usage is not None:
        peak = usage.max_ram.combined.total_rss
        seen = max(seen, peak)
        ax.axhline(peak, color=COLORS["tree_ram"], ls=":", lw=1, label=f"reported peak ({usage.max_ram.peak_source})")
        ax.get_lines()[-1].set_gid("peak-ram")
        _top_processes(ax, session, axis)
        _alert_levels(ax, session, seen)
    top = max([seen, *(ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_gid() in LEVEL_GIDS)])
    ax.set_ylim(0, max(top, MIN_BYTES_AXIS) * HEADROOM)  # room for the legend above the curves
    _legend(ax)


def _top_processes(ax: Any, session: Session, axis: _Axis) -> None:
    """The largest processes by peak RSS, each a dashed segment at its peak across its lifetime (the
    timeline keeps the tree's totals, not every process's curve)."""
    usage = session.summary
    if usage is None or len(usage.processes) < 2:
        return
    start = usage.start_time or session.meta.start_time
    top = sorted(usage.processes, key=lambda proc: proc.peak_rss, reverse=True)[:TOP_PROCESSES]
    for rank, process in enumerate(top):
        x0, x1 = (
            max(0.0, process.first_seen - start) / axis.divisor,
            max(0.0, process.last_seen - start) / axis.divisor,
        )
        label = f"peak of {_shown(process.name, 20)} ({process.pid})"
        (seg,) = ax.plot([x0, x1], [process.peak_rss] * 2, ls="--", lw=1, color=f"C{4 + rank}", label=label)
        seg.set_gid(f"process-{process.pid}")


def _alert_levels(ax: Any, session: Session, seen: float) -> None:
    usage = session.summary
    if usage is None or not usage.alerts.mem_limit:
        return
    alerts = usage.alerts
    for kind, pct in (("warning", alerts.warn_at), ("critical", alerts.critical_at)):
        level = alerts.mem_limit * pct / 100 if alerts.mem_limit else 0
        if 0 < level <= LEVELS_SHOWN_UP_TO * max(seen, 1.0):
            ax.axhline(
                level, color=COLORS[kind], ls="-.", lw=1, label=f"{kind} {pct:g}% of {human_bytes(alerts.mem_limit)}"
            )
            ax.get_lines()[-1].set_gid(f"level-{kind}")


def _cpu_panel(ax: Any, session: Session, cols: TimelineColumns, axis: _Axis) -> None:
    xs = axis.xs(cols.t)
    _line(ax, xs, cols.cpu_percent, "series-cpu_percent", color=COLORS["cpu"], lw=1.5, label="tree CPU")
    if any(value for value in cols.descendants):
        _line(ax, xs, cols.main_cpu_percent, "series-main_cpu_percent", color="#8c564b", lw=1, label="main process")
    usage = session.summary
    requested = usage.slurm.requested.cpus if usage is not None and usage.slurm is not None else None
    if requested:
        ax.axhline(requested * 100, color="#444444", ls="--", lw=1, label=f"requested: {requested} cores")
        ax.get_lines()[-1].set_gid("requested-cpus")
    ax.set_title("CPU, % of one core (100% = one core busy)", fontsize=9, loc="left")
    cpu = [float(value) for value in cols.cpu_percent if value is not None]
    ax.set_ylim(0, max([100.0, *cpu, (requested or 0) * 100.0]) * HEADROOM)
    _legend(ax)


def _gpu_panels(mem_ax: Any, util_ax: Any, session: Session, cols: TimelineColumns, axis: _Axis) -> None:
    xs = axis.xs(cols.t)
    usage = session.summary
    names: dict[int, str] = {}
    for gpu in usage.gpus if usage else []:
        unsaid = gpu.simulated and "simulated" not in gpu.name.lower()
        names[gpu.index] = _shown(gpu.name) + (" (simulated)" if unsaid else "")
    for nth, i in enumerate(cols.gpus):
        label = f"GPU {i} {names.get(i, '')}".strip()
        _line(mem_ax, xs, cols.gpu_memory_of(i), f"series-gpu{i}_memory", color=f"C{nth}", lw=1.4, label=label)
        _line(util_ax, xs, cols.gpu_util_of(i), f"series-gpu{i}_util", color=f"C{nth}", lw=1.2, label=label)
    mem_ax.set_title("GPU memory held by the tree, per GPU", fontsize=9, loc="left")
    _bytes_axis(mem_ax)
    mem = [float(value) for i in cols.gpus for value in cols.gpu_memory_of(i) if value is not None]
    mem_ax.set_ylim(0, max([MIN_BYTES_AXIS, *mem]) * HEADROOM)
    util_ax.set_title("GPU utilization, per GPU (% of time a kernel ran)", fontsize=9, loc="left")
    util_ax.set_ylim(0, 100 * HEADROOM)
    util_ax.set_yticks([0, 25, 50, 75, 100])
    for ax in (mem_ax, util_ax):
        _legend(ax)


def _mark_events(ax: Any, session: Session, axis: _Axis, end: float, labels: PanelLabels | None) -> None:
    """Code blocks shaded, marks as thin lines, alerts and OOM kills as vertical lines; named on the first
    panel only (`labels`: arranged once the layout is known, so that no two overlap)."""
    start = session.meta.start_time
    events = session.events
    hues: dict[str, str] = {}
    for nth, (name, t0, t1) in enumerate(block_runs(events, start, end)):
        hue = hues.setdefault(name, BLOCK_HUES[len(hues) % len(BLOCK_HUES)])  # one colour per block name
        span = ax.axvspan(t0 / axis.divisor, max(t1, t0) / axis.divisor, color=hue, alpha=0.13, lw=0)
        span.set_gid(f"block-{nth}")
        if labels is not None:
            text = ax.text(t0 / axis.divisor, ROW_Y, f" {_shown(name, 24)}", transform=ax.get_xaxis_transform(),
                           fontsize=7, va="bottom", color=hue)  # fmt: skip
            labels.block(text, name, hue)
    counts: dict[str, int] = {}
    for event in events:
        if event.type not in ("mark", "warning", "critical", "oom", "gpu_oom", "gpu_lost"):
            continue
        nth = counts[event.type] = counts.get(event.type, -1) + 1
        at = elapsed_at(event, start) / axis.divisor
        wide = event.type in ("oom", "gpu_oom")
        line = ax.axvline(at, color=COLORS[event.type], lw=2.2 if wide else 0.9, ls="-" if wide else ":")
        line.set_gid(f"{'mark' if event.type == 'mark' else 'event-' + event.type}-{nth}")
        if labels is not None and event.type in ("oom", "gpu_oom", "mark", "critical", "warning"):
            text = _event_label(event)
            labels.top(ax.text(at, 0.98, f" {text}", transform=ax.get_xaxis_transform(), fontsize=7, va="top",
                               color=COLORS[event.type], rotation=90 if event.type == "mark" else 0))  # fmt: skip


# --------------------------------------------------------------------------- files


def render(fig: Any, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes (SVG with text as paths: it looks the same everywhere, and a fixed
    hash salt and no date keep it the same from run to run)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "gputop-tracker", "svg.fonttype": "path"}), warnings.catch_warnings():
        # a small figure with long legends: drawn without the layout, not with a multi-line warning on stderr
        warnings.filterwarnings("ignore", message="constrained_layout not applied", category=UserWarning)
        meta = {"Date": None} if fmt == "svg" else {"Software": "gputop-tracker"}
        fig.savefig(buf, format=fmt, metadata=meta, facecolor="white")
    return buf.getvalue()


def html_page(session: Session, fig: Any) -> bytes:
    """A page that needs nothing else: the figure as inline SVG (its XML prolog and DOCTYPE dropped) and the
    run's text report below it."""
    from gputop_tracker.core.model.units import Units
    from gputop_tracker.core.report import render as report

    svg = render(fig, "svg").decode()
    svg = svg[svg.find("<svg") :]
    title = html.escape(f"gputop-tracker session {session.meta.id}")
    text = report.to_text(session.summary, Units.parse(None, None, None)) if session.summary else "no summary"
    body = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>\n'
        "<style>body{font-family:sans-serif;margin:1em}svg{max-width:100%;height:auto}"
        "pre{background:#f6f6f6;padding:.8em;overflow-x:auto}</style></head>\n"
        f'<body><h1 style="font-size:1.1em">{title}</h1>\n{svg}\n'
        f"<details open><summary>report</summary><pre>{html.escape(text)}</pre></details>\n</body></html>\n"
    )
    return body.encode()


def picture(session: Session, fmt: str, size: tuple[int, int] | None = None) -> bytes:
    """The session drawn in `fmt` (png, svg, html)."""
    fig = figure(session, size)
    return html_page(session, fig) if fmt == "html" else render(fig, fmt)


def png_data_uri(fig: Any) -> str:
    return "data:image/png;base64," + base64.b64encode(render(fig, "png")).decode()
