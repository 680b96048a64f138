"""What one sample adds, row by row: the per-process, per-GPU and tree rows a `Sample` streams, GPU memory by
process, and the process-exit events. Pure helpers of the builder's hot path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gputop_tracker.core.gpu import SAMPLE_FIELDS, GpuReading, TreePeaks, Window
from gputop_tracker.core.proc.procfs import Reading
from gputop_tracker.core.summary.accumulators import (
    GpuStats,
    ProcessStats,
)
from gputop_tracker.core.summary.events import EventLog

if TYPE_CHECKING:
    from gputop_tracker.core.summary.builder import TreeFigures


def note_tree_use(st: GpuStats, g: GpuReading, procs: Mapping[int, Any]) -> None:
    """Whether the tree was on this GPU at all: a process NVML lists with no memory figure (N/A: MIG, some
    containers) uses the GPU though its memory counts 0 (the GPU's tree figure is then a lower bound)."""
    if any(pid in procs for pid in g.processes):
        st.tree_used = True
    if any(pid in procs for pid in g.no_figure):
        st.tree_memory_unknown = True


def exit_event(events: EventLog, pid: int, p: ProcessStats | None, code: int | None, now: float) -> None:
    """A process_exited event, once per process: exit code or signal where we reaped it, else just 'exited'."""
    if p is not None:
        if p.ended is None:
            p.ended = now
        if p.exit_reported:
            return
        p.exit_reported = True
    elif not code:
        return  # a short child that exited cleanly before any sample: not worth a line
    name = p.name if p is not None else "?"
    sig = -code if code is not None and code < 0 else None
    if code is None:
        msg = f"process {pid} ({name}) exited"
    elif sig is not None:
        msg = f"process {pid} ({name}) killed by signal {sig}"
    else:
        msg = f"process {pid} ({name}) exited with code {code}"
    events.add(
        "process_exited",
        now,
        msg,
        pid=pid,
        name=name,
        exit_code=code if code is not None and code >= 0 else None,
        signal=sig,
    )


def gpu_sample(g: GpuReading, st: GpuStats, tree_mem: int, tree_sm: float | None, simulated: bool) -> dict[str, Any]:
    """One GPU as `models.GpuSample`: the reading's own fields (one list, gpu.SAMPLE_FIELDS) and ours."""
    out = {name: getattr(g, name) for name in SAMPLE_FIELDS}
    out.update(
        tree_memory=tree_mem,
        counted=st.counted,
        simulated=simulated,
        energy_j=st.energy_j,
        tree_sm_util=tree_sm,
    )
    return out


def tree_sample(t: TreeFigures, n_processes: int, cpu_seconds: float) -> dict[str, Any]:
    return {
        "main_rss": t.main_rss,
        "main_private": t.main_private,
        "main_shared": t.main_shared,
        "descendants_total": t.desc_total,
        "descendants_private": t.desc_private,
        "combined_total": t.total,
        "combined_private": t.private,
        "combined_shared": t.shared,
        "cpu_percent": t.main_cpu + t.desc_cpu,
        "main_cpu_percent": t.main_cpu,
        "cpu_seconds": cpu_seconds,
        "threads": t.main_threads + t.desc_threads,
        "gpu_memory": t.gpu,
        "n_processes": n_processes,
    }


def gpu_sums_by_pid(gpus: Sequence[GpuReading], by_pid: dict[int, dict[str, int]]) -> dict[int, int]:
    """Each process's GPU memory over its GPUs: on the GPUs the watcher reads, the highest sum at one of its reads
    (never per-GPU highs of different moments added up), plus what the other GPUs held at the sample."""
    window = next((g.window for g in gpus if g.window is not None), None)
    if window is None:
        return {pid: sum(on.values()) for pid, on in by_pid.items()}
    watched = {g.index for g in gpus if g.window is not None}
    out = window.process_peaks(watched)
    for g in gpus:
        if g.window is None:
            for pid, used in g.processes.items():
                out[pid] = out.get(pid, 0) + used
    return out


def gpu_memory_by_pid(gpus: Sequence[GpuReading]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for g in gpus:
        for pid, used in g.processes.items():
            out.setdefault(pid, {})[g.uuid] = used
    return out


def system_gpu_memory(gpus: Sequence[GpuReading]) -> int:
    """Memory used of every physical GPU (a MIG device's is its parent's): the GPUs the watcher reads summed at one
    of its reads, never per-GPU highs of different moments added up; the others as the sample read them."""
    used = 0
    window: Window | None = None
    for g in gpus:
        if g.window is not None and g.window.used_sum_max is not None:
            window = g.window
        elif g.memory_used is not None and g.mig_parent is None:
            used += g.memory_used
    if window is not None and window.used_sum_max is not None:
        used += window.used_sum_max
    return used


def watched_peaks(gpus: Sequence[GpuReading], main_pid: int, tree: dict[int, Any]) -> TreePeaks | None:
    """The tree's GPU memory highs over the watcher's reads since the last sample (None: no watcher); devices it
    does not read add what they held at the sample."""
    window = None
    extra: dict[int, int] = {}
    watched: set[int] = set()
    for g in gpus:
        if g.window is not None:
            window = g.window
            watched.add(g.index)
        else:
            for pid, used in g.processes.items():
                extra[pid] = extra.get(pid, 0) + used
    return window.tree_peaks(main_pid, tree, extra, watched) if window is not None else None


def sm_percent_by_pid(gpus: Sequence[GpuReading]) -> dict[int, float]:
    out: dict[int, float] = {}
    for g in gpus:
        for pid, util in g.process_sm_util.items():
            out[pid] = out.get(pid, 0.0) + util
    return out


def process_sample(r: Reading, p: ProcessStats, gmem: dict[str, int] | None, sm: float | None) -> dict[str, Any]:
    h = r.handle
    return {
        "pid": h.pid,
        "ppid": h.ppid,
        "name": h.name,
        "cmdline": h.cmdline,
        "role": p.role,
        "rss": r.rss,
        "private": r.private,
        "shared": r.shared,
        "pss": r.pss,
        "peak_rss": p.peak_rss,
        "cpu_seconds": r.utime_stime - p.cpu_base,
        "cpu_percent": r.cpu_percent,
        "threads": r.threads,
        "gpu_memory": gmem or {},
        "gpu_sm_percent": sm,
        "mem_bound": r.bound,
    }
