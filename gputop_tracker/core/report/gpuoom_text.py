"""The report's "GPU out of memory" section: each CUDA out-of-memory error of a tracked process, the allocator's
state at that moment beside NVML's figures (this process = reserved + beyond the allocator; the other processes
on that GPU), at the process's GPU peak too, the diagnosis, and the files kept (the dump bundle, the allocator
history memory_viz opens)."""

from __future__ import annotations

from collections.abc import Callable

from gputop_tracker.core.model.models import GpuOom
from gputop_tracker.core.model.text import escape_controls
from gputop_tracker.core.model.units import human_seconds

SHOWN = 10  # records shown in full; the rest are counted (every one is in the JSON and `sessions events`)
VIEWER = "https://pytorch.org/memory_viz"

Size = Callable[[float | None], str]


def gpu_oom_lines(ooms: list[GpuOom], size: Size) -> list[str]:
    if not ooms:
        return []
    n = len(ooms)
    out = ["", f"GPU out of memory ({n} error{'s' if n != 1 else ''}; `gputop-track sessions events ID -t gpu_oom`)"]
    for rec in ooms[:SHOWN]:
        out += _record(rec, size)
    if n > SHOWN:
        out.append(f"  … and {n - SHOWN} more (`gputop-track sessions export ID`)")
    return out


def _record(r: GpuOom, size: Size) -> list[str]:
    gpu = f", GPU {r.gpu_index} ({escape_controls(r.gpu_name or '?')})" if r.gpu_index is not None else ""
    total = f" of {size(r.device_total)}" if r.device_total is not None else ""
    head = (
        f"  +{human_seconds(r.elapsed)}  PID {r.pid} ({escape_controls(r.name or '?')}) {r.framework} "
        f"{escape_controls(r.device)}{gpu}: tried to allocate {size(r.request)}, {size(r.device_free)} free{total}"
    )
    lines = [head, *_allocator(r, size), *_driver(r, size)]
    lines.append(f"    {'diagnosis':<11}{escape_controls(r.diagnosis_text)}")
    kept = [f"state {r.state_file}" if r.state_file else None, _history(r)]
    if any(kept):
        lines.append(f"    {'kept':<11}" + "; ".join(escape_controls(k) for k in kept if k))
    return lines


def _allocator(r: GpuOom, size: Size) -> list[str]:
    first = (
        f"allocated {size(r.allocated)}, reserved {size(r.reserved)} ({size(r.reserved_unallocated)} reserved but "
        f"unallocated), active {size(r.active)}"
    )
    n = r.segments if r.segments is not None else "?"
    second = f"segments {n}, largest free block {size(r.largest_free_block)}"
    if freeing := [s for s in r.segment_list if s.free > 0]:
        groups: dict[tuple[float, float], int] = {}
        for seg in freeing:  # the same segment size and free space: once, counted
            groups[(seg.size, seg.free)] = groups.get((seg.size, seg.free), 0) + 1
        top = ", ".join(
            f"{size(total)} ({size(free)} free){f' ×{n}' if n > 1 else ''}"
            for (total, free), n in list(groups.items())[:3]
        )
        second += f"; most free: {top}"
    if r.num_ooms is not None:
        second += f"; num_ooms {r.num_ooms}"
    if r.allocator_limit is not None:
        second += f"; capped at {size(r.allocator_limit)} (set_per_process_memory_fraction)"
    return [f"    {'allocator':<11}{first}", f"    {'':<11}{second}"]


def _driver(r: GpuOom, size: Size) -> list[str]:
    if r.nvml_process is None:
        why = "no NVML figure for this process" if r.gpu_index is not None else "no NVIDIA GPU matched (NVML)"
        return [f"    {'driver':<11}{why}"]
    age = f", read {r.nvml_age * 1000:.0f} ms from the OOM" if r.nvml_age else ""
    out = [
        f"    {'driver':<11}NVML: this process {size(r.nvml_process)} = reserved {size(r.reserved)} + "
        f"{size(r.beyond_allocator)} beyond the allocator (CUDA context, libraries, other allocators){age}"
    ]
    if r.other_processes:
        shown = ", ".join(
            f"PID {o.pid} ({escape_controls(o.name or '?')}{', this job' if o.tracked else ''}) {size(o.memory)}"
            for o in r.other_processes[:5]
        )
        out.append(f"    {'':<11}other processes on GPU {r.gpu_index}: {shown}")
    else:
        out.append(f"    {'':<11}no other process on GPU {r.gpu_index}")
    if r.at_peak is not None:
        p = r.at_peak
        beyond = f"{size(p.beyond)} beyond" if p.beyond >= 0 else "NVML's sampled peak below it (missed between reads)"
        out.append(f"    {'at peak':<11}NVML {size(p.nvml_peak)} = reserved peak {size(p.reserved_peak)} + {beyond}")
    return out


def _history(r: GpuOom) -> str | None:
    if r.snapshot:
        return f"allocator history {r.snapshot} (open it at {VIEWER})"
    return r.snapshot_note
