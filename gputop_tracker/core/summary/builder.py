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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop_tracker._version import SCHEMA_VERSION, __version__
from gputop_tracker.core.gpu import SAMPLE_FIELDS, GpuReading, TreePeaks, Window
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
from gputop_tracker.core.summary.gpupeaks import SAMPLED as GPU_SAMPLED
from gputop_tracker.core.summary.gpupeaks import GpuAccountingLog, accounting_note, accounting_state, tree_gpu_peaks
from gputop_tracker.core.summary.gpupeaks import process_peak as process_gpu_peak
from gputop_tracker.core.summary.peaks import Peak, TreeBounds, agree, combined_peak, reaped_process_peak
from gputop_tracker.core.summary.probe import (
    add_unseen,
    allocator_rows,
    allocator_summary,
    probe_notes,
    probe_of,
    probe_peak,
    probe_section,
    upper_bound,
)

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
# leak hint: RSS fitted against time by least squares over the process's samples (running sums only)
ATTACH_NOTE = (
    "attached to a running process: CPU time counts from the attach; a peak RSS (VmHWM) older than "
    "the attach is reported apart (peak_rss_before_attach), never as the peak while attached"
)
LEAK_MIN_SAMPLES = 10
LEAK_MIN_R2 = 0.9
LEAK_MIN_GROWTH = 32 * 1024 * 1024  # fitted growth over the run, bytes ...
LEAK_MIN_GROWTH_FRACTION = 0.10  # ... and at least this share of the first RSS seen


@dataclass
class Outcome:
    """How the run ended, told once by the sampler (`SummaryBuilder.finish`)."""

    status: str  # exited | killed | stopped | detached | running
    exit_code: int | None = None
    exit_signal: int | None = None
    cgroup_peak: int | None = None
    cgroup_source: str | None = None
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
        self.gpu_not_responding = False  # the GPU library stopped answering (a call past its deadline)
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
        self.reaped_maxrss: dict[int, int] = {}  # pid -> ru_maxrss (bytes) of children we reaped
        self.main_maxrss = 0  # main's ru_maxrss, once we reaped it, whatever image it counts
        self.main_had_children = False  # main's cminflt/cmajflt were > 0 at some sample
        self.vanished_by_others = 0  # processes reaped by someone else than us: their peaks are lower bounds
        self.unseen_reaped = 0  # children we reaped that no sample ever saw
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
        _exit_event(self.events, pid, p, exit_code, self.clock())
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
            _exit_event(self.events, pid, p, None, self.clock())

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
        gpu_by_pid = _gpu_memory_by_pid(gpus)
        if gpus:
            self.gpu_accounting.observe(gpus)
        out_procs: list[dict[str, Any]] | None = [] if want_sample else None
        self._gpu_sums = _gpu_sums_by_pid(gpus, gpu_by_pid)
        tree = self._add_processes(now, readings, gpu_by_pid, gpus, out_procs)
        self._tree_peaks = peaks = _watched_peaks(gpus, self.main_pid, self.procs)
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
            "tree": _tree_sample(tree, len(readings), self.ledger.total),
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
        sm_by_pid = _sm_by_pid(gpus) if out_procs is not None else {}
        gpu_sums = self._gpu_sums
        rec_procs: list[tuple[Any, ...]] | None = [] if self.recorder is not None else None
        live_user = live_system = d_cpu = 0.0
        d_pss = d_private = d_shared = d_max_rss = d_threads = d_gpu = 0
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
                out_procs.append(_process_sample(r, p, gmem, sm_by_pid.get(pid)))
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
                _note_tree_use(st, g, procs)
            if g.memory_used is not None and st.total:
                self.alerts.check_gpu(now, g.index, g.memory_used, st.total)
            if g.utilization_gpu is not None and st.counted:
                util_sum += g.utilization_gpu
            per_gpu.append((g, tree_mem))
            self._pending_gpus.append((g.index, g.memory_used, g.memory_total, g.utilization_gpu, tree_mem))
            if out_gpus is not None:
                out_gpus.append(_gpu_sample(g, st, tree_mem, tree_sm, self.simulated_gpus))
        if gpus:
            self.gpu_capacity = sum(st.total or 0 for st in self.gpus.values())
            self.maxima.update({"gpu_system": _system_gpu_memory(gpus)})
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
        return with_job(build_summary(self, details=details), job)


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


