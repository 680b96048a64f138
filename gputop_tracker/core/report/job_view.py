"""Every session of one cluster job as one view (`sessions job JOBID`): the tasks of an array (n, p50, p95,
max of each figure, failures by exit code) or the nodes of a multi-node job (one row per node, totals across
nodes, the slowest node). Pure functions on (session id, report dict) pairs; the store is read elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
