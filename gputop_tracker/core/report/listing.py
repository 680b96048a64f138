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


def percent_or_dash(v: float | None) -> str:
    """42% for a known percentage, - for none."""
    return "-" if v is None else f"{v:.0f}%"


def local_time(t: float, fmt: str) -> str:
    """Epoch seconds as local time in strftime format `fmt`."""
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
        s = entry.session
        if s is None:
            return cls(entry.id, entry, _start_from_id(entry.id), error=entry.error or "unreadable")
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
        if u is not None and u.slurm is not None and u.slurm.job_id is not None:
            j = u.slurm
            row.job = j.array_job_id or j.job_id or ""
            row.job_part = f"task {j.array_task_id}" if j.array_task_id else f"node {j.node}" if j.node else ""
        if u is not None:
            row.duration = u.compute_time.time
            row.peak_ram = u.max_ram.combined.total_rss
            row.peak_gpu = u.max_gpu_ram.combined if u.gpus else None
            row.cpu = u.cpu_utilization.combined.mean_sum_percent
            row.n_gpus = len(u.gpus)
            row.gpu_util = u.gpu_utilization.gpu_percentages.mean_sum_percent / len(u.gpus) if u.gpus else None
            row.simulated = any(g.simulated for g in u.gpus)
        elif m.end_time:
            row.duration = m.end_time - m.start_time
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


def _sort_number(v: float | None) -> float:
    """A figure as a sort key: a missing one sorts below every number."""
    return -math.inf if v is None else v


COLUMNS: list[Column] = [
    Column("mark", "✓", 1, None),
    Column("start", "start", 19, lambda r: _sort_number(r.start)),
    Column("command", "command", 30, lambda r: r.command.lower(), descending=False),
    Column("duration", "duration", 8, lambda r: _sort_number(r.duration), right=True),
    Column("exit", "exit", 7, lambda r: r.exit_rank, right=True, descending=False),
    Column("ram", "peak RAM", 9, lambda r: _sort_number(r.peak_ram), right=True),
    Column("gpu", "peak GPU", 9, lambda r: _sort_number(r.peak_gpu), right=True),
    Column("cpu", "mean CPU", 8, lambda r: _sort_number(r.cpu), right=True),
    Column("gpu_util", "GPU util", 8, lambda r: _sort_number(r.gpu_util), right=True),
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


def timeline_series(session: Session) -> tuple[list[float], dict[str, list[float | None]]]:
    """The timeline as columns: elapsed seconds and each column by name."""
    tl = session.timeline
    index = {c: i for i, c in enumerate(tl.columns)}
    at = index.get("elapsed", 0)
    rows = [r for r in tl.rows if len(r) > at and r[at] is not None]
    xs = [float(r[at] or 0.0) for r in rows]
    cols = {c: [r[i] if i < len(r) else None for r in rows] for c, i in index.items()}
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
    u = session.summary
    end = (u.end_time - u.start_time) if u is not None and u.end_time > u.start_time else None
    start = session.meta.start_time
    return outermost(block_runs(session.events, start, end)), marks(session.events, start)


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
        "mean GPU util (per GPU)",
        lambda u: _gpu_or_none(u, u.gpu_utilization.gpu_percentages.mean_sum_percent / max(len(u.gpus), 1)),
        "percent",
        "higher",
    ),
    Figure("peak threads", lambda u: float(u.peak_threads), "count", None),
    Figure("processes", lambda u: float(u.n_processes), "count", None),
]


def format_figure(kind: str, v: float | None, signed: bool = False) -> str:
    """A figure in the user's units (`kind`: bytes, seconds, percent, percent0, count), signed for a difference."""
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
    """(figure, A, B, B − A, change %, which is better) for each figure, in the user's units; then the code
    blocks of either session (`sessions compare` has every block figure)."""
    out = [_compare_row(f.label, f.kind, f.better, f.get(a), f.get(b)) for f in FIGURES]
    ea, eb = a.exit_code, b.exit_code
    ok_a, ok_b = ea == 0, eb == 0
    verdict = "same" if ok_a == ok_b else ("A" if ok_a else "B")
    out.append(("exit code", str(ea if ea is not None else "-"), str(eb if eb is not None else "-"), "", "", verdict))
    blocks_a, blocks_b = {x.name: x for x in a.blocks}, {x.name: x for x in b.blocks}
    for name in [*blocks_a, *(n for n in blocks_b if n not in blocks_a)]:
        ba, bb = blocks_a.get(name), blocks_b.get(name)
        for label, kind, better, get in BLOCK_FIGURES:
            va, vb = (get(x) if x is not None else None for x in (ba, bb))
            out.append(_compare_row(f"block {escape_controls(name[:40])}: {label}", kind, better, va, vb))
    return out


BLOCK_FIGURES: list[tuple[str, str, str | None, Callable[[BlockSummary], float | None]]] = [
    ("calls", "count", None, lambda x: x.calls),
    ("time", "seconds", "lower", lambda x: x.duration.total),
    ("peak RAM", "bytes", "lower", lambda x: x.peak_ram),
    ("CPU time", "seconds", "lower", lambda x: x.cpu_seconds),
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
            return sum(1 for e in it if e.name.endswith(store.SUFFIX))
    except OSError:
        return 0


def load_full(entry: store.Entry) -> store.Entry:
    return store.load(entry.path) if entry.partial or entry.session is None else entry
