"""The live view's process rows: which columns fit, the order of the rows (tree or flat, by a sort column)
and the cells of each row. Plain functions of the samples; the live app hands the result to ProcessTable."""

from __future__ import annotations

from gputop_tracker.core.models import ProcessSample, ResourceUsage
from gputop_tracker.tui.proctable import Cell, Column
from gputop_tracker.tui.widgets import short_bytes

# column key, label, width (cells; 0: the name column, which takes what is left), right-aligned
COLUMNS: list[Column] = [
    ("pid", "PID", 7, True),
    ("name", "process", 0, False),
    ("cpu", "CPU %", 6, True),
    ("threads", "thr", 4, True),
    ("rss", "RSS", 7, True),
    ("private", "private", 7, True),
    ("shared", "shared", 7, True),
    ("gpu", "GPU mem", 7, True),
    ("sm", "SM %", 5, True),
]
DROP_ORDER = ["shared", "sm", "threads", "private"]  # least useful first, when the names lack room
MIN_NAME = 16

SORTS = ["pid", "cpu", "rss", "private", "gpu", "threads", "name"]
SORT_LABEL = {
    "pid": "PID",
    "cpu": "CPU %",
    "rss": "RSS",
    "private": "private",
    "gpu": "GPU mem",
    "threads": "threads",
    "name": "name",
}
ASCENDING_SORTS = ("pid", "name")  # the others put the largest first


def name_width(table_width: int, cols: list[Column]) -> int:
    fixed = sum(w + 2 for key, _, w, _ in cols if key != "name")  # + cell padding
    return table_width - fixed - 2 - 2 - 2  # its own padding, the table border, the scrollbar


def fit_columns(table_width: int) -> tuple[list[Column], int]:
    """The columns that fit a table `table_width` cells wide, and the width of the name column."""
    cols = list(COLUMNS)
    for drop in DROP_ORDER:  # columns leave, least useful first, until the names have room
        if name_width(table_width, cols) >= MIN_NAME:
            break
        cols = [c for c in cols if c[0] != drop]
    return cols, max(MIN_NAME // 2, name_width(table_width, cols))


def sort_value(p: ProcessSample, key: str) -> float | str:
    """What a row is ordered by: ascending for pid and name, largest first for the figures."""
    if key == "pid":
        return p.pid
    if key == "name":
        return p.name.lower()
    if key == "cpu":
        return -p.cpu_percent
    if key == "rss":
        return -p.rss
    if key == "private":
        return -p.private
    if key == "gpu":
        return -sum(p.gpu_memory.values())
    return -p.threads


def final_processes(u: ResourceUsage) -> list[ProcessSample]:
    """The final report's processes as table rows: each figure is that process's peak (pss=-1 marks them)."""
    return [
        ProcessSample(
            pid=p.pid,
            ppid=p.ppid,
            name=p.name,
            cmdline=p.cmdline,
            role=p.role,
            rss=p.peak_rss,
            private=p.peak_private,
            shared=0,
            pss=-1,
            peak_rss=p.peak_rss,
            cpu_seconds=p.cpu_seconds,
            cpu_percent=p.max_cpu_percent,
            threads=p.peak_threads,
            gpu_memory={"peak": p.peak_gpu_memory} if p.peak_gpu_memory else {},
        )
        for p in u.processes
    ]


def ordered_processes(procs: list[ProcessSample], key: str, tree: bool) -> list[tuple[ProcessSample, int]]:
    """Each process with its depth in the tree (0 in the flat list), in display order: siblings by `key`,
    the main process's tree first."""
    if not tree:
        return [(p, 0) for p in sorted(procs, key=lambda p: (sort_value(p, key), p.pid))]
    by_pid = {p.pid: p for p in procs}
    children: dict[int, list[ProcessSample]] = {}
    roots = []
    for p in procs:
        if p.ppid in by_pid and p.ppid != p.pid:
            children.setdefault(p.ppid, []).append(p)
        else:
            roots.append(p)
    out: list[tuple[ProcessSample, int]] = []

    def walk(p: ProcessSample, depth: int) -> None:
        out.append((p, depth))
        for c in sorted(children.get(p.pid, []), key=lambda c: (sort_value(c, key), c.pid)):
            walk(c, depth + 1)

    for r in sorted(roots, key=lambda r: (r.role != "main", sort_value(r, key), r.pid)):
        walk(r, 0)
    return out


def process_cells(p: ProcessSample, depth: int, columns: list[str]) -> tuple[Cell, ...]:
    """The row of one process: the cells of `columns`, the name indented by its depth in the tree."""
    style = "bold" if p.role == "main" else ""
    indent = ("  " * (depth - 1) + "└ ") if depth else ""
    gpu = sum(p.gpu_memory.values())
    values: dict[str, Cell] = {
        "pid": (str(p.pid), style),
        "name": (indent + p.name, style),
        "cpu": (f"{p.cpu_percent:.1f}", ""),
        "threads": (str(p.threads), ""),
        "rss": (short_bytes(p.rss), ""),
        "private": (short_bytes(p.private), ""),
        "shared": (short_bytes(p.shared) if p.pss >= 0 else "-", ""),
        "gpu": (short_bytes(gpu) if gpu else "-", ""),
        "sm": ("-" if p.gpu_sm_percent is None else f"{p.gpu_sm_percent:.0f}", ""),
    }
    return tuple(values[k] for k in columns)


def sort_mark(column: str, sort_key: str) -> str:
    """The header's arrow on the sort column: ▲ ascending (pid, name), ▼ largest first."""
    if column != sort_key:
        return ""
    return " ▲" if column in ASCENDING_SORTS else " ▼"
