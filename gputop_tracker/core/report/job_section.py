"""The job section of the text report: which SLURM job, and bars of how much of its request was used
(like jobstats' "Overall Utilization")."""

from __future__ import annotations

from gputop_tracker.core.model.models import ResourceUsage
from gputop_tracker.core.model.units import human_bytes, human_seconds

BAR_WIDTH = 40


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """[|||||      12%]: the bar is capped at full, the figure is not."""
    filled = max(0, min(width, round(fraction * width)))
    label = f"{fraction:.0%}"
    body = ("|" * filled).ljust(width)
    return f"[{body[: width - len(label)]}{label}]" if filled < width - len(label) else f"[{body}] {label}"


def _job_title(u: ResourceUsage) -> str:
    j = u.slurm
    assert j is not None
    if j.job_id is None:
        return "Request (--request)"
    parts = [f"job {j.job_id}"]
    if j.array_job_id:
        parts.append(f"array {j.array_job_id}_{j.array_task_id}")
    if j.step_id:
        parts.append(f"step {j.step_id}")
    where = f"node {j.node}"
    if j.num_nodes and j.num_nodes > 1:
        where += f" ({(j.node_id or 0) + 1} of {j.num_nodes})"
    return f"SLURM {', '.join(parts)}, {where}"


def _mem_of(u: ResourceUsage) -> str:
    """The memory a job's memory fraction is of, and which limit it is."""
    assert u.slurm is not None and u.efficiency is not None
    r = u.slurm.requested
    if u.efficiency.memory_basis == "cgroup":
        return f"{human_bytes(r.cgroup_mem_bytes)} (cgroup limit)"
    return human_bytes(r.mem_bytes)


def job_lines(u: ResourceUsage) -> list[str]:
    """The job's section ([] outside a job): title, request, one bar per known fraction."""
    if u.slurm is None:
        return []
    r = u.slurm.requested
    asked = [
        f"mem {human_bytes(r.mem_bytes)}" if r.mem_bytes else None,
        f"{r.cpus} CPUs" if r.cpus else None,
        f"{r.gpus} GPUs" if r.gpus else None,
        f"time {human_seconds(r.time_limit_s)}" if r.time_limit_s else None,
        f"cgroup limit {human_bytes(r.cgroup_mem_bytes)}" if r.cgroup_mem_bytes else None,
    ]
    lines = ["", _job_title(u), f"  requested     {', '.join(a for a in asked if a) or 'unknown'}"]
    if r.gpu_ids:
        lines.append(f"  job's GPUs    {', '.join(r.gpu_uuids or r.gpu_ids)}")
    e = u.efficiency
    if e is None:
        return lines
    wall = u.compute_time.time
    rows = [
        ("Memory", e.memory, f"{human_bytes(u.max_ram.combined.total_rss)} of {_mem_of(u)}"),
        ("CPU", e.cpu, f"{u.cpu_time.total:.1f} CPU-s of {wall * (r.cpus or 0):.1f}"),
        ("Time", e.time, f"{human_seconds(wall)} of {human_seconds(r.time_limit_s)}"),
        ("GPU memory", e.gpu_memory, f"peak {human_bytes(u.max_gpu_ram.combined)}"),
        ("GPU util", e.gpu_utilization, "mean"),
    ]
    shown = [(name, f, what) for name, f, what in rows if f is not None]
    if shown:
        lines.append("  Overall utilization (of the request)")
        lines += [f"    {name:<11}{bar(f)}  {what}" for name, f, what in shown]
    return lines
