"""What to ask the scheduler for next time: `#SBATCH` lines from the peaks of one or many sessions.

Pure functions on report dicts (`ResourceUsage.model_dump()` or `SummaryBuilder.summary()`), no I/O.

The formula (README, "Sizing advice"): for each resource the basis is the largest value over the sessions
(with the 95th percentile shown beside it when there are at least 5), then
  --mem            = peak combined RAM × (1 + headroom), rounded up: 256 MiB steps below 1 GiB, whole GiB up to
                     64 GiB, 4 GiB steps above
  --cpus-per-task  = ceil(CPU-seconds / wall time), the cores kept busy on average (at least 1; no headroom)
  --gres=gpu:N     = the most GPUs the tree held memory on; the GPU memory needed = peak tree GPU memory ×
                     (1 + headroom), with a MIG slice named when one would hold it
  --time           = longest wall time × (1 + headroom), rounded up: 5 min steps below 1 h, 30 min below 24 h,
                     whole hours above (at least 5 min)
A session that the kernel OOM-killed, or whose peak reached 95 % of the memory limit it ran under (the smaller of
--mem and the cgroup's own limit), needed at least that much: its peak is only a floor, so --mem is then at
least that limit × (1 + headroom), with a note naming those sessions.
Likewise a session that ran out of GPU memory (a CUDA out-of-memory error the probe recorded, or one in its output)
needed more than the GPU it had: the GPU memory needed is then at least that GPU's memory × (1 + headroom) —
never a smaller GPU, nor a MIG slice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gputop_tracker.core.model.units import human_bytes

DEFAULT_HEADROOM = 20.0  # percent
GIB = 2**30
MIB = 2**20
# MIG profiles of an 80 GB A100/H100: (name, memory); the smallest that holds the need is suggested
MIG_SLICES = (("1g.10gb", 10 * 10**9), ("2g.20gb", 20 * 10**9), ("3g.40gb", 40 * 10**9))


def round_mem(need: float) -> int:
    """Bytes rounded up to a size one types in --mem: 256 MiB steps below 1 GiB, GiB to 64 GiB, then 4 GiB."""
    step = 256 * MIB if need <= GIB else GIB if need <= 64 * GIB else 4 * GIB
    return max(step, math.ceil(need / step) * step)


def slurm_mem(nbytes: int) -> str:
    """Bytes as sbatch --mem writes them: '768M', '5G' (binary, as SLURM reads them)."""
    return f"{nbytes // GIB}G" if nbytes % GIB == 0 else f"{math.ceil(nbytes / MIB)}M"


def round_time(need: float) -> int:
    """Seconds rounded up: 5 min steps below 1 h, 30 min below 24 h, whole hours above; at least 5 min."""
    step = 300 if need < 3600 else 1800 if need < 86400 else 3600
    return max(300, math.ceil(need / step) * step)


def slurm_time(seconds: int) -> str:
    """Seconds as sbatch --time writes them: HH:MM:SS, or D-HH:MM:SS from a day on."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, sec = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{sec:02d}" if days else f"{hours:02d}:{minutes:02d}:{sec:02d}"


def cores_used(cpu_seconds: float, wall: float) -> int:
    """The cores kept busy on average, rounded up (3.02 counts as 3: a tenth of a core is noise)."""
    return max(1, math.ceil(round(cpu_seconds / max(wall, 1e-9), 1)))


def mig_hint(gpu_memory: float) -> str | None:
    for name, size in MIG_SLICES:
        if gpu_memory <= size:
            return f"a MIG slice would do ({name}: {size / 1e9:.0f} GB)"
    return None


