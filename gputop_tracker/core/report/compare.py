"""Two sessions side by side (`gputop-track sessions compare A B`): the run's figures and the same code blocks
of both, with differences — gpu-tracker's TrackingComparison, from the saved sessions (no pickles).

Figures are bytes and seconds in JSON; the text shows them in human units (or those asked for).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gputop_tracker.core.model.models import BlockSummary, ResourceUsage, Session
from gputop_tracker.core.model.text import command_line, escape_controls
from gputop_tracker.core.model.units import RAM_UNITS, TIME_UNITS, Units, human_bytes, human_seconds
from gputop_tracker.core.report.render import DEFAULT_UNITS, table

# (key, label, unit kind) — unit kind: "ram", "gpu", "time", "percent", "count"
OVERALL: list[tuple[str, str, str, Callable[[ResourceUsage], float | None]]] = [
    ("duration", "duration", "time", lambda usage: usage.compute_time.time),
    ("peak_ram", "peak RAM (tree)", "ram", lambda usage: usage.max_ram.combined.total_rss),
    ("peak_ram_main", "peak RAM (main)", "ram", lambda usage: usage.max_ram.main.total_rss),
    ("peak_gpu_ram", "peak GPU RAM (tree)", "gpu", lambda usage: usage.max_gpu_ram.combined if usage.gpus else None),
    ("cpu_seconds", "CPU time", "time", lambda usage: usage.cpu_time.total),
    ("mean_cpu_percent", "mean CPU", "percent", lambda usage: usage.cpu_time.mean_percent),
    (
        "mean_gpu_utilization",
        "mean GPU utilization",
        "percent",
        lambda usage: usage.gpu_utilization.gpu_percentages.mean_sum_percent if usage.gpus else None,
    ),
    ("processes", "processes", "count", lambda usage: usage.n_processes),
]
BLOCK: list[tuple[str, str, str, Callable[[BlockSummary], float | None]]] = [
    ("calls", "calls", "count", lambda block: block.calls),
    ("duration_total", "time (total)", "time", lambda block: block.duration.total),
    ("duration_mean", "time (mean)", "time", lambda block: block.duration.mean),
    ("duration_max", "time (max)", "time", lambda block: block.duration.max),
    ("peak_ram", "peak RAM", "ram", lambda block: block.peak_ram),
    ("peak_private", "peak private", "ram", lambda block: block.peak_private),
    ("tree_peak_ram", "tree peak RAM", "ram", lambda block: block.tree_peak_ram),
    ("peak_gpu_ram", "peak GPU RAM", "gpu", lambda block: block.peak_gpu_ram),
    ("cpu_seconds", "CPU time", "time", lambda block: block.cpu_seconds),
    ("mean_cpu_percent", "mean CPU", "percent", lambda block: block.mean_cpu_percent),
    ("mean_gpu_utilization", "mean GPU utilization", "percent", lambda block: block.mean_gpu_utilization),
]
UNIT_NAMES = {"ram": "bytes", "gpu": "bytes", "time": "seconds", "percent": "percent", "count": "count"}


def _row(key: str, label: str, kind: str, value_a: float | None, value_b: float | None) -> dict[str, Any]:
    diff = value_b - value_a if value_a is not None and value_b is not None else None
    change = 100.0 * diff / value_a if diff is not None and value_a else None
    return {"figure": key, "label": label, "unit": UNIT_NAMES[kind], "kind": kind, "a": value_a, "b": value_b,
            "diff": diff, "change_percent": change}  # fmt: skip


def _side(session: Session) -> dict[str, Any]:
    return {
        "id": session.meta.id,
        "command": session.meta.command,
        "start_time": session.meta.start_time,
        "status": session.meta.status,
    }


def compare(session_a: Session, session_b: Session) -> dict[str, Any]:
    """The comparison as a JSON-ready dict: `a`, `b` (which sessions), `overall` and `blocks` (one entry per
    block name of either session, A's order first; `in`: both, a or b), each figure with a, b, diff (b - a)
    and change_percent."""
    ua, ub = session_a.summary or ResourceUsage(), session_b.summary or ResourceUsage()
    overall = [_row(key, label, kind, get(ua), get(ub)) for key, label, kind, get in OVERALL]
    blocks_a = {block.name: block for block in ua.blocks}
    blocks_b = {block.name: block for block in ub.blocks}
    names = list(blocks_a) + [name for name in blocks_b if name not in blocks_a]
    out_blocks = []
    for name in names:
        ba, bb = blocks_a.get(name), blocks_b.get(name)
        where = "both" if ba and bb else "a" if ba else "b"
        figures = [
            _row(key, label, kind, get(ba) if ba else None, get(bb) if bb else None) for key, label, kind, get in BLOCK
        ]
        out_blocks.append({"name": name, "in": where, "figures": figures})
    return {"a": _side(session_a), "b": _side(session_b), "overall": overall, "blocks": out_blocks}


class _Cells:
    """A figure as text: human units unless the caller asked for some."""

    def __init__(self, units: Units) -> None:
        self.units = units

    def value(self, kind: str, figure: float | None, signed: bool = False) -> str:
        if figure is None:
            return "-"
        sign = "+" if signed and figure > 0 else "-" if signed and figure < 0 else ""
        magnitude = abs(figure) if signed else figure
        if kind in ("ram", "gpu"):
            unit = self.units.ram if kind == "ram" else self.units.gpu_ram
            return sign + (f"{magnitude / RAM_UNITS[unit]:.3f} {unit}" if unit else human_bytes(magnitude))
        if kind == "time":
            unit = self.units.time
            if unit:
                return sign + f"{magnitude / TIME_UNITS[unit]:.4f} {unit}"
            return sign + (f"{magnitude * 1000:.1f} ms" if magnitude < 1 else human_seconds(magnitude))
        if kind == "percent":
            return sign + f"{magnitude:.1f}%"
        return sign + f"{magnitude:g}"

    def row(self, row: dict[str, Any]) -> list[str]:
        change = row["change_percent"]
        return [
            row["label"],
            self.value(row["kind"], row["a"]),
            self.value(row["kind"], row["b"]),
            self.value(row["kind"], row["diff"], signed=True),
            "-" if change is None else f"{change:+.1f}%",
        ]


def compare_text(cmp: dict[str, Any], units: Units = DEFAULT_UNITS) -> str:
    cells = _Cells(units)
    side_a, side_b = cmp["a"], cmp["b"]
    lines = [
        f"A  {escape_controls(side_a['id'])}  {command_line(side_a['command'])}",
        f"B  {escape_controls(side_b['id'])}  {command_line(side_b['command'])}",
        "",
        "Overall",
    ]
    header = ["", "A", "B", "B - A", "change"]
    lines += ["  " + line for line in table([header, *(cells.row(row) for row in cmp["overall"])], "<>>>>")]
    if not cmp["blocks"]:
        lines += ["", "no code blocks in either session"]
    for blk in cmp["blocks"]:
        where = {"both": "", "a": "  (only in A)", "b": "  (only in B)"}[blk["in"]]
        lines += ["", f"Block {escape_controls(blk['name'])}{where}"]
        lines += ["  " + line for line in table([header, *(cells.row(row) for row in blk["figures"])], "<>>>>")]
    return "\n".join(lines) + "\n"
