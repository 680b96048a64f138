"""Where every figure of the report is summarised — the one place samples become a summary.

The sampler feeds `SummaryBuilder.add` with what it read each interval, `reaped` with what the kernel told
it when it reaped a child (exact rusage), `vanished` with processes that disappeared otherwise, and
`finish` once with how the run ended. `summary()` returns a plain dict in the shape of
`models.ResourceUsage`; readers validate it there. The figures live in small accumulators
(accumulators.py); the choice of a peak and its label are pure rules (peaks.py). Plain Python on purpose:
this runs every sample.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop_tracker.core.gpu import GpuReading, TreePeaks
from gputop_tracker.core.proc.procfs import Reading
from gputop_tracker.core.summary.accumulators import (
    AlertLevels,
    CpuLedger,
    EventSink,
    GpuStats,
    PercentStats,
    ProcessStats,
    TimelineRing,
    TreeMaxima,
)
from gputop_tracker.core.summary.efficiency import with_job
from gputop_tracker.core.summary.events import EventLog, FlightRecorder
from gputop_tracker.core.summary.gpulate import LateJoiners
from gputop_tracker.core.summary.gpuoom import GpuOomLog
from gputop_tracker.core.summary.gpupeaks import GpuAccountingLog
from gputop_tracker.core.summary.parts import SummaryPart
from gputop_tracker.core.summary.probe import ProbeStats
from gputop_tracker.core.summary.sampleparts import (
    exit_event,
    gpu_memory_by_pid,
    gpu_sample,
    gpu_sums_by_pid,
    note_tree_use,
    process_sample,
    sm_percent_by_pid,
    system_gpu_memory,
    tree_sample,
    watched_peaks,
)
from gputop_tracker.core.summary.sections import build_summary

TIMELINE_COLUMNS = [
    "elapsed",
    "combined_total",
    "combined_private",
    "combined_shared",
    "main_rss",
    "descendants_total",
    "cpu_percent",
    "main_cpu_percent",
    "cpu_seconds",
    "threads",
    "n_processes",
    "gpu_memory",
    "host_memory_used",
    "host_cpu_percent",
]
ATTACH_NOTE = (
    "attached to a running process: CPU time counts from the attach; a peak RSS (VmHWM) older than "
    "the attach is reported apart (peak_rss_before_attach), never as the peak while attached"
)


@dataclass
class Outcome:
    """How the run ended, told once by the sampler (`SummaryBuilder.finish`)."""

    status: str  # exited | killed | stopped | detached | running
    exit_code: int | None = None
    exit_signal: int | None = None
    cgroup_peak: int | None = None
    cgroup_source: str | None = None
    cgroup_cache: int | None = None  # page cache still charged to the job cgroup when tracking ended
    smaps_max_age: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class TreeFigures:
    """One sample's tree totals, as every view of the sample counts them."""

    main_rss: int = 0
    main_private: int = 0
    main_shared: int = 0
    main_cpu: float = 0.0
    main_threads: int = 0
    main_gpu: int = 0
    desc_pss: int = 0
    desc_private: int = 0
    desc_shared: int = 0
    desc_max_rss: int = 0
    desc_cpu: float = 0.0
    desc_threads: int = 0
    desc_gpu: int = 0
    pss: int = 0
    private: int = 0
    shared: int = 0
    max_rss: int = 0
    live_user: float = 0.0
    live_system: float = 0.0
    gpu_combined: int | None = None  # the GPU memory watcher's: main + descendants at one read

    @property
    def gpu(self) -> int:
        """The tree's GPU memory: main and descendants at one read."""
        return self.main_gpu + self.desc_gpu if self.gpu_combined is None else self.gpu_combined

    def add_main(self, main: Reading | None, gpu: int) -> None:
        """The whole tree = the descendants (summed in the loop) and the main process."""
        self.pss, self.private, self.shared, self.max_rss = (
            self.desc_pss,
            self.desc_private,
            self.desc_shared,
            self.desc_max_rss,
        )
        if main is None:
            return
        self.main_rss, self.main_private, self.main_shared = main.rss, main.private, main.shared
        self.main_cpu, self.main_threads, self.main_gpu = main.cpu_percent, main.threads, gpu
        self.pss += main.pss
        self.private += main.private
        self.shared += main.pss_shared
        self.max_rss = max(self.max_rss, main.rss)

    @property
    def desc_total(self) -> int:  # Σ PSS counts shared pages once; never less than the largest process
        return max(self.desc_pss, self.desc_max_rss)

    @property
    def total(self) -> int:
        return max(self.pss, self.max_rss)