def process_peak(b: SummaryBuilder, p: ProcessStats) -> Peak:
    """One process's peak RSS and whether it is exact (rules in peaks.py)."""
    if p.hwm_at_attach is not None:
        return Peak(p.peak_rss, False, "sampled", p.peak_source)
    if (own := probe_peak(b, p)) is not None:
        return own
    if p.never_read and p.rusage_maxrss is not None:
        # never read: ru_maxrss is all we know; it covers its own waited children too
        label = "ru_maxrss (this process and the children it waited for; it lived between two samples)"
        return Peak(p.rusage_maxrss, False, "ru_maxrss", label)
    if p.reaped and p.rusage_maxrss is not None:
        is_main = p.pid == b.main_pid
        # main: never had a child; another child we reaped: never waited for one (its zombie's stat says)
        own_only = (not b.main_had_children and not _has_descendants(b)) if is_main else p.waited_for_children is False
        return reaped_process_peak(
            p.peak_rss, p.rusage_maxrss, floor=b.spawner_hwm if is_main else 0, own_only=own_only
        )
    if p.peak_source.startswith("VmHWM at its last sample"):
        return Peak(p.peak_rss, False, "sampled", "lower bound (VmHWM at its last sample)")
    return Peak(p.peak_rss, True, "VmHWM", "exact (VmHWM)")


def _has_descendants(b: SummaryBuilder) -> bool:
    return any(q.role == "descendant" for q in b.procs.values())


def _autoreapers(b: SummaryBuilder) -> str:
    """The tracked processes seen ignoring SIGCHLD, named ("" if none)."""
    pids = [p for p in b.procs.values() if p.autoreaps]
    named = [f"PID {p.pid} ({p.name})" for p in pids[:3]]
    return ", ".join(named) + (f" and {len(pids) - 3} more" if len(pids) > 3 else "")


def tree_bounds(b: SummaryBuilder, peaks: dict[int, Peak]) -> TreeBounds:
    singles = [pk.value for pk in peaks.values()]
    largest = max([*singles, *b.reaped_maxrss.values(), 0])
    exact = max([*(pk.value for pk in peaks.values() if pk.exact), *b.reaped_maxrss.values(), 0])
    seen_sum = sum(singles)
    why = ""
    upper: int | None = None
    if probe_of(b) is not None:
        upper, why = upper_bound(b, peaks)
        if upper is not None and (autoreapers := _autoreapers(b)):
            upper, why = None, f"{autoreapers} ignored SIGCHLD: children the kernel reaped for it may have gone unseen"
    elif b.vanished_by_others:
        why = f"processes reaped by their parents ({b.vanished_by_others}) have lower-bound peaks"
    elif autoreapers := _autoreapers(b):
        why = f"{autoreapers} ignored SIGCHLD: children the kernel reaped for it may have gone unseen"
    elif any(p.waited for p in b.procs.values()):
        why = "a tracked process reaped children no sample saw"
    elif b.unseen_reaped:
        why = f"processes lived and died between samples ({b.unseen_reaped})"
    elif any(not pk.exact for pk in peaks.values()):
        why = "some per-process peaks are lower bounds"
    return TreeBounds(
        largest_single=largest,
        sampled=b.maxima["combined_total"],
        seen_sum=seen_sum,
        upper=None if why else (max(upper or 0, seen_sum, largest) or None),
        upper_why=why,
        largest_exact=largest > 0 and agree(exact, largest),  # kernel counters round differently
        hidden=_hidden_peaks(b),
    )


def _hidden_peaks(b: SummaryBuilder) -> str:
    """Why a process's peak may reach no counter we read ("" if every one does). A child's ru_maxrss goes to
    its reaper's cmaxrss and, reaper by reaper, up to a wait4 of ours — unless the chain ends in a process
    still running (its cmaxrss is not in /proc) or the kernel reaped the child (SIGCHLD ignored)."""
    if autoreapers := _autoreapers(b):
        return f"{autoreapers} ignored SIGCHLD, so the peaks of its children reach no counter"
    for p in b.procs.values():
        if p.waited and not p.reaped and not p.exit_reported:
            return f"PID {p.pid} ({p.name}) reaped children and outlived tracking: their peaks reach no counter"
    return ""


# ------------------------------------------------------------------ the report


def build_summary(b: SummaryBuilder, *, details: bool = True) -> dict[str, Any]:
    """The report as a `models.ResourceUsage` dict (bytes and seconds).

    `details=False` leaves out the per-process list and the event timeline (empty lists): the live
    view's once-a-second progress needs only the run's figures, at a fraction of the size.
    """
    add_unseen(b, ProcessStats.unseen)
    b.credit_late_gpu_memory()  # a process that joined the tree after the last sample
    peaks = {pid: process_peak(b, p) for pid, p in b.procs.items()}
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
        "processes": _processes(b, peaks, leaks) if details else [],
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


