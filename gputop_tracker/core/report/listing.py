"""The saved sessions as the history view lists and compares them: one row of figures per session, the
list's filter and sort, a side-by-side comparison of two sessions, the timeline as columns.

Pure functions of the store's entries and the models (no Textual): the history screens draw what these return.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputop_tracker.core.model.models import BlockSummary, ResourceUsage, Session
from gputop_tracker.core.model.text import escape_controls
from gputop_tracker.core.model.units import human_bytes, human_seconds
from gputop_tracker.core.report.blockspans import BlockRun, block_runs, marks, outermost
from gputop_tracker.core.store import sessions as store


def percent_or_dash(value: float | None) -> str:
    """42% for a known percentage, - for none."""
    return "-" if value is None else f"{value:.0f}%"


def local_time(when: float, fmt: str) -> str:
    """Epoch seconds as local time in strftime format `fmt`."""
    return time.strftime(fmt, time.localtime(when))


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
    gpu_util: float | None = None  # mean utilization per GPU (the saved figure sums the GPUs)
    n_gpus: int = 0
    simulated: bool = False  # its GPUs were simulated (a demo, not a measurement)
    running: bool = False
    error: str | None = None
    job: str = ""  # the SLURM job (an array's own id), "" outside one: the list groups by it (core.historyjobs)
    job_part: str = ""  # which part of the job: "task 3" of an array, else "node n01"
    members: list[Row] | None = None  # a job's group row: its sessions
    depth: int = 0  # 1: a session shown under its job's group row

    @classmethod
    def of(cls, entry: store.Entry) -> Row:
        session = entry.session
        if session is None:
            return cls(entry.id, entry, _start_from_id(entry.id), error=entry.error or "unreadable")
        meta = session.meta
        usage = session.summary
        row = cls(
            entry.id, entry, meta.start_time or None, command=escape_controls(" ".join(meta.command)), host=meta.host
        )
        row.running = entry.running
        if meta.status == "running":
            row.exit, row.exit_rank = ("running", -1) if row.running else ("stale", 1e9)
        elif usage is not None and usage.exit_signal:
            row.exit, row.exit_rank = f"sig {usage.exit_signal}", 1000 + usage.exit_signal
        elif meta.exit_code is not None:
            row.exit, row.exit_rank = str(meta.exit_code), meta.exit_code
        if usage is not None and usage.slurm is not None and usage.slurm.job_id is not None:
            slurm = usage.slurm
            row.job = slurm.array_job_id or slurm.job_id or ""
            row.job_part = (
                f"task {slurm.array_task_id}" if slurm.array_task_id else f"node {slurm.node}" if slurm.node else ""
            )
        if usage is not None:
            row.duration = usage.compute_time.time
            row.peak_ram = usage.peak_ram_read
            row.peak_gpu = usage.max_gpu_ram.combined if usage.gpus else None
            row.cpu = usage.cpu_utilization.combined.mean_sum_percent
            row.n_gpus = len(usage.gpus)
            row.gpu_util = (
                usage.gpu_utilization.gpu_percentages.mean_sum_percent / len(usage.gpus) if usage.gpus else None
            )
            row.simulated = any(gpu.simulated for gpu in usage.gpus)
        elif meta.end_time:
            row.duration = meta.end_time - meta.start_time
        return row

    def haystack(self) -> str:
        """What the filter matches: command, host, date and time, id, state, `job:ID` and its task and node."""
        when = local_time(self.start, "%Y-%m-%d %H:%M:%S") if self.start else ""
        extra = "unreadable " + (self.error or "") if self.error else self.exit
        job = f" job:{self.job} {self.job_part}" if self.job else ""
        sim = " simulated" if self.simulated else ""
        return f"{self.command} {self.host} {when} {self.id} {extra}{job}{sim}".lower()


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int
    sort: Callable[[Row], Any] | None
    right: bool = False
    descending: bool = True
    """Direction of the first click: newest, largest first; text A→Z."""


def _sort_number(value: float | None) -> float:
    """A figure as a sort key: a missing one sorts below every number."""
    return -math.inf if value is None else value


COLUMNS: list[Column] = [
    Column("mark", "✓", 1, None),
    Column("start", "start", 19, lambda row: _sort_number(row.start)),
    Column("command", "command", 30, lambda row: row.command.lower(), descending=False),
    Column("duration", "duration", 8, lambda row: _sort_number(row.duration), right=True),
    Column("exit", "exit", 7, lambda row: row.exit_rank, right=True, descending=False),
    Column("ram", "peak RAM", 9, lambda row: _sort_number(row.peak_ram), right=True),
    Column("gpu", "peak GPU", 9, lambda row: _sort_number(row.peak_gpu), right=True),
    Column("cpu", "mean CPU", 8, lambda row: _sort_number(row.cpu), right=True),
    Column("gpu_util", "GPU util", 8, lambda row: _sort_number(row.gpu_util), right=True),
    Column("host", "host", 12, lambda row: row.host.lower(), descending=False),
]
COLUMN_BY_KEY = {column.key: column for column in COLUMNS}
SORTABLE = [column.key for column in COLUMNS if column.sort is not None]


def filter_rows(rows: Iterable[Row], text: str) -> list[Row]:
    """Rows whose command, host, date, id or state contain every word of `text` (any case)."""
    words = text.lower().split()
    if not words:
        return list(rows)
    return [row for row in rows if all(word in row.haystack() for word in words)]


def sort_rows(rows: Iterable[Row], key: str, reverse: bool) -> list[Row]:
    """Readable sessions ordered by a column; unreadable files always last (they have no figures)."""
    by = COLUMN_BY_KEY[key].sort or (lambda row: row.start)
    rows = list(rows)
    good = sorted((row for row in rows if row.error is None), key=lambda row: (by(row), row.id), reverse=reverse)
    bad = sorted((row for row in rows if row.error is not None), key=lambda row: row.id, reverse=True)
    return good + bad


def timeline_series(session: Session) -> tuple[list[float], dict[str, list[float | None]]]:
    """The timeline as columns: elapsed seconds and each column by name."""
    tl = session.timeline
    index = {column: i for i, column in enumerate(tl.columns)}
    at = index.get("elapsed", 0)
    rows = [row for row in tl.rows if len(row) > at and row[at] is not None]
    xs = [float(row[at] or 0.0) for row in rows]
    cols = {column: [row[i] if i < len(row) else None for row in rows] for column, i in index.items()}
    return xs, cols


# --------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class Figure:
    label: str
    get: Callable[[ResourceUsage], float | None]
    kind: str  # bytes | seconds | percent | count
    better: str | None  # "lower" or "higher" is better; None: neither


def block_spans(session: Session) -> tuple[list[BlockRun], list[tuple[float, str]]]:
    """The outermost runs of the code blocks and the marks of a session (its bounded event timeline)."""
    usage = session.summary
    end = (usage.end_time - usage.start_time) if usage is not None and usage.end_time > usage.start_time else None
    start = session.meta.start_time
    return outermost(block_runs(session.events, start, end)), marks(session.events, start)


def _gpu_or_none(usage: ResourceUsage, value: float) -> float | None:
    return value if usage.gpus else None


FIGURES: list[Figure] = [
    Figure("wall time", lambda usage: usage.compute_time.time, "seconds", "lower"),
    Figure("peak RAM (combined)", lambda usage: usage.max_ram.combined.total_rss, "bytes", "lower"),
    Figure("peak RAM main", lambda usage: usage.max_ram.main.total_rss, "bytes", "lower"),
    Figure("peak RAM descendants", lambda usage: usage.max_ram.descendants.total_rss, "bytes", "lower"),
    Figure("peak GPU memory", lambda usage: _gpu_or_none(usage, usage.max_gpu_ram.combined), "bytes", "lower"),
    Figure("CPU time", lambda usage: usage.cpu_time.total, "seconds", "lower"),
    Figure("mean CPU", lambda usage: usage.cpu_utilization.combined.mean_sum_percent, "percent", None),
    Figure("max CPU", lambda usage: usage.cpu_utilization.combined.max_sum_percent, "percent", None),
    Figure(
        "mean GPU util (per GPU)",
        lambda usage: _gpu_or_none(
            usage, usage.gpu_utilization.gpu_percentages.mean_sum_percent / max(len(usage.gpus), 1)
        ),
        "percent",
        "higher",
    ),
    Figure("peak threads", lambda usage: float(usage.peak_threads), "count", None),
    Figure("processes", lambda usage: float(usage.n_processes), "count", None),
]


def format_figure(kind: str, figure: float | None, signed: bool = False) -> str:
    """A figure in the user's units (`kind`: bytes, seconds, percent, percent0, count), signed for a difference."""
    if figure is None:
        return "-"
    sign = "+" if signed and figure > 0 else ("−" if signed and figure < 0 else "")
    magnitude = abs(figure) if signed else figure
    if kind == "bytes":
        return sign + human_bytes(magnitude)
    if kind == "seconds":
        return sign + human_seconds(magnitude)
    if kind == "percent":
        return f"{sign}{magnitude:.1f}%"
    if kind == "percent0":
        return f"{sign}{magnitude:.0f}%"
    return f"{sign}{magnitude:g}"