class SummaryBuilder:
    def __init__(
        self,
        *,
        main_pid: int,
        command: Sequence[str],
        mode: str,
        interval: float,
        start_time: float,
        n_expected_cores: int | None = None,
        gpu_uuids: set[str] | None = None,
        gpu_selection_reason: str = "",
        simulated_gpus: bool = False,
        gpu_note: str | None = None,
        gpu_problems: set[str] | None = None,
        spawner_hwm: int = 0,
        mem_limit: int | None = None,
        mem_limit_source: str = "--mem-limit",
        warn_at: float = 80.0,
        critical_at: float = 95.0,
        recorder: FlightRecorder | None = None,
        event_sink: EventSink | None = None,
        clock: Callable[[], float] = time.time,
        parts: Sequence[SummaryPart] = (),
    ) -> None:
        self.main_pid = main_pid
        self.clock = clock  # when a reap or an end is told us (a fixed clock makes a scripted run replay exactly)
        self.command = list(command)
        self.mode = mode
        self.interval = interval
        self.start_time = start_time
        self.end_time = start_time
        self.host = socket.gethostname()
        self.system_core_count = os.cpu_count() or 1
        self.n_expected_cores = n_expected_cores or len(os.sched_getaffinity(0))
        self.gpu_uuids = gpu_uuids  # None = every GPU counts
        self.gpu_selection_reason = gpu_selection_reason
        self.simulated_gpus = simulated_gpus
        self.gpu_note = gpu_note
        self.gpu_problems = gpu_problems if gpu_problems is not None else set()  # the GPU backend's live set
        # exec() records the image it replaces in ru_maxrss: for the command we launched that is our own fork
        # copy, so main's ru_maxrss means something only above it
        self.spawner_hwm = spawner_hwm
        self.events = EventLog(start_time)
        self.events.sink = event_sink
        self.alerts = AlertLevels(
            self.events,
            mem_limit=mem_limit,
            mem_limit_source=mem_limit_source,
            warn_at=warn_at,
            critical_at=critical_at,
        )
        self.recorder = recorder
        self.n_samples = 0
        self.procs: dict[int, ProcessStats] = {}
        self.gpus: dict[int, GpuStats] = {}
        self.maxima = TreeMaxima()
        self.system_capacity = 0
        self.gpu_capacity = 0
        self.cpu = {k: PercentStats() for k in ("system", "main", "descendants", "combined")}
        self.gpu_util = PercentStats()
        self.gpu_accounting = GpuAccountingLog()  # the driver's exact peaks, where accounting is on
        self.ledger = CpuLedger()
        self._init_evidence()
        self.parts = list(parts)  # parts of the summary beside the builder's own (code blocks)
        self.gpu_not_responding = False  # the GPU library stopped answering (a call past its deadline)
        self.gpu_ooms = GpuOomLog()  # the probe's CUDA out-of-memory records (the Engine's GpuOomRecorder)
        self.outcome = Outcome(status="running")
        self.notes: list[str] = []
        self.timeline_data = TimelineRing(TIMELINE_COLUMNS)
        # this sample's rows for the flight recorder, written with the timeline row
        self._pending_record: list[tuple[Any, ...]] | None = None
        self._pending_gpus: list[tuple[Any, ...]] = []
        self._tree_peaks: TreePeaks | None = None  # this sample's, from the GPU memory watcher
        self._gpu_sums: dict[int, int] = {}  # this sample's: pid -> its GPU memory over its GPUs (at one read)
        self._late_gpu = LateJoiners()  # watcher reads of PIDs not yet known as the tree's
        #: how per-process GPU memory was read (the backend's label: the watcher's rate), for `sources`
        self.gpu_memory_source: Callable[[], str] | None = None

    def _init_evidence(self) -> None:
        """What the sources beside the samples told (the RAM figures' evidence: `figures.process_facts`)."""
        self.reaped_maxrss: dict[int, int] = {}  # pid -> ru_maxrss (bytes) of children we reaped
        self.main_maxrss = 0  # main's ru_maxrss, once we reaped it, whatever image it counts
        self.main_had_children = False  # main's cminflt/cmajflt were > 0 at some sample
        self.probe = ProbeStats(False)  # the in-process probe's exit reports (the relay binds its own)
        self.max_file_rss = 0  # the largest Σ over the tree of resident file pages one sample saw
        self.cleared_hwm: dict[int, int] = {}  # pid -> the largest VmHWM code blocks cleared (a part tells it)
        self.counters_doubted = ""  # why the processes' own counters cannot be ceilings ("" if they can)
        self.vanished_by_others = 0  # processes reaped by someone else than us: their peaks are lower bounds
        self.unseen_reaped = 0  # children we reaped that no sample ever saw

    # ------------------------------------------------------------------ what the sampler tells us

    def note(self, text: str) -> None:
        self.notes.append(text)

    def final_gpu_energy(self, energy_mj: dict[int, int]) -> None:
        """Each GPU's energy counter read once more at the end (mJ): energy is read seldom, the end counts."""
        for index, mj in energy_mj.items():
            st = self.gpus.get(index)
            if st is not None and st.energy_first is not None:
                st.add_energy(mj)

    def select_gpus(self, uuids: set[str] | None, reason: str) -> None:
        """Which GPUs count for utilization (again if the job sets its own CUDA_VISIBLE_DEVICES: sums restart)."""
        changed = self.gpus and uuids != self.gpu_uuids
        self.gpu_uuids, self.gpu_selection_reason = uuids, reason
        for st in self.gpus.values():
            g = st.first
            st.counted = g.mig_parent is None if uuids is None else g.uuid in uuids
        if changed:
            self.gpu_util = PercentStats()

    def finish(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.notes.extend(outcome.notes)

    def set_smaps_age(self, age: float | None) -> None:  # the oldest private/shared reading in use
        self.outcome.smaps_max_age = age

    def process_label(self, pid: int) -> tuple[str, int, list[str], str] | None:
        """(name, ppid, cmdline, role) of a process of the tree, or None if never seen."""
        p = self.procs.get(pid)
        return None if p is None else (p.name, p.ppid, p.cmdline, p.role)

    def last_recorded_processes(self) -> list[dict[str, Any]]:
        """The per-process rows of the flight recorder's last sample, with who each process is."""
        ring = self.recorder.ring if self.recorder is not None else None
        if not ring:
            return []
        out = []
        for row in ring[-1][3]:
            entry = dict(zip(FlightRecorder.PROC, row, strict=False))
            if (who := self.process_label(row[0])) is not None:
                entry.update(zip(("name", "ppid", "cmdline", "role"), who, strict=True))
            out.append(entry)
        return out

    def gpu_totals(self) -> dict[str, int | None]:
        return {str(i): st.total for i, st in self.gpus.items()}

    def reaped(
        self,
        pid: int,
        user: float,
        system: float,
        maxrss: int,
        exit_code: int | None,
        who: tuple[str, int, bool] | None = None,
    ) -> None:
        """A child reaped by us (wait4): its rusage is exact and includes its own reaped children.

        `who` = (name, ppid, had children) read from its zombie before the reap: a child no sample saw still
        gets its row, and whether the command ever waited for a child is known for sure."""
        self.ledger.reap(pid, user, system)
        if pid == self.main_pid and who is not None and who[2]:
            self.main_had_children = True  # its ru_maxrss also covers children: never its own peak alone
        p = self.procs.get(pid)
        if p is None and pid != self.main_pid:
            self.unseen_reaped += 1
            name, ppid = who[:2] if who else ("?", 0)
            p = self.procs[pid] = ProcessStats.unseen(pid, ppid, name, self.clock())
            self.events.add("process_started", p.first_seen, f"process {pid} ({name}) started", pid=pid, name=name)
            p.peak_rss = maxrss
        # no more than our own fork copy: says nothing about the command, so it bounds no process of the tree
        polluted = pid == self.main_pid and maxrss <= self.spawner_hwm
        self.reaped_maxrss[pid] = 0 if polluted else maxrss
        if pid == self.main_pid:
            self.main_maxrss = maxrss  # even when polluted: at least main's own peak (an upper bound of it)
        exit_event(self.events, pid, p, exit_code, self.clock())
        if p is not None:
            p.reaped = True
            p.rusage_maxrss = maxrss
            p.waited_for_children = who[2] if who is not None else None
            p.cpu_seconds = max(p.cpu_seconds, user + system - p.cpu_base)
            p.exit_code = exit_code

    def accounting_at_end(self, gpus: Sequence[GpuReading]) -> None:
        """The GPUs' accounting records read when tracking ended (NVML accounting; nothing where it is off)."""
        self.gpu_accounting.observe_end(gpus)

    def vanished(self, pids: Collection[int], alive: Collection[int]) -> None:
        """Processes that disappeared since the last sample without us reaping them (their parent did)."""
        if not pids:  # most samples: nothing to do (the sets below cost a few µs at each)
            return
        parent_of = {pid: p.ppid for pid in pids if (p := self.procs.get(pid)) is not None}
        self.ledger.vanish(pids, parent_of, alive, {pid for pid, p in self.procs.items() if p.autoreaps})
        for pid in pids:
            p = self.procs.get(pid)
            if p is not None and not p.reaped:
                self.vanished_by_others += 1
                if p.hwm_at_attach is None:
                    p.peak_source = "VmHWM at its last sample (a lower bound)"
            exit_event(self.events, pid, p, None, self.clock())

    def close(self, alive: Collection[int]) -> None:
        """Tracking ends: every process seen that is not alive now, and whose end we did not see (it died after
        the last sample, or its read failed then), ended unseen — one end event each, lower-bound peaks."""
        ended = [pid for pid, p in self.procs.items() if pid not in alive and not p.reaped and not p.exit_reported]
        if ended:
            self.vanished(ended, alive)

    # ------------------------------------------------------------------ one sample

    def add(
        self,
        now: float,
        readings: Sequence[Reading],
        gpus: Sequence[GpuReading],
        host: tuple[int, int, float],
        want_sample: bool = False,
    ) -> dict[str, Any] | None:
        """Fold one sample in; return it as a `models.Sample` dict when asked (for the live view)."""
        self.n_samples += 1
        self.end_time = now
        gpu_by_pid = gpu_memory_by_pid(gpus)
        if gpus:
            self.gpu_accounting.observe(gpus)
        out_procs: list[dict[str, Any]] | None = [] if want_sample else None
        self._gpu_sums = gpu_sums_by_pid(gpus, gpu_by_pid)
        tree = self._add_processes(now, readings, gpu_by_pid, gpus, out_procs)
        self._tree_peaks = peaks = watched_peaks(gpus, self.main_pid, self.procs)
        if peaks is not None:  # the highs of the reads since the last sample, each summed at one read
            tree.main_gpu, tree.desc_gpu, tree.gpu_combined = peaks.main, peaks.descendants, peaks.combined
            self.credit_late_gpu_memory()
            self._late_gpu.keep(next((g.window for g in gpus if g.window is not None), None), self.procs)
        mem_total, mem_used, host_cpu = host
        self._add_tree(now, tree, mem_total, mem_used, host_cpu)
        out_gpus: list[dict[str, Any]] | None = [] if want_sample else None
        gpu_memory_row = self._add_gpus(now, gpus, out_gpus)
        elapsed = now - self.start_time
        self._append_row(elapsed, tree, len(readings), mem_used, host_cpu, gpu_memory_row)
        for part in self.parts:
            part.sampled(readings, gpus)
        if not want_sample:
            return None
        return {
            "time": now,
            "elapsed": elapsed,
            "processes": out_procs,
            "gpus": out_gpus,
            "host": {
                "memory_total": mem_total,
                "memory_used": mem_used,
                "cpu_percent": host_cpu,
                "cpu_count": self.system_core_count,
            },
            "tree": tree_sample(tree, len(readings), self.ledger.total),
        }

    def _add_processes(
        self,
        now: float,
        readings: Sequence[Reading],
        gpu_by_pid: dict[int, dict[str, int]],
        gpus: Sequence[GpuReading],
        out_procs: list[dict[str, Any]] | None,
    ) -> TreeFigures:
        main_pid = self.main_pid
        procs = self.procs
        live = self.ledger.live
        attached_start = self.mode == "attach" and self.n_samples == 1
        sm_by_pid = sm_percent_by_pid(gpus) if out_procs is not None else {}
        gpu_sums = self._gpu_sums
        rec_procs: list[tuple[Any, ...]] | None = [] if self.recorder is not None else None
        live_user = live_system = d_cpu = 0.0
        d_pss = d_private = d_shared = d_max_rss = d_threads = d_gpu = file_rss = 0
        main: Reading | None = None
        main_gpu = 0
        events = self.events
        for r in readings:  # the hot loop: locals, and a method call only where something happens
            h = r.handle
            pid = h.pid
            p = procs.get(pid)
            if p is None:
                p = procs[pid] = self._new_process(r, pid == main_pid, now, attached_start)
            gmem = gpu_by_pid.get(pid) if gpu_by_pid else None
            gsum = gpu_sums.get(pid, 0) if gmem else 0
            p.update(r, now, gsum)
            file_rss += r.file_rss
            rss = r.rss
            if rss >= p.next_rss_event or gsum >= p.next_gpu_event:
                p.peak_events(events, now, rss, gsum)
            user, system = r.user_total, r.system_total
            live[pid] = (user, system)
            live_user += user
            live_system += system
            if rec_procs is not None:
                rec_procs.append((pid, rss, r.private, r.pss, p.peak_rss, round(r.cpu_percent, 1), r.threads, gsum))
            if pid == main_pid:
                main, main_gpu = r, gsum
                if r.child_faults:
                    self.main_had_children = True
            else:
                d_pss += r.pss
                d_private += r.private
                d_shared += r.pss_shared
                if rss > d_max_rss:
                    d_max_rss = rss
                d_cpu += r.cpu_percent
                d_threads += r.threads
                d_gpu += gsum
            if out_procs is not None:
                out_procs.append(process_sample(r, p, gmem, sm_by_pid.get(pid)))
        t = TreeFigures(
            desc_pss=d_pss,
            desc_private=d_private,
            desc_shared=d_shared,
            desc_max_rss=d_max_rss,
            desc_cpu=d_cpu,
            desc_threads=d_threads,
            desc_gpu=d_gpu,
            live_user=live_user,
            live_system=live_system,
        )
        t.add_main(main, main_gpu)
        self.max_file_rss = max(self.max_file_rss, file_rss)
        if attached_start:
            self.ledger.start_attached(t.live_user, t.live_system)
            self.notes.append(ATTACH_NOTE)
        self.ledger.close_sample(t.live_user, t.live_system)
        self._pending_record = rec_procs
        return t

    def _new_process(self, r: Reading, is_main: bool, now: float, attached_start: bool) -> ProcessStats:
        h = r.handle
        self.events.add(
            "process_started", now, f"process {h.pid} ({h.name}) started", pid=h.pid, name=h.name, ppid=h.ppid
        )
        return ProcessStats(r, "main" if is_main else "descendant", now, attached=attached_start)

    def _add_tree(self, now: float, t: TreeFigures, mem_total: int, mem_used: int, host_cpu: float) -> None:
        desc_total, total = t.desc_total, t.total
        self.maxima.update(
            {
                "main_rss": t.main_rss,
                "main_private": t.main_private,
                "main_shared": t.main_shared,
                "descendants_total": desc_total,
                "descendants_private": t.desc_private,
                "descendants_shared": t.desc_shared,
                "combined_total": total,
                "combined_private": t.private,
                "combined_shared": t.shared,
                "main_threads": t.main_threads,
                "descendants_threads": t.desc_threads,
                "combined_threads": t.main_threads + t.desc_threads,
                "gpu_main": t.main_gpu,
                "gpu_descendants": t.desc_gpu,
                "gpu_combined": t.gpu,
                "system": mem_used,
            }
        )
        self.system_capacity = mem_total
        self.alerts.check_tree(now, total, t.gpu, mem_total)
        self.cpu["main"].add(t.main_cpu)
        self.cpu["descendants"].add(t.desc_cpu)
        self.cpu["combined"].add(t.main_cpu + t.desc_cpu)
        self.cpu["system"].add(host_cpu * self.system_core_count)

    def credit_late_gpu_memory(self) -> None:
        """Processes that joined the tree after the watcher saw them on a GPU (a child that lived between two
        samples): their reads are summed again, so their memory counts in the tree's peaks and their own."""
        late = self._late_gpu.joined(self.main_pid, self.procs)
        if late is None:
            return
        peaks, own = late
        self.maxima.update(
            {"gpu_main": peaks.main, "gpu_descendants": peaks.descendants, "gpu_combined": peaks.combined}
        )
        for index, used in peaks.per_device.items():
            st = self.gpus.get(index)
            if st is not None and used > st.tree_peak:
                st.tree_peak = used
                st.tree_used = True
        for pid, used in own.items():
            p = self.procs.get(pid)
            if p is not None and used > p.peak_gpu:
                p.peak_gpu = used

    def _add_gpus(
        self, now: float, gpus: Sequence[GpuReading], out_gpus: list[dict[str, Any]] | None
    ) -> list[tuple[GpuReading, int]]:
        procs = self.procs
        peaks = self._tree_peaks
        util_sum = 0.0
        per_gpu: list[tuple[GpuReading, int]] = []
        self._pending_gpus = []
        for g in gpus:
            st = self.gpus.get(g.index)
            if st is None:
                # by default every physical GPU counts; a MIG device only when chosen by its UUID
                counted = g.mig_parent is None if self.gpu_uuids is None else g.uuid in self.gpu_uuids
                st = self.gpus[g.index] = GpuStats(g, counted)
                self.timeline_data.add_columns([f"gpu{g.index}_memory", f"gpu{g.index}_util"])
            if g.lost and not st.lost:
                self.events.add(
                    "gpu_lost",
                    now,
                    f"GPU {g.index} ({g.uuid}) was lost; its figures stop here",
                    resource=f"gpu{g.index}",
                )
            if peaks is not None and g.window is not None:
                tree_mem = peaks.per_device.get(g.index, 0)
            else:
                tree_mem = sum(used for pid, used in g.processes.items() if pid in procs)
            tree_sm = max((u for pid, u in g.process_sm_util.items() if pid in procs), default=None)
            st.update(g, tree_mem, tree_sm)
            if not st.tree_used or (g.no_figure and not st.tree_memory_unknown):
                note_tree_use(st, g, procs)
            if g.memory_used is not None and st.total:
                self.alerts.check_gpu(now, g.index, g.memory_used, st.total)
            if g.utilization_gpu is not None and st.counted:
                util_sum += g.utilization_gpu
            per_gpu.append((g, tree_mem))
            self._pending_gpus.append((g.index, g.memory_used, g.memory_total, g.utilization_gpu, tree_mem))
            if out_gpus is not None:
                out_gpus.append(gpu_sample(g, st, tree_mem, tree_sm, self.simulated_gpus))
        if gpus:
            self.gpu_capacity = sum(st.total or 0 for st in self.gpus.values())
            self.maxima.update({"gpu_system": system_gpu_memory(gpus)})
            self.gpu_util.add(util_sum)
        return per_gpu

    def _append_row(
        self,
        elapsed: float,
        t: TreeFigures,
        n_processes: int,
        mem_used: int,
        host_cpu: float,
        gpu_memory: list[tuple[GpuReading, int]],
    ) -> None:
        total, cpu = t.total, t.main_cpu + t.desc_cpu
        row: list[float | None] = [
            round(elapsed, 3),
            total,
            t.private,
            t.shared,
            t.main_rss,
            t.desc_total,
            round(cpu, 1),
            round(t.main_cpu, 1),
            round(self.ledger.total, 2),
            t.main_threads + t.desc_threads,
            n_processes,
            t.gpu,
            mem_used,
            round(host_cpu, 1),
        ]
        for g, tree_mem in gpu_memory:
            row.append(tree_mem)
            row.append(g.utilization_gpu)
        self.timeline_data.append(row)
        rec_procs = self._pending_record
        if self.recorder is not None and rec_procs and total > 0:  # not the empty read just after a death
            tree = (total, t.private, t.gpu, n_processes, round(cpu, 1))
            self.recorder.add((self.end_time, round(elapsed, 3), tree, rec_procs, self._pending_gpus))

    # ------------------------------------------------------------------ the report

    def timeline(self) -> dict[str, Any]:
        return self.timeline_data.as_dict()

    def summary(self, *, details: bool = True, job: dict[str, Any] | None = None) -> dict[str, Any]:
        """The report as a `models.ResourceUsage` dict (bytes and seconds); see `build_summary`."""
        for part in self.parts:
            part.before_report(self)
        out = with_job(build_summary(self, details=details), job)
        for part in self.parts:
            part.report(out)
        return out