def _max_ram(b: SummaryBuilder, peaks: dict[int, Peak], sources: dict[str, str]) -> dict[str, Any]:
    mx = b.maxima
    main = b.procs.get(b.main_pid)
    main_peak = peaks.get(b.main_pid)
    main_total = max(mx["main_rss"], main_peak.value if main_peak else 0)
    if main_peak is not None and main_peak.value >= mx["main_rss"] and main_peak.value:
        sources["max_ram.main.total_rss"] = main_peak.label
    else:
        sources["max_ram.main.total_rss"] = _unseen_main_label(b) if main is None else "sampled lower bound"
    desc = [pid for pid, p in b.procs.items() if p.role == "descendant"]
    desc_reaped = [m for pid, m in b.reaped_maxrss.items() if pid != b.main_pid]
    desc_single = max([*(peaks[pid].value for pid in desc), *desc_reaped, 0])
    desc_total = max(mx["descendants_total"], desc_single)
    sources["max_ram.descendants.total_rss"] = _descendants_label(b, desc, desc_reaped, main_total)
    bounds = tree_bounds(b, peaks)
    outcome = b.outcome
    combined = combined_peak(bounds, outcome.cgroup_peak, outcome.cgroup_source)
    sources["max_ram.combined.total_rss"] = combined.label
    peak = combined.value
    return {
        "unit": "bytes",
        "system_capacity": b.system_capacity,
        "system": mx["system"],
        "main": {"total_rss": main_total, "private_rss": mx["main_private"], "shared_rss": mx["main_shared"]},
        "descendants": {
            "total_rss": desc_total,
            "private_rss": mx["descendants_private"],
            "shared_rss": mx["descendants_shared"],
        },
        "combined": {
            "total_rss": peak,
            "private_rss": min(mx["combined_private"], peak),
            "shared_rss": min(mx["combined_shared"], peak),
        },
        "peak_source": combined.source,
        "combined_sampled": mx["combined_total"],
        "cgroup_peak": outcome.cgroup_peak,
        "combined_upper_bound": bounds.upper,
    }


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
    if autoreapers := _autoreapers(b):
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
    return bool(b.unseen_reaped or _autoreapers(b) or any(p.waited for p in b.procs.values()))


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
        "source": "lower bound" if _autoreapers(b) else ledger.source,
    }


def _note_tree_use(st: GpuStats, g: GpuReading, procs: Mapping[int, Any]) -> None:
    """Whether the tree was on this GPU at all: a process NVML lists with no memory figure (N/A: MIG, some
    containers) uses the GPU though its memory counts 0 (the GPU's tree figure is then a lower bound)."""
    if any(pid in procs for pid in g.processes):
        st.tree_used = True
    if any(pid in procs for pid in g.no_figure):
        st.tree_memory_unknown = True


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
    if autoreapers := _autoreapers(b):
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


def _processes(b: SummaryBuilder, peaks: dict[int, Peak], leaks: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


# --------------------------------------------------------------------------- per-sample helpers


def _exit_event(events: EventLog, pid: int, p: ProcessStats | None, code: int | None, now: float) -> None:
    """A process_exited event, once per process: exit code or signal where we reaped it, else just 'exited'."""
    if p is not None:
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


def _gpu_sample(g: GpuReading, st: GpuStats, tree_mem: int, tree_sm: float | None, simulated: bool) -> dict[str, Any]:
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


def _tree_sample(t: TreeFigures, n_processes: int, cpu_seconds: float) -> dict[str, Any]:
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


def _gpu_sums_by_pid(gpus: Sequence[GpuReading], by_pid: dict[int, dict[str, int]]) -> dict[int, int]:
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


def _gpu_memory_by_pid(gpus: Sequence[GpuReading]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for g in gpus:
        for pid, used in g.processes.items():
            out.setdefault(pid, {})[g.uuid] = used
    return out


def _system_gpu_memory(gpus: Sequence[GpuReading]) -> int:
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


def _watched_peaks(gpus: Sequence[GpuReading], main_pid: int, tree: dict[int, Any]) -> TreePeaks | None:
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


def _sm_by_pid(gpus: Sequence[GpuReading]) -> dict[int, float]:
    out: dict[int, float] = {}
    for g in gpus:
        for pid, util in g.process_sm_util.items():
            out[pid] = out.get(pid, 0.0) + util
    return out


def _process_sample(r: Reading, p: ProcessStats, gmem: dict[str, int] | None, sm: float | None) -> dict[str, Any]:
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