def percentile(values: Sequence[float], percent: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return 0.0
    pos = (len(xs) - 1) * percent / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


# --------------------------------------------------------------------------- from sessions


def used_gpus(usage: dict[str, Any]) -> list[dict[str, Any]]:
    """The counted GPUs the tree was on: it held memory there, or NVML listed one of its processes with no
    memory figure (N/A: MIG, some containers), which still needs the GPU."""
    counted = [gpu for gpu in usage.get("gpus") or [] if gpu.get("counted", True)]
    return [gpu for gpu in counted if gpu.get("tree_used") or (gpu.get("tree_peak_memory") or 0) > 0]


def gpu_memory_unknown(usage: dict[str, Any]) -> bool:
    """A process of the tree had no GPU memory figure on a GPU it used: the session's GPU memory is a floor."""
    return any(gpu.get("tree_memory_unknown") for gpu in used_gpus(usage))


def _figures(usage: dict[str, Any]) -> dict[str, float]:
    wall = float(usage["compute_time"]["time"])
    return {
        "mem": float(usage["max_ram"]["combined"]["total_rss"]),
        "cores": float(usage["cpu_time"]["total"]) / max(wall, 1e-9),
        "gpus": float(len(used_gpus(usage))),
        "gpu_mem": float(usage["max_gpu_ram"]["combined"]),
        "wall": wall,
    }


LIMIT_REACHED = 0.95  # a peak at this fraction of the memory limit may have been held down by it


def memory_limit(requested: dict[str, Any]) -> tuple[int | None, str | None]:
    """What memory is a fraction of, and which: the request (--mem) or the job cgroup's limit, the smaller
    when both are known (the kernel enforces the cgroup's, whatever was asked)."""
    mem, cg = requested.get("mem_bytes"), requested.get("cgroup_mem_bytes")
    if cg and (not mem or cg < mem):
        return cg, "cgroup"
    return (mem, "request") if mem else (None, None)


def session_limit(usage: dict[str, Any]) -> float | None:
    """The memory limit the session ran under (`memory_limit` of its job's request), None without a job."""
    limit, _ = memory_limit((usage.get("slurm") or {}).get("requested") or {})
    return float(limit) if limit else None


def held_down(usage: dict[str, Any]) -> bool:
    """Whether the session's peak RAM is only a floor of its need: OOM-killed, or peaked at the limit."""
    if any(event.get("type") == "oom" and event.get("source") == "kernel" for event in usage.get("events") or []):
        return True  # the kernel's OOM killer; not a CUDA "out of memory" seen in the output (GPU memory)
    limit = session_limit(usage)
    return limit is not None and float(usage["max_ram"]["combined"]["total_rss"]) >= LIMIT_REACHED * limit


CUDA_OOM_TEXTS = ("CUDA out of memory", "CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


def gpu_oom_floor(usage: dict[str, Any]) -> float | None:
    """The GPU memory a session ran out of (its GPU's, a floor of its need; 0.0 when unknown), or None when it
    never ran out of GPU memory."""
    ooms = usage.get("gpu_ooms") or []
    seen = any(
        event.get("type") == "oom" and any(text in str(event.get("message")) for text in CUDA_OOM_TEXTS)
        for event in usage.get("events") or []
    )
    if not ooms and not seen:
        return None
    totals = [o.get("gpu_total") or o.get("device_total") or 0 for o in ooms]
    totals += [gpu.get("memory_total") or 0 for gpu in used_gpus(usage)]
    return float(max(totals, default=0))


def _basis(values: list[float], what: str, fmt: Any) -> str:
    text = f"max {what} {fmt(max(values))} over {len(values)} session{'s' if len(values) != 1 else ''}"
    if len(values) >= 5:
        text += f" (p95 {fmt(percentile(values, 95))})"
    return text


def advise(usages: Sequence[dict[str, Any]], headroom: float = DEFAULT_HEADROOM) -> dict[str, Any]:
    """The request to use next time, from report dicts in bytes and seconds (see the module's formula)."""
    from gputop_tracker.core.model.units import human_bytes, human_seconds

    if not usages:
        raise ValueError("no sessions to advise from")
    figs = [_figures(usage) for usage in usages]
    factor = 1.0 + headroom / 100.0
    col = {key: [fig[key] for fig in figs] for key in figs[0]}
    mem = round_mem(max(col["mem"]) * factor)
    cpus = max(cores_used(fig["cores"], 1.0) for fig in figs)
    gpus = int(max(col["gpus"]))
    gpu_mem = math.ceil(max(col["gpu_mem"]) * factor) if gpus else 0
    time_s = round_time(max(col["wall"]) * factor)
    basis = {
        "mem": _basis(col["mem"], "peak RAM", human_bytes) + f", +{headroom:g} % headroom",
        "cpus": _basis(col["cores"], "cores busy on average", lambda value: f"{value:.2f}"),
        "gpus": _basis(col["gpus"], "GPUs used", lambda value: f"{value:.0f}"),
        "gpu_memory": _basis(col["gpu_mem"], "GPU memory", human_bytes) + f", +{headroom:g} % headroom",
        "time": _basis(col["wall"], "wall time", human_seconds) + f", +{headroom:g} % headroom",
    }
    lines = [
        f"#SBATCH --mem={slurm_mem(mem)}",
        f"#SBATCH --cpus-per-task={cpus}",
        *([f"#SBATCH --gres=gpu:{gpus}"] if gpus else []),
        f"#SBATCH --time={slurm_time(time_s)}",
    ]
    notes = []
    if held := [usage for usage in usages if held_down(usage)]:
        limits = [lim for usage in held if (lim := session_limit(usage)) is not None]
        if limits:
            mem = max(mem, round_mem(max(limits) * factor))
            lines[0] = f"#SBATCH --mem={slurm_mem(mem)}"
            basis["mem"] += f"; at least the limit {human_bytes(max(limits))} reached, +{headroom:g} % headroom"
        notes.append(
            f"{len(held)} of {len(usages)} session{'s' if len(usages) != 1 else ''} hit the memory limit or "
            "were OOM-killed: their peak is a floor of what they needed, not their need"
            + (f"; --mem is at least their limit {human_bytes(max(limits))} + headroom" if limits else "")
        )
    floors = [floor for usage in usages if (floor := gpu_oom_floor(usage)) is not None]
    if floors:
        gpus = max(gpus, 1)
        gpu_mem = max(gpu_mem, math.ceil(max(floors) * factor))
        lines = [line for line in lines if not line.startswith("#SBATCH --gres")]
        lines.insert(2, f"#SBATCH --gres=gpu:{gpus}")
        basis["gpu_memory"] += f"; at least the {human_bytes(max(floors))} it ran out of, +{headroom:g} % headroom"
        notes.append(
            f"{len(floors)} of {len(usages)} session{'s' if len(usages) != 1 else ''} ran out of GPU memory (CUDA "
            f"out of memory): their GPU peak is a floor of the need; ask for a GPU with more than "
            f"{human_bytes(max(floors))}, never a smaller one (see the report's diagnosis: fragmentation or "
            "another process may be the cause instead)"
        )
    unknown = sum(1 for usage in usages if gpu_memory_unknown(usage)) if gpus else 0
    if unknown:
        basis["gpu_memory"] += "; a lower bound"
        notes.append(
            f"{unknown} of {len(usages)} session{'s' if len(usages) != 1 else ''} ran processes on a GPU whose "
            "memory NVML did not give (not available: MIG, some containers): the GPU memory figure is a floor "
            "of the need; size the GPU by what the job loads"
        )
    elif gpus == 1 and gpu_mem and not floors and (hint := mig_hint(gpu_mem)):
        notes.append(f"GPU memory needed {human_bytes(gpu_mem)}: {hint}")
    if not gpus:
        notes.append("no session used a GPU: request none")
    return {
        "mem_bytes": mem,
        "cpus": cpus,
        "gpus": gpus,
        "gpu_memory_bytes": gpu_mem,
        "time_s": time_s,
        "headroom_percent": headroom,
        "n_sessions": len(usages),
        "basis": basis,
        "sbatch": lines,
        "notes": notes,
    }


def advice_text(advice: dict[str, Any]) -> str:
    """The #SBATCH lines, each with its basis, then the GPU memory needed and the notes."""
    n_sessions = len(advice["sessions"])
    lines = [f"# from {n_sessions} session{'s' if n_sessions != 1 else ''} (headroom {advice['headroom_percent']:g} %)"]
    width = max(len(line) for line in advice["sbatch"])
    keys = ["mem", "cpus", *(["gpus"] if advice["gpus"] else []), "time"]
    lines += [f"{line:<{width}}  # {advice['basis'][key]}" for line, key in zip(advice["sbatch"], keys, strict=True)]
    if advice["gpus"]:
        lines.append(
            f"# GPU memory needed: {human_bytes(advice['gpu_memory_bytes'])} ({advice['basis']['gpu_memory']})"
        )
    lines += [f"# note: {note}" for note in advice["notes"]]
    return "\n".join(lines) + "\n"