def compare_rows(usage_a: ResourceUsage, usage_b: ResourceUsage) -> list[tuple[str, str, str, str, str, str]]:
    """(figure, A, B, B − A, change %, which is better) for each figure, in the user's units; then the code
    blocks of either session (`sessions compare` has every block figure)."""
    out = [_compare_row(fig.label, fig.kind, fig.better, fig.get(usage_a), fig.get(usage_b)) for fig in FIGURES]
    ea, eb = usage_a.exit_code, usage_b.exit_code
    ok_a, ok_b = ea == 0, eb == 0
    # two different failures (143: SIGTERM, 129: SIGHUP) are not the same; neither is better
    verdict = "same" if ea == eb else "" if ok_a == ok_b else ("A" if ok_a else "B")
    out.append(("exit code", str(ea if ea is not None else "-"), str(eb if eb is not None else "-"), "", "", verdict))
    blocks_a, blocks_b = (
        {block.name: block for block in usage_a.blocks},
        {block.name: block for block in usage_b.blocks},
    )
    for name in [*blocks_a, *(name for name in blocks_b if name not in blocks_a)]:
        ba, bb = blocks_a.get(name), blocks_b.get(name)
        for label, kind, better, get in BLOCK_FIGURES:
            va, vb = (get(block) if block is not None else None for block in (ba, bb))
            out.append(_compare_row(f"block {escape_controls(name[:40])}: {label}", kind, better, va, vb))
    return out


