"""Every session of one cluster job as one view (`sessions job JOBID`): the tasks of an array (n, p50, p95,
max of each figure, failures by exit code) or the nodes of a multi-node job (one row per node, totals across
nodes, the slowest node). Pure functions on (session id, report dict) pairs; the store is read elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gputop_tracker.core.model.text import escape_controls
from gputop_tracker.core.model.units import human_bytes, human_seconds
from gputop_tracker.core.report.advise import percentile

FIGURES = ("peak_ram_bytes", "peak_gpu_ram_bytes", "wall_s", "cpu_seconds")


def belongs(usage: dict[str, Any], job_id: str) -> bool:
    """Whether report `usage` ran in job `job_id` (its own id, or the array's)."""
    slurm = usage.get("slurm") or {}
    return job_id in (slurm.get("job_id"), slurm.get("array_job_id"))


def _row(sid: str, usage: dict[str, Any]) -> dict[str, Any]:
    slurm = usage.get("slurm") or {}
    return {
        "session_id": sid,
        "job_id": slurm.get("job_id"),
        "array_task_id": slurm.get("array_task_id"),
        "step_id": slurm.get("step_id"),
        "node": slurm.get("node") or usage.get("host"),
        "node_id": slurm.get("node_id"),
        "peak_ram_bytes": usage["max_ram"]["combined"]["total_rss"],
        "peak_gpu_ram_bytes": usage["max_gpu_ram"]["combined"],
        "wall_s": usage["compute_time"]["time"],
        "cpu_seconds": usage["cpu_time"]["total"],
        "exit_code": usage.get("exit_code"),
        "status": usage.get("status"),
    }


def stats(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """n, p50, p95 and max of each figure over the rows."""
    out = {}
    for figure in FIGURES:
        xs = [float(row[figure]) for row in rows if row[figure] is not None]
        out[figure] = {
            "p50": percentile(xs, 50) if xs else 0.0,
            "p95": percentile(xs, 95) if xs else 0.0,
            "max": max(xs, default=0.0),
        }
    return out


def failures(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Failed tasks by exit code (a code != 0; a signal shows as its 128+N)."""
    out: dict[str, int] = {}
    for row in rows:
        code = row["exit_code"]
        if code:
            out[str(code)] = out.get(str(code), 0) + 1
    return dict(sorted(out.items()))


def _task_key(row: dict[str, Any]) -> tuple[int, str]:
    task = row["array_task_id"] or ""
    return (int(task), "") if task.isdigit() else (1 << 62, task)


def _node_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per node: its sessions folded (peaks: max; wall and CPU: sum)."""
    by_node: dict[str, dict[str, Any]] = {}
    for row in rows:
        node = by_node.get(row["node"])
        if node is None:
            by_node[row["node"]] = {**row, "sessions": [row["session_id"]]}
            continue
        node["sessions"].append(row["session_id"])
        node["peak_ram_bytes"] = max(node["peak_ram_bytes"], row["peak_ram_bytes"])
        node["peak_gpu_ram_bytes"] = max(node["peak_gpu_ram_bytes"], row["peak_gpu_ram_bytes"])
        node["wall_s"] += row["wall_s"]
        node["cpu_seconds"] += row["cpu_seconds"]
        node["exit_code"] = node["exit_code"] or row["exit_code"]
    return sorted(by_node.values(), key=lambda node: (node["node_id"] is None, node["node_id"] or 0, node["node"]))


def job_view(job_id: str, sessions: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The job's view: `kind` array (one row per task), nodes (one row per node, `total`, `slowest_node`)
    or single; with `n`, `stats` and `failures` in every case."""
    rows = [_row(sid, usage) for sid, usage in sessions if belongs(usage, job_id)]
    out: dict[str, Any] = {"job_id": job_id, "n": len(rows)}
    if any(row["array_task_id"] is not None for row in rows):
        out["kind"] = "array"
        out["rows"] = sorted(rows, key=_task_key)
    elif len({row["node"] for row in rows}) > 1:
        nodes = _node_rows(rows)
        out["kind"] = "nodes"
        out["rows"] = nodes
        out["n_nodes"] = len(nodes)
        out["total"] = {
            "peak_ram_bytes": sum(node["peak_ram_bytes"] for node in nodes),
            "peak_gpu_ram_bytes": sum(node["peak_gpu_ram_bytes"] for node in nodes),
            "wall_s": max(node["wall_s"] for node in nodes),
            "cpu_seconds": sum(node["cpu_seconds"] for node in nodes),
        }
        out["slowest_node"] = max(nodes, key=lambda node: node["wall_s"])["node"]
    else:
        out["kind"] = "single"
        out["rows"] = rows
    out["stats"] = stats(out["rows"])
    out["failures"] = failures(rows)
    return out


def _cells(row: dict[str, Any], first: str) -> list[str]:
    code = row["exit_code"]
    return [
        escape_controls(str(row[first] if row[first] is not None else "-")),
        human_bytes(row["peak_ram_bytes"]),
        human_bytes(row["peak_gpu_ram_bytes"]),
        human_seconds(row["wall_s"]),
        f"{row['cpu_seconds']:.1f}",
        "" if code is None else str(code),
    ]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for table_row in rows:
        cells = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(table_row, widths, strict=True))
        ]
        out.append("  ".join(cells))
    return out


def job_text(view: dict[str, Any]) -> list[str]:
    kind = view["kind"]
    first = {"array": "array_task_id", "nodes": "node"}.get(kind, "session_id")
    head = {"array": "task", "nodes": "node"}.get(kind, "session")
    count = view["n_nodes"] if kind == "nodes" else view["n"]
    title = {"array": "array task", "nodes": "node", "single": "session"}[kind] + ("s" if count != 1 else "")
    lines = [f"SLURM job {escape_controls(view['job_id'])}: {count} {title}"]
    rows = [[head, "peak RAM", "peak GPU", "wall", "CPU s", "exit"], *(_cells(row, first) for row in view["rows"])]
    if kind == "nodes":
        rows.append(_cells({**view["total"], "node": "total", "exit_code": None}, "node"))
    lines += _table(rows)
    st = view["stats"]
    lines.append("")
    for key, label, fmt in (
        ("peak_ram_bytes", "peak RAM", human_bytes),
        ("peak_gpu_ram_bytes", "peak GPU", human_bytes),
        ("wall_s", "wall", human_seconds),
        ("cpu_seconds", "CPU s", lambda value: f"{value:.1f}"),
    ):
        spread = st[key]
        lines.append(f"{label:<10} p50 {fmt(spread['p50'])}, p95 {fmt(spread['p95'])}, max {fmt(spread['max'])}")
    if kind == "nodes":
        lines.append(f"slowest node: {escape_controls(view['slowest_node'])}")
    fails = view["failures"]
    lines.append(
        "failures: " + (", ".join(f"{count} × exit {code}" for code, count in fails.items()) if fails else "none")
    )
    return lines
