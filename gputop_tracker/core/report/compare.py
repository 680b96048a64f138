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
    ("duration", "duration", "time", lambda u: u.compute_time.time),
    ("peak_ram", "peak RAM (tree)", "ram", lambda u: u.max_ram.combined.total_rss),
    ("peak_ram_main", "peak RAM (main)", "ram", lambda u: u.max_ram.main.total_rss),
    ("peak_gpu_ram", "peak GPU RAM (tree)", "gpu", lambda u: u.max_gpu_ram.combined if u.gpus else None),
    ("cpu_seconds", "CPU time", "time", lambda u: u.cpu_time.total),
    ("mean_cpu_percent", "mean CPU", "percent", lambda u: u.cpu_time.mean_percent),
    (
        "mean_gpu_utilization",
        "mean GPU utilization",
        "percent",
        lambda u: u.gpu_utilization.gpu_percentages.mean_sum_percent if u.gpus else None,
    ),
    ("processes", "processes", "count", lambda u: u.n_processes),
]
BLOCK: list[tuple[str, str, str, Callable[[BlockSummary], float | None]]] = [
    ("calls", "calls", "count", lambda b: b.calls),
    ("duration_total", "time (total)", "time", lambda b: b.duration.total),
    ("duration_mean", "time (mean)", "time", lambda b: b.duration.mean),
    ("duration_max", "time (max)", "time", lambda b: b.duration.max),
    ("peak_ram", "peak RAM", "ram", lambda b: b.peak_ram),
    ("peak_private", "peak private", "ram", lambda b: b.peak_private),
    ("tree_peak_ram", "tree peak RAM", "ram", lambda b: b.tree_peak_ram),
    ("peak_gpu_ram", "peak GPU RAM", "gpu", lambda b: b.peak_gpu_ram),
    ("cpu_seconds", "CPU time", "time", lambda b: b.cpu_seconds),
    ("mean_cpu_percent", "mean CPU", "percent", lambda b: b.mean_cpu_percent),
    ("mean_gpu_utilization", "mean GPU utilization", "percent", lambda b: b.mean_gpu_utilization),
]
UNIT_NAMES = {"ram": "bytes", "gpu": "bytes", "time": "seconds", "percent": "percent", "count": "count"}


def _row(key: str, label: str, kind: str, a: float | None, b: float | None) -> dict[str, Any]:
    diff = b - a if a is not None and b is not None else None
    change = 100.0 * diff / a if diff is not None and a else None
    return {"figure": key, "label": label, "unit": UNIT_NAMES[kind], "kind": kind, "a": a, "b": b, "diff": diff,
            "change_percent": change}  # fmt: skip


def _side(s: Session) -> dict[str, Any]:
    return {"id": s.meta.id, "command": s.meta.command, "start_time": s.meta.start_time, "status": s.meta.status}


def compare(a: Session, b: Session) -> dict[str, Any]:
    """The comparison as a JSON-ready dict: `a`, `b` (which sessions), `overall` and `blocks` (one entry per
    block name of either session, A's order first; `in`: both, a or b), each figure with a, b, diff (b - a)
    and change_percent."""
    ua, ub = a.summary or ResourceUsage(), b.summary or ResourceUsage()
    overall = [_row(k, label, kind, get(ua), get(ub)) for k, label, kind, get in OVERALL]
    blocks_a = {x.name: x for x in ua.blocks}
    blocks_b = {x.name: x for x in ub.blocks}
    names = list(blocks_a) + [n for n in blocks_b if n not in blocks_a]
    out_blocks = []
    for name in names:
        ba, bb = blocks_a.get(name), blocks_b.get(name)
        where = "both" if ba and bb else "a" if ba else "b"
        figures = [
            _row(k, label, kind, get(ba) if ba else None, get(bb) if bb else None) for k, label, kind, get in BLOCK
        ]
        out_blocks.append({"name": name, "in": where, "figures": figures})
    return {"a": _side(a), "b": _side(b), "overall": overall, "blocks": out_blocks}


class _Cells:
    """A figure as text: human units unless the caller asked for some."""

    def __init__(self, units: Units) -> None:
        self.units = units

    def value(self, kind: str, v: float | None, signed: bool = False) -> str:
        if v is None:
            return "-"
        sign = "+" if signed and v > 0 else "-" if signed and v < 0 else ""
        x = abs(v) if signed else v
        if kind in ("ram", "gpu"):
            unit = self.units.ram if kind == "ram" else self.units.gpu_ram
            return sign + (f"{x / RAM_UNITS[unit]:.3f} {unit}" if unit else human_bytes(x))
        if kind == "time":
            unit = self.units.time
            if unit:
                return sign + f"{x / TIME_UNITS[unit]:.4f} {unit}"
            return sign + (f"{x * 1000:.1f} ms" if x < 1 else human_seconds(x))
        if kind == "percent":
            return sign + f"{x:.1f}%"
        return sign + f"{x:g}"

    def row(self, r: dict[str, Any]) -> list[str]:
        change = r["change_percent"]
        return [
            r["label"],
            self.value(r["kind"], r["a"]),
            self.value(r["kind"], r["b"]),
            self.value(r["kind"], r["diff"], signed=True),
            "-" if change is None else f"{change:+.1f}%",
        ]


def compare_text(cmp: dict[str, Any], units: Units = DEFAULT_UNITS) -> str:
    cells = _Cells(units)
    a, b = cmp["a"], cmp["b"]
    lines = [
        f"A  {escape_controls(a['id'])}  {command_line(a['command'])}",
        f"B  {escape_controls(b['id'])}  {command_line(b['command'])}",
        "",
        "Overall",
    ]
    header = ["", "A", "B", "B - A", "change"]
    lines += ["  " + x for x in table([header, *(cells.row(r) for r in cmp["overall"])], "<>>>>")]
    if not cmp["blocks"]:
        lines += ["", "no code blocks in either session"]
    for blk in cmp["blocks"]:
        where = {"both": "", "a": "  (only in A)", "b": "  (only in B)"}[blk["in"]]
        lines += ["", f"Block {escape_controls(blk['name'])}{where}"]
        lines += ["  " + x for x in table([header, *(cells.row(r) for r in blk["figures"])], "<>>>>")]
    return "\n".join(lines) + "\n"
