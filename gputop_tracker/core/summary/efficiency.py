"""How much of the job's request a session used: fractions and plain-word notes.

Pure functions on the report dict (bytes and seconds), so they run in the sampler (no pydantic) and in
tests alike. Each fraction is None when its request or its figure is unknown:
  memory           peak combined RAM / requested memory, or the job cgroup's limit when smaller (memory_basis)
  cpu              CPU-seconds / (wall time × requested CPUs)
  time             wall time / time limit
  gpu_memory       peak GPU memory of the tree / memory of the job's GPUs (requested.gpu_uuids, else counted)
  gpu_utilization  mean utilization of the job's GPUs (0–1)
"""

from __future__ import annotations

from typing import Any

from gputop_tracker.core.model.units import human_bytes, human_seconds
from gputop_tracker.core.report.advise import (
    DEFAULT_HEADROOM,
    cores_used,
    memory_limit,
    round_mem,
    round_time,
    slurm_mem,
    slurm_time,
)

IDLE = 0.25  # below: "mostly idle"
FULL = 0.90  # above: "close to its limit"
KEYS = ("memory", "cpu", "time", "gpu_memory", "gpu_utilization")


def _ratio(used: float | None, available: float | None) -> float | None:
    if used is None or not available:
        return None
    return used / available


def job_gpus(u: dict[str, Any], requested: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPUs the job was given (`requested.gpu_uuids`), else those counted for utilization."""
    gpus = u.get("gpus") or []
    uuids = requested.get("gpu_uuids")
    if uuids:
        return [g for g in gpus if g.get("uuid") in uuids]
    return [g for g in gpus if g.get("counted")]


def _gpu_fractions(u: dict[str, Any], requested: dict[str, Any]) -> tuple[float | None, float | None]:
    """(gpu_memory, gpu_utilization) over the job's GPUs. Over exactly the GPUs the report counts, the tree's
    peak is its peak of the sum over them; over another set, the sum of each GPU's peak (a bound: they may
    not peak together)."""
    chosen = job_gpus(u, requested)
    if not chosen:
        return None, None
    total = sum(g.get("memory_total") or 0 for g in chosen)
    counted = {g.get("uuid") for g in u.get("gpus") or [] if g.get("counted")}
    if {g.get("uuid") for g in chosen} == counted:
        used = u["max_gpu_ram"]["combined"]
        util = u["gpu_utilization"]["gpu_percentages"]["mean_hardware_percent"]
    else:
        used = sum(g.get("tree_peak_memory") or 0 for g in chosen)
        means = [g["mean_utilization"] for g in chosen if g.get("mean_utilization") is not None]
        util = sum(means) / len(means) if means else None
    return _ratio(used, total), (util / 100.0 if util is not None else None)


def fractions(u: dict[str, Any], requested: dict[str, Any]) -> dict[str, Any]:
    """The `efficiency` object of a report dict `u` against `requested` (the slurm object's request)."""
    wall = u["compute_time"]["time"]
    cpus = requested.get("cpus")
    mem, basis = memory_limit(requested)
    gpu_memory, gpu_util = _gpu_fractions(u, requested)
    return {
        "memory": _ratio(u["max_ram"]["combined"]["total_rss"], mem),
        "cpu": _ratio(u["cpu_time"]["total"], wall * cpus if cpus else None),
        "time": _ratio(wall, requested.get("time_limit_s")),
        "gpu_memory": gpu_memory,
        "gpu_utilization": gpu_util,
        "memory_basis": basis,
    }


def notes(u: dict[str, Any], requested: dict[str, Any], eff: dict[str, float | None]) -> list[str]:
    """Plain words where a resource was mostly idle (< 25 %) or close to its limit (> 90 %)."""
    out: list[str] = []
    factor = 1.0 + DEFAULT_HEADROOM / 100.0
    peak, wall = u["max_ram"]["combined"]["total_rss"], u["compute_time"]["time"]
    (mem, basis), cpus, limit = memory_limit(requested), requested.get("cpus"), requested.get("time_limit_s")
    if (f := eff["memory"]) is not None and mem:
        asked = "memory requested" if basis == "request" else "its cgroup's memory limit"
        used = f"this job used {f:.0%} of the {human_bytes(mem)} of {asked}"
        if f < IDLE:
            out.append(f"{used}: consider --mem={slurm_mem(round_mem(peak * factor))}")
        elif f > FULL:
            out.append(f"{used}: close to the limit (an OOM kill is near); ask for more next time")
    if (f := eff["cpu"]) is not None and f < IDLE and cpus and cpus > 1:
        n = cores_used(u["cpu_time"]["total"], wall)
        out.append(
            f"the {cpus} CPUs requested were mostly idle ({f:.0%} used): consider --cpus-per-task={min(n, cpus)}"
        )
    if (f := eff["time"]) is not None and limit:
        used = f"this job ran {f:.0%} of its {human_seconds(limit)} time limit"
        if f < IDLE:
            out.append(f"{used}: consider --time={slurm_time(round_time(wall * factor))} (a shorter job starts sooner)")
        elif f > FULL:
            out.append(f"{used}: close to the limit; ask for more time next time")
    out += _gpu_notes(u, requested, eff)
    return out


def _gpu_notes(u: dict[str, Any], requested: dict[str, Any], eff: dict[str, float | None]) -> list[str]:
    out = []
    gpus = requested.get("gpus") or 0
    if gpus and not u["max_gpu_ram"]["combined"] and not any(g.get("tree_used") for g in job_gpus(u, requested)):
        out.append(f"this job did not use the GPU{'s' if gpus > 1 else ''} it requested ({gpus}): request none")
        return out
    if (f := eff["gpu_utilization"]) is not None and f < IDLE and u["max_gpu_ram"]["combined"]:
        out.append(f"the GPUs were mostly idle (mean utilization {f:.0%})")
    if (f := eff["gpu_memory"]) is not None and f > FULL:
        out.append(f"GPU memory reached {f:.0%} of the GPUs' memory: close to a CUDA out-of-memory error")
    return out


def with_job(summary: dict[str, Any], job: dict[str, Any] | None) -> dict[str, Any]:
    """The report dict with its `slurm` object and `efficiency` fractions (None outside a job), notes added."""
    summary["slurm"] = job
    if job is None:
        summary["efficiency"] = None
        return summary
    requested = job.get("requested") or {}
    eff = fractions(summary, requested)
    summary["efficiency"] = eff
    summary["notes"] = [*summary["notes"], *notes(summary, requested, eff)]
    return summary
