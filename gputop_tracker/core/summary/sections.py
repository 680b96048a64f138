"""The report, section by section: what the builder gathered, as a `models.ResourceUsage` dict (`build_summary`).

Each section reads the builder's parts (processes, GPUs, CPU ledger, probe, events) and never changes what they
measured; which RAM figure is exact is `figures`/`evidence`'s alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputop_tracker._version import SCHEMA_VERSION, __version__
from gputop_tracker.core.summary import gpuoom
from gputop_tracker.core.summary.accumulators import (
    GpuStats,
    ProcessStats,
    megabytes,
    next_peak_step,
)
from gputop_tracker.core.summary.evidence import Figure
from gputop_tracker.core.summary.evidence import tree_figure as derive_tree
from gputop_tracker.core.summary.figures import (
    autoreaper_names,
    completeness,
    doubt_counters,
    process_figures,
    tree_facts,
)
from gputop_tracker.core.summary.gpupeaks import SAMPLED as GPU_SAMPLED
from gputop_tracker.core.summary.gpupeaks import accounting_note, accounting_state, tree_gpu_peaks
from gputop_tracker.core.summary.gpupeaks import process_peak as process_gpu_peak
from gputop_tracker.core.summary.probe import (
    add_reaped,
    add_unseen,
    allocator_rows,
    allocator_summary,
    probe_notes,
    probe_section,
)

# leak hint: RSS fitted against time by least squares over the process's samples (running sums only)
LEAK_MIN_SAMPLES = 10
LEAK_MIN_R2 = 0.9
LEAK_MIN_GROWTH = 32 * 1024 * 1024  # fitted growth over the run, bytes ...
LEAK_MIN_GROWTH_FRACTION = 0.10  # ... and at least this share of the first RSS seen

if TYPE_CHECKING:
    from gputop_tracker.core.summary.builder import SummaryBuilder


# --------------------------------------------------------------------------- the report, section by section


def leak_suspects(b: SummaryBuilder) -> list[dict[str, Any]]:
    out = []
    for p in b.procs.values():
        trend = p.trend
        fit = trend.fit()
        if fit is None or trend.n < LEAK_MIN_SAMPLES:
            continue
        slope, r2 = fit
        growth = slope * (trend.last_time - trend.start)
        if r2 > LEAK_MIN_R2 and growth >= max(LEAK_MIN_GROWTH, LEAK_MIN_GROWTH_FRACTION * trend.first_rss):
            out.append(
                {
                    "pid": p.pid,
                    "name": p.name,
                    "slope_bytes_per_s": slope,
                    "r2": r2,
                    "n_samples": trend.n,
                    "growth_bytes": growth,
                }
            )
    return out


# ------------------------------------------------------------------ the report


def build_summary(b: SummaryBuilder, *, details: bool = True) -> dict[str, Any]:
    """The report as a `models.ResourceUsage` dict (bytes and seconds).

    `details=False` leaves out the per-process list and the event timeline (empty lists): the live
    view's once-a-second progress needs only the run's figures, at a fraction of the size.
    """
    add_unseen(b, ProcessStats.unseen)
    add_reaped(b, ProcessStats.unseen)
    b.credit_late_gpu_memory()  # a process that joined the tree after the last sample
    peaks = process_figures(b)
    peaks = doubt_counters(b, peaks)
    if details:
        _final_peak_events(b, peaks)
    sources: dict[str, str] = {}
    notes = list(b.notes)
    probe = probe_section(b)
    notes += probe_notes(probe)
    max_ram = _max_ram(b, peaks, sources)
    gpus = _gpu_summaries(b, notes)
    max_gpu_ram = _max_gpu_ram(b, sources, notes)
    leaks = leak_suspects(b)
    notes += _notes(b, leaks)
    counted = [st for st in b.gpus.values() if st.counted]
    energy = [e for st in counted if (e := st.energy_measured_j) is not None]
    notes += _gpu_gaps(counted)
    wall = max(b.end_time - b.start_time, 1e-9)
    out = _sources(b, sources)
    processes = _processes(b, peaks, leaks) if details else []
    if b.gpu_ooms.dropped or b.gpu_ooms.bad:
        notes.append(gpuoom.log_note(b.gpu_ooms))
    return {
        "max_ram": max_ram,
        "max_gpu_ram": max_gpu_ram,
        "cpu_utilization": _cpu_utilization(b),
        "gpu_utilization": {
            "system_gpu_count": len(b.gpus),
            "n_expected_gpus": len(counted),
            "gpu_percentages": b.gpu_util.as_dict(len(counted)),
        },
        "compute_time": {"unit": "seconds", "time": wall},
        "cpu_time": _cpu_time(b, wall),
        "peak_threads": b.maxima["combined_threads"],
        "gpus": gpus,
        "gpu_note": b.gpu_note,
        "gpu_not_responding": b.gpu_not_responding,
        "gpu_energy_j": sum(energy) if energy else None,
        "gpu_energy_wh": sum(energy) / 3600.0 if energy else None,
        "processes": processes,
        # the live view's once-a-second progress leaves them out, as it does the events (they come as events)
        "gpu_ooms": gpuoom.section(b.gpu_ooms, processes) if details else [],
        "probe": probe,
        "events": list(b.events.events) if details else [],
        "leak_suspects": leaks,
        "alerts": b.alerts.as_dict(b.system_capacity, b.events.dropped),
        "sources": out,
        "notes": notes,
        **_run_facts(b),
    }


def _gpu_gaps(counted: list[GpuStats]) -> list[str]:
    """Notes for counted GPUs whose figures the totals cannot hold: no energy measured (the energy total is then a
    lower bound), no utilization ever (a MIG instance, or not supported: the sums count 0% for it)."""
    notes = []
    missing = [str(st.first.index) for st in counted if st.energy_measured_j is None]
    if missing and len(missing) < len(counted):
        notes.append(
            f"gpu_energy_j leaves out GPU {', '.join(missing)} (no energy counter, or lost before its second "
            "reading): it is a lower bound"
        )
    silent = [str(st.first.index) for st in counted if not st.util.n and not st.lost]  # lost: its own note
    if silent:
        notes.append(
            f"GPU utilization: NVML gives none for counted GPU {', '.join(silent)} (a MIG instance, or not "
            "supported): gpu_utilization counts 0% for it, so it is not what that GPU did"
        )
    return notes


def _unseen_main_label(b: SummaryBuilder) -> str:
    """Main ended before any sample read it: nothing of its own was measured; its ru_maxrss still bounds it
    from above (that figure also counts the image exec replaced, so it says nothing more)."""
    label = "lower bound (not seen: the command exited before the first sample"
    maxrss = b.main_maxrss
    if maxrss:
        label += f"; at most {maxrss} bytes, its ru_maxrss, which also counts the image exec replaced"
    return label + ")"


def _max_ram(b: SummaryBuilder, peaks: dict[int, Figure], sources: dict[str, str]) -> dict[str, Any]:
    mx = b.maxima
    main = b.procs.get(b.main_pid)
    main_peak = peaks.get(b.main_pid)
    main_total = max(mx["main_rss"], main_peak.value if main_peak else 0)
    main_bounds: dict[str, int | None] = {"lower": main_total or None, "upper": None}
    if main_peak is not None and main_peak.value >= mx["main_rss"] and main_peak.value:
        sources["max_ram.main.total_rss"] = main_peak.label
        main_bounds = main_peak.as_dict()
    else:
        sources["max_ram.main.total_rss"] = _unseen_main_label(b) if main is None else "sampled lower bound"
    desc = [pid for pid, p in b.procs.items() if p.role == "descendant"]
    desc_reaped = [m for pid, m in b.reaped_maxrss.items() if pid != b.main_pid]
    desc_total = max(mx["descendants_total"], *((peaks[pid].lower or 0) for pid in desc), 0)
    sources["max_ram.descendants.total_rss"] = _descendants_label(b, desc, desc_reaped, main_total)
    facts = tree_facts(b, peaks, completeness(b, peaks))
    combined = derive_tree(facts)
    sources["max_ram.combined.total_rss"] = combined.label
    peak = combined.value
    return {
        "unit": "bytes",
        "system_capacity": b.system_capacity,
        "system": mx["system"],
        "main": {
            "total_rss": main_total,
            "private_rss": mx["main_private"],
            "shared_rss": mx["main_shared"],
            **main_bounds,
        },
        "descendants": {
            "total_rss": desc_total,
            "private_rss": mx["descendants_private"],
            "shared_rss": mx["descendants_shared"],
            "lower": desc_total or None,
            "upper": None,
        },
        "combined": {
            "total_rss": peak,
            "private_rss": min(mx["combined_private"], peak),
            "shared_rss": min(mx["combined_shared"], peak),
            **combined.as_dict(),
        },
        "peak_source": combined.source,
        "combined_sampled": mx["combined_total"],
        "cgroup_peak": b.outcome.cgroup_peak,
        "combined_upper_bound": facts.together,
    }


def _final_peak_events(b: SummaryBuilder, peaks: dict[int, Figure]) -> None:
    """A last `peak` event for each process whose figure (an exit report, a reap record) is above the last one the
    samples reported: the timeline's peaks end where the report's do."""
    last: dict[int, float] = {}
    for e in b.events.events:
        if e.get("type") == "peak" and e.get("resource") == "ram" and e.get("pid") is not None:
            last[e["pid"]] = max(last.get(e["pid"], 0), e.get("value") or 0)
    for pid, fig in peaks.items():
        p = b.procs[pid]
        value = fig.lower or 0
        if not value or value <= last.get(pid, 0):
            continue
        when = p.ended if p.ended is not None else b.end_time
        kind = "exact" if fig.exact else "at least"
        ev = b.events.add(
            "peak",
            when,
            f"process {pid} ({p.name}) RSS peak {megabytes(value)} ({kind}, {fig.source})",
            pid=pid,
            name=p.name,
            resource="ram",
            value=value,
        )
        if ev is not None:  # in its place on the timeline (before the run's `stop`), not after it
            events = b.events.events
            events.pop()
            at = len(events)
            while at and events[at - 1]["time"] > when:
                at -= 1
            events.insert(at, ev)
        p.next_rss_event = next_peak_step(value)


def _descendants_label(b: SummaryBuilder, desc: list[int], desc_reaped: list[int], main_total: int) -> str:
    if not desc and not desc_reaped and not b.main_had_children:
        return "no descendants"
    label = "sampled lower bound (largest of Σ PSS per sample and each descendant's own peak)"
    main_rusage = b.reaped_maxrss.get(b.main_pid, 0)
    if b.main_had_children and main_rusage > main_total:
        # ru_maxrss of main covers the children it waited for: one of them, or main after its last sample,
        # held that much — which one, the kernel does not say
        label += (
            f"; a child the command waited for may have reached {main_rusage} bytes (the command's ru_maxrss, "
            "which covers it and the children it waited for)"
        )
    return label


def _sources(b: SummaryBuilder, sources: dict[str, str]) -> dict[str, str]:
    for k in ("private_rss", "shared_rss"):
        sources[f"max_ram.*.{k}"] = (
            "sampled lower bound (smaps_rollup USS/PSS, with growth between reads counted only where it is "
            "surely private, and every decrease applied)"
        )
    sources["max_ram.system"] = "sampled (MemTotal - MemAvailable)"
    label = _with_rate(b, GPU_SAMPLED)
    sources["max_gpu_ram"] = label
    if b.gpus:
        sources["gpus.*.tree_peak_memory"] = label
    sources["cpu_utilization"] = "sampled percentages per interval"
    if autoreapers := autoreaper_names(b):
        sources["cpu_time"] = (
            f"lower bound: {autoreapers} ignored SIGCHLD, so the kernel reaped its children itself and their "
            "CPU time reached no parent's cutime; each counts only up to the last sample that saw it"
        )
    elif b.ledger.source == "exact":
        sources["cpu_time"] = "exact (rusage of reaped children + utime/stime/cutime/cstime of live processes)"
    else:
        sources["cpu_time"] = "kernel counters of live processes (/proc stat), read each sample"
    sources["peak_threads"] = "sampled"
    return sources


def _max_gpu_ram(b: SummaryBuilder, sources: dict[str, str], notes: list[str]) -> dict[str, Any]:
    """The tree's GPU memory peaks: sampled, or the driver's own where accounting is on (each labelled)."""
    mx = b.maxima
    log = b.gpu_accounting
    desc = [pid for pid, p in b.procs.items() if p.role == "descendant"]
    sampled = (mx["gpu_main"], mx["gpu_descendants"], mx["gpu_combined"])
    peaks = tree_gpu_peaks(log, b.main_pid, desc, sampled, complete=not _gpu_unseen_possible(b))
    for key, fig in (("main", peaks.main), ("descendants", peaks.descendants), ("combined", peaks.combined)):
        sources[f"max_gpu_ram.{key}"] = _with_rate(b, fig.label)
    if peaks.combined.value and (line := accounting_note(log)):
        notes.append(line)
    return {
        "unit": "bytes",
        "system_capacity": b.gpu_capacity,
        "system": mx["gpu_system"],
        "main": peaks.main.value,
        "descendants": peaks.descendants.value,
        "combined": peaks.combined.value,
        "accounting": accounting_state(log),
        "allocator": allocator_summary(b),
    }


def _gpu_unseen_possible(b: SummaryBuilder) -> bool:
    """Whether a process of the tree may have lived and died unseen (its GPU records then reach no known PID)."""
    return bool(b.unseen_reaped or autoreaper_names(b) or any(p.waited for p in b.procs.values()))


def _cpu_utilization(b: SummaryBuilder) -> dict[str, Any]:
    mx, cores = b.maxima, b.n_expected_cores
    return {
        "system_core_count": b.system_core_count,
        "n_expected_cores": cores,
        "system": b.cpu["system"].as_dict(b.system_core_count),
        "main": b.cpu["main"].as_dict(cores),
        "descendants": b.cpu["descendants"].as_dict(cores),
        "combined": b.cpu["combined"].as_dict(cores),
        "main_n_threads": mx["main_threads"],
        "descendants_n_threads": mx["descendants_threads"],
        "combined_n_threads": mx["combined_threads"],
    }


def _cpu_time(b: SummaryBuilder, wall: float) -> dict[str, Any]:
    ledger = b.ledger
    return {
        "unit": "seconds",
        "user": ledger.user,
        "system": ledger.system,
        "total": ledger.total,
        "mean_percent": 100.0 * ledger.total / wall,
        "source": "lower bound" if autoreaper_names(b) else ledger.source,
    }


def _gpu_summaries(b: SummaryBuilder, notes: list[str]) -> list[dict[str, Any]]:
    gpus = []
    for idx, st in sorted(b.gpus.items()):
        g = st.first
        gpus.append(
            {
                "index": idx,
                "uuid": g.uuid,
                "name": g.name,
                "memory_total": st.total,
                "peak_memory_used": st.peak_used,
                "tree_peak_memory": st.tree_peak,
                "tree_used": st.tree_used,
                "tree_memory_unknown": st.tree_memory_unknown,
                "mean_utilization": st.util.mean,
                "max_utilization": st.util.max if st.util.n else None,
                "counted": st.counted,
                "simulated": b.simulated_gpus,
                "lost": st.lost,
                "pci_bus_id": g.pci_bus_id,
                "mig_parent": g.mig_parent,
                "vendor": g.vendor,
                "gpu_instance_id": g.gpu_instance_id,
                "compute_instance_id": g.compute_instance_id,
                "mean_power_w": st.power.mean,
                "max_power_w": st.power.max if st.power.n else None,
                "max_temperature_c": st.max_temp,
                "energy_j": st.energy_measured_j,
                "tree_peak_sm_utilization": st.tree_sm_peak,
                "peak_unattributed_memory": st.peak_unattributed,
                "accounting": b.gpu_accounting.modes.get(idx),
                **{f"mean_{k}": pct.mean for k, pct in st.gpm.items()},
                **{f"max_{k}": pct.max for k, pct in st.gpm.items()},
            }
        )
        if st.lost:
            notes.append(f"GPU {idx} ({g.uuid}) was lost during the run; its figures stop there")
        if st.peak_unattributed:
            notes.append(
                f"GPU {idx}: up to {st.peak_unattributed} bytes of GPU memory belong to processes whose "
                "host PIDs could not be mapped into this PID namespace (container); they are unattributed, "
                "not counted in max_gpu_ram, and may belong to the tracked tree"
            )
    return gpus


def _notes(b: SummaryBuilder, leaks: list[dict[str, Any]]) -> list[str]:
    notes = [
        f"possible leak: process {lk['pid']} ({lk['name']}) RSS grew steadily by "
        f"{lk['slope_bytes_per_s'] / 1e6:.1f} MB/s (R² {lk['r2']:.2f}, {lk['n_samples']} samples)"
        for lk in leaks
    ]
    for p in b.procs.values():
        if p.peak_before_attach is not None:
            notes.append(
                f"process {p.pid} ({p.name}) had a peak RSS of {p.peak_before_attach} bytes before the attach "
                "(VmHWM then above its RSS); its peak here is what was seen while attached"
            )
    if autoreapers := autoreaper_names(b):
        notes.append(
            f"{autoreapers} ignored SIGCHLD: the kernel reaped its children itself, so their CPU time reached "
            "no parent (getrusage and /usr/bin/time miss it too); CPU time is a lower bound"
        )
    if b.events.dropped:
        notes.append(f"{b.events.dropped} process/peak events not kept (more than the cap per session)")
    notes += sorted(b.gpu_problems)
    if b.gpus and b.gpu_selection_reason:
        counted = ", ".join(str(i) for i, st in sorted(b.gpus.items()) if st.counted) or "none"
        notes.append(f"GPUs counted for utilization: {counted} ({b.gpu_selection_reason})")
    return notes


def _processes(b: SummaryBuilder, peaks: dict[int, Figure], leaks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    leak_pids = {lk["pid"] for lk in leaks}
    out = []
    for p in sorted(b.procs.values(), key=lambda p: p.first_seen):
        fit = p.trend.fit() if p.trend.n >= LEAK_MIN_SAMPLES else None
        peak = peaks[p.pid]
        out.append(
            {
                "pid": p.pid,
                "ppid": p.ppid,
                "name": p.name,
                "cmdline": p.cmdline,
                "role": p.role,
                "first_seen": p.first_seen,
                "last_seen": p.last_seen,
                "peak_rss": peak.value,
                "peak_rss_source": peak.label,
                "peak_rss_exact": peak.exact,
                "peak_rss_lower": peak.lower,
                "peak_rss_upper": peak.upper,
                "peak_rss_before_attach": p.peak_before_attach,
                "peak_private": p.peak_private,
                "peak_pss": p.peak_pss,
                "peak_threads": p.peak_threads,
                "cpu_seconds": p.cpu_seconds,
                "max_cpu_percent": p.max_cpu,
                **_process_gpu_peak(b, p.pid, p.peak_gpu),
                "exit_code": p.exit_code,
                "rss_slope": fit[0] if fit else None,
                "rss_r2": fit[1] if fit else None,
                "leak_suspected": p.pid in leak_pids,
                "gpu_allocator": allocator_rows(b, p.pid),
            }
        )
    return out


def _process_gpu_peak(b: SummaryBuilder, pid: int, sampled: int) -> dict[str, Any]:
    fig = process_gpu_peak(b.gpu_accounting, pid, sampled)
    return {"peak_gpu_memory": fig.value, "peak_gpu_memory_source": _with_rate(b, fig.label) if fig.value else None}


def _with_rate(b: SummaryBuilder, label: str) -> str:
    """A sampled GPU memory label with how the samples were read (the GPU memory watcher's rate, where it ran)."""
    if b.gpu_memory_source is None or not label.startswith(GPU_SAMPLED):
        return label
    return b.gpu_memory_source() + label[len(GPU_SAMPLED) :]


def _run_facts(b: SummaryBuilder) -> dict[str, Any]:
    o = b.outcome
    return {
        "command": b.command,
        "mode": b.mode,
        "pid": b.main_pid,
        "exit_code": o.exit_code,
        "exit_signal": o.exit_signal,
        "status": o.status,
        "start_time": b.start_time,
        "end_time": b.end_time,
        "host": b.host,
        "interval": b.interval,
        "n_samples": b.n_samples,
        "n_processes": len(b.procs),
        "smaps_max_age": o.smaps_max_age,
        "tool_version": __version__,
        "schema_version": SCHEMA_VERSION,
    }
