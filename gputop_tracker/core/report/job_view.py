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


def belongs(u: dict[str, Any], job_id: str) -> bool:
    """Whether report `u` ran in job `job_id` (its own id, or the array's)."""
    j = u.get("slurm") or {}
    return job_id in (j.get("job_id"), j.get("array_job_id"))


def _row(sid: str, u: dict[str, Any]) -> dict[str, Any]:
    j = u.get("slurm") or {}
    return {
        "session_id": sid,
        "job_id": j.get("job_id"),
        "array_task_id": j.get("array_task_id"),
        "step_id": j.get("step_id"),
        "node": j.get("node") or u.get("host"),
        "node_id": j.get("node_id"),
        "peak_ram_bytes": u["max_ram"]["combined"]["total_rss"],
        "peak_gpu_ram_bytes": u["max_gpu_ram"]["combined"],
        "wall_s": u["compute_time"]["time"],
        "cpu_seconds": u["cpu_time"]["total"],
        "exit_code": u.get("exit_code"),
        "status": u.get("status"),
    }


def stats(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """n, p50, p95 and max of each figure over the rows."""
    out = {}
    for k in FIGURES:
        xs = [float(r[k]) for r in rows if r[k] is not None]
        out[k] = {
            "p50": percentile(xs, 50) if xs else 0.0,
            "p95": percentile(xs, 95) if xs else 0.0,
            "max": max(xs, default=0.0),
        }
    return out


def failures(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Failed tasks by exit code (a code != 0; a signal shows as its 128+N)."""
    out: dict[str, int] = {}
    for r in rows:
        code = r["exit_code"]
        if code:
            out[str(code)] = out.get(str(code), 0) + 1
    return dict(sorted(out.items()))


def _task_key(r: dict[str, Any]) -> tuple[int, str]:
    t = r["array_task_id"] or ""
    return (int(t), "") if t.isdigit() else (1 << 62, t)


def _node_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per node: its sessions folded (peaks: max; wall and CPU: sum)."""
    by_node: dict[str, dict[str, Any]] = {}
    for r in rows:
        n = by_node.get(r["node"])
        if n is None:
            by_node[r["node"]] = {**r, "sessions": [r["session_id"]]}
            continue
        n["sessions"].append(r["session_id"])
        n["peak_ram_bytes"] = max(n["peak_ram_bytes"], r["peak_ram_bytes"])
        n["peak_gpu_ram_bytes"] = max(n["peak_gpu_ram_bytes"], r["peak_gpu_ram_bytes"])
        n["wall_s"] += r["wall_s"]
        n["cpu_seconds"] += r["cpu_seconds"]
        n["exit_code"] = n["exit_code"] or r["exit_code"]
    return sorted(by_node.values(), key=lambda n: (n["node_id"] is None, n["node_id"] or 0, n["node"]))


def job_view(job_id: str, sessions: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The job's view: `kind` array (one row per task), nodes (one row per node, `total`, `slowest_node`)
    or single; with `n`, `stats` and `failures` in every case."""
    rows = [_row(sid, u) for sid, u in sessions if belongs(u, job_id)]
    out: dict[str, Any] = {"job_id": job_id, "n": len(rows)}
    if any(r["array_task_id"] is not None for r in rows):
        out["kind"] = "array"
        out["rows"] = sorted(rows, key=_task_key)
    elif len({r["node"] for r in rows}) > 1:
        nodes = _node_rows(rows)
        out["kind"] = "nodes"
        out["rows"] = nodes
        out["n_nodes"] = len(nodes)
        out["total"] = {
            "peak_ram_bytes": sum(n["peak_ram_bytes"] for n in nodes),
            "peak_gpu_ram_bytes": sum(n["peak_gpu_ram_bytes"] for n in nodes),
            "wall_s": max(n["wall_s"] for n in nodes),
            "cpu_seconds": sum(n["cpu_seconds"] for n in nodes),
        }
        out["slowest_node"] = max(nodes, key=lambda n: n["wall_s"])["node"]
    else:
        out["kind"] = "single"
        out["rows"] = rows
    out["stats"] = stats(out["rows"])
    out["failures"] = failures(rows)
    return out


def _cells(r: dict[str, Any], first: str) -> list[str]:
    code = r["exit_code"]
    return [
        escape_controls(str(r[first] if r[first] is not None else "-")),
        human_bytes(r["peak_ram_bytes"]),
        human_bytes(r["peak_gpu_ram_bytes"]),
        human_seconds(r["wall_s"]),
        f"{r['cpu_seconds']:.1f}",
        "" if code is None else str(code),
    ]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        out.append("  ".join(cells))
    return out


def job_text(view: dict[str, Any]) -> list[str]:
    kind = view["kind"]
    first = {"array": "array_task_id", "nodes": "node"}.get(kind, "session_id")
    head = {"array": "task", "nodes": "node"}.get(kind, "session")
    n = view["n_nodes"] if kind == "nodes" else view["n"]
    title = {"array": "array task", "nodes": "node", "single": "session"}[kind] + ("s" if n != 1 else "")
    lines = [f"SLURM job {escape_controls(view['job_id'])}: {n} {title}"]
    rows = [[head, "peak RAM", "peak GPU", "wall", "CPU s", "exit"], *(_cells(r, first) for r in view["rows"])]
    if kind == "nodes":
        rows.append(_cells({**view["total"], "node": "total", "exit_code": None}, "node"))
    lines += _table(rows)
    st = view["stats"]
    lines.append("")
    for key, label, fmt in (
        ("peak_ram_bytes", "peak RAM", human_bytes),
        ("peak_gpu_ram_bytes", "peak GPU", human_bytes),
        ("wall_s", "wall", human_seconds),
        ("cpu_seconds", "CPU s", lambda v: f"{v:.1f}"),
    ):
        s = st[key]
        lines.append(f"{label:<10} p50 {fmt(s['p50'])}, p95 {fmt(s['p95'])}, max {fmt(s['max'])}")
    if kind == "nodes":
        lines.append(f"slowest node: {escape_controls(view['slowest_node'])}")
    fails = view["failures"]
    lines.append("failures: " + (", ".join(f"{k} × exit {c}" for c, k in fails.items()) if fails else "none"))
    return lines