BLOCK_FIGURES: list[tuple[str, str, str | None, Callable[[BlockSummary], float | None]]] = [
    ("calls", "count", None, lambda block: block.calls),
    ("time", "seconds", "lower", lambda block: block.duration.total),
    ("peak RAM", "bytes", "lower", lambda block: block.peak_ram),
    ("CPU time", "seconds", "lower", lambda block: block.cpu_seconds),
]


def _compare_row(
    label: str, kind: str, better: str | None, va: float | None, vb: float | None
) -> tuple[str, str, str, str, str, str]:
    if va is None or vb is None:
        return (label, format_figure(kind, va), format_figure(kind, vb), "-", "", "")
    diff = vb - va
    pct = format_figure("percent0", diff / va * 100, signed=True) if va else ""
    if better is None or abs(diff) <= 1e-9 * max(abs(va), abs(vb), 1.0):
        verdict = "same" if abs(diff) <= 1e-9 * max(abs(va), abs(vb), 1.0) else ""
    else:
        b_wins = diff < 0 if better == "lower" else diff > 0
        verdict = "B" if b_wins else "A"
    shown = format_figure(kind, va), format_figure(kind, vb), format_figure(kind, diff, signed=True)
    return (label, *shown, pct, verdict)


def count_session_files(store_dir: Path) -> int:
    try:
        with os.scandir(store_dir) as it:
            return sum(1 for entry in it if entry.name.endswith(store.SUFFIX))
    except OSError:
        return 0


def load_full(entry: store.Entry) -> store.Entry:
    return store.load(entry.path) if entry.partial or entry.session is None else entry
