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


def _job_title(usage: ResourceUsage) -> str:
    slurm = usage.slurm
    assert slurm is not None
    if slurm.job_id is None:
        return "Request (--request)"
    parts = [f"job {slurm.job_id}"]
    if slurm.array_job_id:
        parts.append(f"array {slurm.array_job_id}_{slurm.array_task_id}")
    if slurm.step_id:
        parts.append(f"step {slurm.step_id}")
    where = f"node {slurm.node}"
    if slurm.num_nodes and slurm.num_nodes > 1:
        where += f" ({(slurm.node_id or 0) + 1} of {slurm.num_nodes})"
    return f"SLURM {', '.join(parts)}, {where}"


def _mem_of(usage: ResourceUsage) -> str:
    """The memory a job's memory fraction is of, and which limit it is."""
    assert usage.slurm is not None and usage.efficiency is not None
    requested = usage.slurm.requested
    if usage.efficiency.memory_basis == "cgroup":
        return f"{human_bytes(requested.cgroup_mem_bytes)} (cgroup limit)"
    return human_bytes(requested.mem_bytes)


def job_lines(usage: ResourceUsage) -> list[str]:
    """The job's section ([] outside a job): title, request, one bar per known fraction."""
    if usage.slurm is None:
        return []
    requested = usage.slurm.requested
    asked = [
        f"mem {human_bytes(requested.mem_bytes)}" if requested.mem_bytes else None,
        f"{requested.cpus} CPUs" if requested.cpus else None,
        f"{requested.gpus} GPUs" if requested.gpus else None,
        f"time {human_seconds(requested.time_limit_s)}" if requested.time_limit_s else None,
        f"cgroup limit {human_bytes(requested.cgroup_mem_bytes)}" if requested.cgroup_mem_bytes else None,
    ]
    lines = ["", _job_title(usage), f"  requested     {', '.join(item for item in asked if item) or 'unknown'}"]
    if requested.gpu_ids:
        lines.append(f"  job's GPUs    {', '.join(requested.gpu_uuids or requested.gpu_ids)}")
    efficiency = usage.efficiency
    if efficiency is None:
        return lines
    wall = usage.compute_time.time
    rows = [
        ("Memory", efficiency.memory, f"{human_bytes(usage.max_ram.combined.total_rss)} of {_mem_of(usage)}"),
        ("CPU", efficiency.cpu, f"{usage.cpu_time.total:.1f} CPU-s of {wall * (requested.cpus or 0):.1f}"),
        ("Time", efficiency.time, f"{human_seconds(wall)} of {human_seconds(requested.time_limit_s)}"),
        ("GPU memory", efficiency.gpu_memory, f"peak {human_bytes(usage.max_gpu_ram.combined)}"),
        ("GPU util", efficiency.gpu_utilization, "mean"),
    ]
    shown = [(name, fraction, what) for name, fraction, what in rows if fraction is not None]
    if shown:
        lines.append("  Overall utilization (of the request)")
        lines += [f"    {name:<11}{bar(fraction)}  {what}" for name, fraction, what in shown]
    return lines
