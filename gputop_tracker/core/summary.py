"""Where every figure of the report is summarised — the one place samples become a summary.

The sampler feeds `SummaryBuilder.add` with what it read each interval and `reaped` with what the kernel
told it when a child was reaped (exact rusage). `summary()` returns a plain dict in the shape of
`models.ResourceUsage`; readers validate it there. Plain Python on purpose: this runs every sample.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from gputop_tracker._version import SCHEMA_VERSION, __version__
from gputop_tracker.core.events import PEAK_STEP_BYTES, PEAK_STEP_FRACTION, EventLog, FlightRecorder, LevelWatch
from gputop_tracker.core.gpu import GpuReading
from gputop_tracker.core.procfs import Reading

TIMELINE_CAP = 14_400  # rows; past it, neighbouring rows merge (24 h at 1 s stays ~3 MB)

BASE_COLUMNS = [
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
# columns averaged when rows merge; every other column keeps its maximum (peaks survive downsampling)
MEAN_COLUMNS_SUFFIX = ("cpu_percent", "_util")
# leak hint: RSS fitted against time by least squares over the process's samples (running sums only)
LEAK_MIN_SAMPLES = 10
LEAK_MIN_R2 = 0.9
LEAK_MIN_GROWTH = 32 * 1024 * 1024  # fitted growth over the run, bytes ...
LEAK_MIN_GROWTH_FRACTION = 0.10  # ... and at least this share of the first RSS seen


def _next_peak_step(reported: int) -> int:
    return reported + max(PEAK_STEP_BYTES, int(reported * PEAK_STEP_FRACTION))


def _mb(v: float) -> str:
    return f"{v / 1e6:.0f} MB"


class _Proc:
    __slots__ = (
        "cmdline",
        "cpu_seconds",
        "ev_exited",
        "ev_gpu",
        "ev_rss",
        "exit_code",
        "first_seen",
        "last_seen",
        "lk_n",
        "lk_st",
        "lk_stt",
        "lk_sty",
        "lk_sy",
        "lk_syy",
        "lk_t0",
        "lk_tlast",
        "lk_y0",
        "max_cpu",
        "name",
        "peak_gpu",
        "peak_private",
        "peak_pss",
        "peak_rss",
        "peak_source",
        "peak_threads",
        "pid",
        "ppid",
        "role",
    )

    def __init__(self, r: Reading, role: str, now: float) -> None:
        h = r.handle
        self.pid = h.pid
        self.ppid = h.ppid
        self.name = h.name
        self.cmdline = h.cmdline
        self.role = role
        self.first_seen = now
        self.last_seen = now
        self.peak_rss = 0
        self.peak_source = "VmHWM"
        self.peak_private = 0
        self.peak_pss = 0
        self.peak_threads = 0
        self.cpu_seconds = 0.0
        self.max_cpu = 0.0
        self.peak_gpu = 0
        self.exit_code: int | None = None
        self.ev_rss = PEAK_STEP_BYTES  # next RSS / GPU memory that makes a new-peak event
        self.ev_gpu = PEAK_STEP_BYTES
        self.ev_exited = False
        # least-squares sums of (t - t0, rss - y0); shifted so float64 keeps its precision
        self.lk_n = 0
        self.lk_t0 = now
        self.lk_y0 = 0
        self.lk_tlast = now
        self.lk_st = self.lk_sy = self.lk_stt = self.lk_sty = self.lk_syy = 0.0

    def leak_fit(self) -> tuple[float, float] | None:
        """(slope of RSS in bytes/s, R²) over this process's samples, or None with too few or no spread."""
        n = self.lk_n
        if n < 3:
            return None
        sxx = n * self.lk_stt - self.lk_st * self.lk_st
        syy = n * self.lk_syy - self.lk_sy * self.lk_sy
        sxy = n * self.lk_sty - self.lk_st * self.lk_sy
        if sxx <= 0:
            return None
        slope = sxy / sxx
        r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
        return slope, min(1.0, r2)


class _Pct:
    """max and mean of a percentage series."""

    __slots__ = ("max", "n", "sum")

    def __init__(self) -> None:
        self.max = 0.0
        self.sum = 0.0
        self.n = 0

    def add(self, v: float) -> None:
        self.max = max(self.max, v)
        self.sum += v
        self.n += 1

    def as_dict(self, cores: int) -> dict[str, float]:
        mean = self.sum / self.n if self.n else 0.0
        cores = max(cores, 1)
        return {
            "max_sum_percent": self.max,
            "max_hardware_percent": self.max / cores,
            "mean_sum_percent": mean,
            "mean_hardware_percent": mean / cores,
        }


class _Gpu:
    __slots__ = (
        "counted",
        "energy_first",
        "energy_last",
        "extra",
        "g",
        "lost",
        "max_temp",
        "name",
        "peak_unattributed",
        "peak_used",
        "power",
        "total",
        "tree_peak",
        "tree_sm_peak",
        "util",
        "uuid",
    )

    def __init__(self, g: GpuReading, counted: bool) -> None:
        self.g = g  # the first reading: static facts (bus id, MIG ids)
        self.uuid = g.uuid
        self.name = g.name
        self.total = g.memory_total
        self.counted = counted
        self.peak_used: int | None = None
        self.tree_peak = 0
        self.util = _Pct()
        self.power = _Pct()
        self.max_temp: float | None = None
        self.lost = False
        self.energy_first: int | None = None
        self.energy_last: int | None = None
        self.tree_sm_peak: float | None = None
        self.peak_unattributed: int | None = None
        # GPM metrics: present only where the GPU has GPM (absent, not zero, elsewhere)
        self.extra: dict[str, _Pct] = {}


GPM_FIELDS = ("sm_activity", "sm_occupancy", "tensor_activity", "dram_bandwidth")


def _energy_j(st: _Gpu) -> float | None:
    """Energy the GPU used between the first and the last reading (NVML counts mJ since driver load)."""
    if st.energy_first is None or st.energy_last is None:
        return None
    return (st.energy_last - st.energy_first) / 1000.0


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
    ) -> None:
        self.main_pid = main_pid
        self.command = list(command)
        self.mode = mode
        self.interval = interval
        self.start_time = start_time
        self.end_time = start_time
        self.system_core_count = os.cpu_count() or 1
        self.n_expected_cores = n_expected_cores or len(os.sched_getaffinity(0))
        self.gpu_uuids = gpu_uuids  # None = every GPU counts
        self.gpu_selection_reason = gpu_selection_reason
        self.simulated_gpus = simulated_gpus
        self.gpu_note = gpu_note
        # alerts and the event timeline (issue 7)
        self.events = EventLog(start_time)
        self.mem_limit: int | None = None  # RAM limit for alerts; None = the system's RAM
        self.mem_limit_source = "system RAM"
        self.warn_at = 80.0
        self.critical_at = 95.0
        self.ram_watch: LevelWatch | None = None
        self.gpu_watch: dict[int, LevelWatch] = {}
        self.ev_tree_rss = PEAK_STEP_BYTES
        self.ev_tree_gpu = PEAK_STEP_BYTES
        self.recorder: FlightRecorder | None = None
        self.last_ram_percent: float | None = None
        self.gpu_problems: set[str] = set()  # the backend's live set of notes (GpuBackend.problems)
        self.host = socket.gethostname()
        self.n_samples = 0
        self.procs: dict[int, _Proc] = {}
        self.gpus: dict[int, _Gpu] = {}
        # sampled maxima (bytes)
        self.max = dict.fromkeys(
            (
                "main_rss",
                "main_private",
                "main_shared",
                "desc_total",
                "desc_private",
                "desc_shared",
                "comb_total",
                "comb_private",
                "comb_shared",
                "system",
                "gpu_main",
                "gpu_desc",
                "gpu_comb",
                "gpu_system",
                "main_threads",
                "desc_threads",
                "comb_threads",
            ),
            0,
        )
        self.system_capacity = 0
        self.gpu_capacity = 0
        self.cpu = {k: _Pct() for k in ("system", "main", "descendants", "combined")}
        self.gpu_util = _Pct()
        # exact CPU-seconds: reaped by us (rusage) + last reading of processes whose time went nowhere
        self.banked_user = 0.0
        self.banked_system = 0.0
        self.live_cpu: dict[int, tuple[float, float]] = {}
        self.reaped_maxrss: dict[int, int] = {}  # pid -> ru_maxrss (bytes) of children we reaped
        # exec() records the peak of the image it replaces in ru_maxrss: for the command we launched that
        # is the sampler's own (vfork or fork alike), so main's ru_maxrss means something only above it
        self.spawner_hwm = 0
        self.main_reaped_children = False  # main's cminflt/cmajflt were > 0 at some sample
        self.cpu_user = 0.0
        self.cpu_system = 0.0
        self.cpu_source = "sampled"
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.status = "running"
        self.notes: list[str] = []
        self.cgroup_peak: int | None = None
        self.cgroup_source: str | None = None
        self.smaps_max_age: float | None = None
        self.columns = list(BASE_COLUMNS)
        self.rows: list[list[float | None]] = []
        self.stride = 1
        self._pending: list[list[float | None]] = []
        self._mean_cols: list[int] = []
        self._mean_cols_for = -1

    # ------------------------------------------------------------------ inputs

    def reaped(self, pid: int, user: float, system: float, maxrss: int, exit_code: int | None) -> None:
        """A child reaped by us (wait4): its rusage is exact and includes its own reaped children."""
        self.banked_user += user
        self.banked_system += system
        self.live_cpu.pop(pid, None)
        self.cpu_source = "exact"
        if pid == self.main_pid and maxrss <= self.spawner_hwm:
            maxrss = 0  # no more than the sampler's own image: says nothing about the command
        self.reaped_maxrss[pid] = maxrss
        p = self.procs.get(pid)
        if (
            pid == self.main_pid
            and p is not None
            and maxrss > p.peak_rss
            and not self.main_reaped_children
            and not any(q.role == "descendant" for q in self.procs.values())
        ):
            # ru_maxrss covers the process and the children it waited for: with no child ever seen and
            # none reaped by the last sample (cminflt 0), it is main's own exact peak — which its last
            # VmHWM read may have missed if it grew after that sample and exited before the next.
            p.peak_rss = maxrss
            p.peak_source = "ru_maxrss"
        self._exited(pid, p, exit_code)
        if p is not None:
            p.cpu_seconds = max(p.cpu_seconds, user + system)
            p.exit_code = exit_code
            # ru_maxrss also covers the children it waited for (seen or not) and the image exec
            # replaced: it bounds the largest single process of the tree, never this one's own peak.

    def _has_descendants(self) -> bool:
        return any(p.role == "descendant" for p in self.procs.values())

    def gone(self, pid: int, parent_alive_in_tree: bool) -> None:
        """A process vanished without us reaping it. If its parent is in the tree, the parent's
        cutime/cstime takes its time over; otherwise its last reading is all we will ever know."""
        last = self.live_cpu.pop(pid, None)
        if last is not None and not parent_alive_in_tree:
            self.banked_user += last[0]
            self.banked_system += last[1]
        p = self.procs.get(pid)
        if p is not None:
            if p.pid not in self.reaped_maxrss:
                p.peak_source = "VmHWM at its last sample (a lower bound)"
            self._exited(pid, p, None)

    def _exited(self, pid: int, p: _Proc | None, code: int | None) -> None:
        """A process_exited event, once per process: exit code or signal where we reaped it, else just 'exited'."""
        if p is not None:
            if p.ev_exited:
                return
            p.ev_exited = True
        elif not code:
            return  # a short child that exited cleanly before any sample: not worth a line
        name = p.name if p is not None else "?"
        if code is None:
            msg, sig = f"process {pid} ({name}) exited", None
        elif code < 0:
            sig = -code
            msg = f"process {pid} ({name}) killed by signal {sig}"
        else:
            sig = None
            msg = f"process {pid} ({name}) exited with code {code}"
        self.events.add(
            "process_exited",
            time.time(),
            msg,
            pid=pid,
            name=name,
            exit_code=code if code is not None and code >= 0 else None,
            signal=sig,
        )

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
        main_pid = self.main_pid
        procs = self.procs
        gpu_by_pid: dict[int, dict[str, int]] = {}
        sm_by_pid: dict[int, float] = {}
        for g in gpus:
            for pid, used in g.processes.items():
                gpu_by_pid.setdefault(pid, {})[g.uuid] = used
            if want_sample:
                for pid, util in g.process_sm_util.items():
                    sm_by_pid[pid] = sm_by_pid.get(pid, 0.0) + util

        m_rss = m_priv = m_shared = 0
        d_pss = d_priv = d_max_rss = 0
        c_pss = c_priv = c_max_rss = 0
        m_cpu = d_cpu = 0.0
        m_thr = d_thr = 0
        g_main = g_desc = 0
        live_user = live_system = 0.0
        out_procs: list[dict[str, Any]] | None = [] if want_sample else None
        rec_procs: list[tuple[Any, ...]] | None = [] if self.recorder is not None else None
        for r in readings:
            h = r.handle
            pid = h.pid
            p = procs.get(pid)
            is_main = pid == main_pid
            if is_main and r.child_faults:
                self.main_reaped_children = True
            if p is None:
                p = procs[pid] = _Proc(r, "main" if is_main else "descendant", now)
                p.lk_y0 = r.rss
                self.events.add(
                    "process_started",
                    now,
                    f"process {pid} ({h.name}) started",
                    pid=pid,
                    name=h.name,
                    ppid=h.ppid,
                )
            p.last_seen = now
            p.ppid = h.ppid
            p.name = h.name
            p.cmdline = h.cmdline
            if r.hwm > p.peak_rss:
                p.peak_rss = r.hwm
            if r.private > p.peak_private:
                p.peak_private = r.private
            if r.pss > p.peak_pss:
                p.peak_pss = r.pss
            if r.threads > p.peak_threads:
                p.peak_threads = r.threads
            if r.utime_stime > p.cpu_seconds:
                p.cpu_seconds = r.utime_stime
            if r.cpu_percent > p.max_cpu:
                p.max_cpu = r.cpu_percent
            self.live_cpu[pid] = (r.user_total, r.system_total)
            live_user += r.user_total
            live_system += r.system_total
            gmem = gpu_by_pid.get(pid)
            gsum = sum(gmem.values()) if gmem else 0
            if gsum > p.peak_gpu:
                p.peak_gpu = gsum
            # leak hint: running least-squares sums of RSS against time
            t = now - p.lk_t0
            y = float(r.rss - p.lk_y0)
            p.lk_n += 1
            p.lk_st += t
            p.lk_sy += y
            p.lk_stt += t * t
            p.lk_sty += t * y
            p.lk_syy += y * y
            p.lk_tlast = now
            if r.rss >= p.ev_rss:
                self.events.add(
                    "peak",
                    now,
                    f"process {pid} ({h.name}) RSS peak {_mb(r.rss)}",
                    pid=pid,
                    name=h.name,
                    resource="ram",
                    value=r.rss,
                )
                p.ev_rss = _next_peak_step(r.rss)
            if gsum >= p.ev_gpu:
                self.events.add(
                    "peak",
                    now,
                    f"process {pid} ({h.name}) GPU memory peak {_mb(gsum)}",
                    pid=pid,
                    name=h.name,
                    resource="gpu",
                    value=gsum,
                )
                p.ev_gpu = _next_peak_step(gsum)
            if rec_procs is not None:
                rec_procs.append((pid, r.rss, r.private, r.pss, p.peak_rss, round(r.cpu_percent, 1), r.threads, gsum))
            c_pss += r.pss
            c_priv += r.private
            if r.rss > c_max_rss:
                c_max_rss = r.rss
            if is_main:
                m_rss, m_priv, m_shared = r.rss, r.private, r.rss - r.private
                m_cpu = r.cpu_percent
                m_thr = r.threads
                g_main = gsum
            else:
                d_pss += r.pss
                d_priv += r.private
                if r.rss > d_max_rss:
                    d_max_rss = r.rss
                d_cpu += r.cpu_percent
                d_thr += r.threads
                g_desc += gsum
            if out_procs is not None:
                out_procs.append(
                    {
                        "pid": pid,
                        "ppid": h.ppid,
                        "name": h.name,
                        "cmdline": h.cmdline,
                        "role": p.role,
                        "rss": r.rss,
                        "private": r.private,
                        "shared": r.rss - r.private,
                        "pss": r.pss,
                        "peak_rss": p.peak_rss,
                        "cpu_seconds": r.utime_stime,
                        "cpu_percent": r.cpu_percent,
                        "threads": r.threads,
                        "gpu_memory": gmem or {},
                        "gpu_sm_percent": sm_by_pid.get(pid),
                    }
                )
        # Σ PSS counts shared pages once; it is never less than the largest single process's RSS.
        d_total = max(d_pss, d_max_rss)
        c_total = max(c_pss, c_max_rss)
        mx = self.max
        for key, val in (
            ("main_rss", m_rss),
            ("main_private", m_priv),
            ("main_shared", m_shared),
            ("desc_total", d_total),
            ("desc_private", d_priv),
            ("desc_shared", d_total - d_priv),
            ("comb_total", c_total),
            ("comb_private", c_priv),
            ("comb_shared", c_total - c_priv),
            ("main_threads", m_thr),
            ("desc_threads", d_thr),
            ("comb_threads", m_thr + d_thr),
            ("gpu_main", g_main),
            ("gpu_desc", g_desc),
            ("gpu_comb", g_main + g_desc),
        ):
            if val > mx[key]:
                mx[key] = val
        mem_total, mem_used, host_cpu = host
        self.system_capacity = mem_total
        if mem_used > mx["system"]:
            mx["system"] = mem_used
        self._check_ram(now, c_total, g_main + g_desc, mem_total)
        c_cpu = m_cpu + d_cpu
        self.cpu["main"].add(m_cpu)
        self.cpu["descendants"].add(d_cpu)
        self.cpu["combined"].add(c_cpu)
        self.cpu["system"].add(host_cpu * self.system_core_count)
        if self.n_samples == 1 and self.mode == "attach":
            # Attached to running processes: count the CPU time they use from now on, not before.
            self.banked_user -= live_user
            self.banked_system -= live_system
            self.notes.append(
                "attached to a running process: CPU time counts from the attach; peak RSS (VmHWM) may "
                "include its history before the attach"
            )
        # Exact CPU-seconds so far; the total never decreases. User and system are taken together from
        # one reading: the kernel re-splits utime/stime as a process runs, so their separate maxima
        # would add up to more than was used.
        user, system = self.banked_user + live_user, self.banked_system + live_system
        if user + system >= self.cpu_user + self.cpu_system:
            self.cpu_user, self.cpu_system = user, system

        gpu_used_sum = 0
        gpu_util_sum = 0.0
        out_gpus: list[dict[str, Any]] | None = [] if want_sample else None
        rec_gpus: list[tuple[Any, ...]] = []
        tree_mem_by_gpu: list[int] = []
        for g in gpus:
            st = self.gpus.get(g.index)
            if st is None:
                # by default every physical GPU counts; a MIG device only when chosen by its UUID
                counted = g.mig_parent is None if self.gpu_uuids is None else g.uuid in self.gpu_uuids
                st = self.gpus[g.index] = _Gpu(g, counted)
                self.columns += [f"gpu{g.index}_memory", f"gpu{g.index}_util"]
            st.total = g.memory_total or st.total
            if g.lost and not st.lost:
                self.events.add(
                    "gpu_lost",
                    now,
                    f"GPU {g.index} ({g.uuid}) was lost; its figures stop here",
                    resource=f"gpu{g.index}",
                )
            st.lost = st.lost or g.lost
            if g.memory_used is not None and st.total:
                self._check_gpu(now, g.index, g.memory_used, st.total)
            tree_mem = sum(used for pid, used in g.processes.items() if pid in procs)
            tree_mem_by_gpu.append(tree_mem)
            st.tree_peak = max(st.tree_peak, tree_mem)
            rec_gpus.append((g.index, g.memory_used, g.memory_total, g.utilization_gpu, tree_mem))
            if g.memory_used is not None:
                st.peak_used = max(st.peak_used or 0, g.memory_used)
                if g.mig_parent is None:  # a MIG device's memory is part of its parent's
                    gpu_used_sum += g.memory_used
            if g.utilization_gpu is not None:
                st.util.add(g.utilization_gpu)
                if st.counted:
                    gpu_util_sum += g.utilization_gpu
            if g.power_w is not None:
                st.power.add(g.power_w)
            if g.temperature_c is not None:
                st.max_temp = max(st.max_temp or g.temperature_c, g.temperature_c)
            if g.energy_mj is not None:
                if st.energy_first is None:
                    st.energy_first = g.energy_mj
                st.energy_last = g.energy_mj
            tree_sm = max((u for pid, u in g.process_sm_util.items() if pid in procs), default=None)
            if tree_sm is not None:
                st.tree_sm_peak = max(st.tree_sm_peak or 0.0, tree_sm)
            if g.unattributed_memory is not None:
                st.peak_unattributed = max(st.peak_unattributed or 0, g.unattributed_memory)
            for name in GPM_FIELDS:
                v = getattr(g, name)
                if v is not None:
                    st.extra.setdefault(name, _Pct()).add(v)
            if out_gpus is not None:
                out_gpus.append(
                    {
                        "index": g.index,
                        "uuid": g.uuid,
                        "name": g.name,
                        "memory_total": g.memory_total,
                        "memory_used": g.memory_used,
                        "utilization_gpu": g.utilization_gpu,
                        "utilization_memory": g.utilization_memory,
                        "temperature_c": g.temperature_c,
                        "power_w": g.power_w,
                        "power_limit_w": g.power_limit_w,
                        "tree_memory": tree_mem,
                        "counted": st.counted,
                        "simulated": self.simulated_gpus,
                        "lost": g.lost,
                        "pci_bus_id": g.pci_bus_id,
                        "memory_reserved": g.memory_reserved,
                        "clock_sm_mhz": g.clock_sm_mhz,
                        "clock_memory_mhz": g.clock_memory_mhz,
                        "fan_percent": g.fan_percent,
                        "energy_j": _energy_j(st),
                        "sm_activity": g.sm_activity,
                        "sm_occupancy": g.sm_occupancy,
                        "tensor_activity": g.tensor_activity,
                        "dram_bandwidth": g.dram_bandwidth,
                        "tree_sm_util": tree_sm,
                        "unattributed_memory": g.unattributed_memory,
                        "mig_parent": g.mig_parent,
                    }
                )
        if gpus:
            self.gpu_capacity = sum(st.total or 0 for st in self.gpus.values())
            mx["gpu_system"] = max(mx["gpu_system"], gpu_used_sum)
            self.gpu_util.add(gpu_util_sum)

        elapsed = now - self.start_time
        row: list[float | None] = [
            round(elapsed, 3),
            c_total,
            c_priv,
            c_total - c_priv,
            m_rss,
            d_total,
            round(c_cpu, 1),
            round(m_cpu, 1),
            round(self.cpu_user + self.cpu_system, 2),
            m_thr + d_thr,
            len(readings),
            g_main + g_desc,
            mem_used,
            round(host_cpu, 1),
        ]
        for g, tree_mem in zip(gpus, tree_mem_by_gpu, strict=True):
            row.append(tree_mem)
            row.append(g.utilization_gpu)
        self._append_row(row)
        if self.recorder is not None and rec_procs and c_total > 0:  # not the empty read just after a death
            self.recorder.add(
                (
                    now,
                    round(elapsed, 3),
                    (c_total, c_priv, g_main + g_desc, len(readings), round(c_cpu, 1)),
                    rec_procs,
                    rec_gpus,
                )
            )

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
            "tree": {
                "main_rss": m_rss,
                "main_private": m_priv,
                "main_shared": m_shared,
                "descendants_total": d_total,
                "descendants_private": d_priv,
                "combined_total": c_total,
                "combined_private": c_priv,
                "combined_shared": c_total - c_priv,
                "cpu_percent": c_cpu,
                "main_cpu_percent": m_cpu,
                "cpu_seconds": self.cpu_user + self.cpu_system,
                "threads": m_thr + d_thr,
                "gpu_memory": g_main + g_desc,
                "n_processes": len(readings),
            },
        }

    # ------------------------------------------------------------------ alerts

    def _check_ram(self, now: float, tree_ram: int, tree_gpu: int, mem_total: int) -> None:
        if tree_ram >= self.ev_tree_rss:
            self.events.add("peak", now, f"tree RAM peak {_mb(tree_ram)}", resource="ram", value=tree_ram)
            self.ev_tree_rss = _next_peak_step(tree_ram)
        if tree_gpu >= self.ev_tree_gpu:
            self.events.add("peak", now, f"tree GPU memory peak {_mb(tree_gpu)}", resource="gpu", value=tree_gpu)
            self.ev_tree_gpu = _next_peak_step(tree_gpu)
        limit = self.mem_limit or mem_total
        if not limit:
            return
        pct = 100.0 * tree_ram / limit
        self.last_ram_percent = pct
        if self.ram_watch is None:
            self.ram_watch = LevelWatch(self.warn_at, self.critical_at)
        level = self.ram_watch.check(pct, now)
        if level:
            kind = "critical" if level == 2 else "warning"
            source = self.mem_limit_source if self.mem_limit else "system RAM"
            self.events.add(
                kind,
                now,
                f"RAM {pct:.0f}% of {source} ({_mb(tree_ram)} of {_mb(limit)})",
                resource="ram",
                value=tree_ram,
                limit=limit,
                percent=round(pct, 1),
            )

    def _check_gpu(self, now: float, index: int, used: int, total: int) -> None:
        watch = self.gpu_watch.get(index)
        if watch is None:
            watch = self.gpu_watch[index] = LevelWatch(self.warn_at, self.critical_at)
        pct = 100.0 * used / total
        level = watch.check(pct, now)
        if level:
            kind = "critical" if level == 2 else "warning"
            self.events.add(
                kind,
                now,
                f"GPU {index} memory {pct:.0f}% of the GPU's ({_mb(used)} of {_mb(total)})",
                resource=f"gpu{index}",
                value=used,
                limit=total,
                percent=round(pct, 1),
            )

    def leak_suspects(self) -> list[dict[str, Any]]:
        out = []
        for p in self.procs.values():
            fit = p.leak_fit()
            if fit is None or p.lk_n < LEAK_MIN_SAMPLES:
                continue
            slope, r2 = fit
            growth = slope * (p.lk_tlast - p.lk_t0)
            if r2 > LEAK_MIN_R2 and growth >= max(LEAK_MIN_GROWTH, LEAK_MIN_GROWTH_FRACTION * p.lk_y0):
                out.append(
                    {
                        "pid": p.pid,
                        "name": p.name,
                        "slope_bytes_per_s": slope,
                        "r2": r2,
                        "n_samples": p.lk_n,
                        "growth_bytes": growth,
                    }
                )
        return out

    # ------------------------------------------------------------------ timeline

    def _append_row(self, row: list[float | None]) -> None:
        if len(row) < len(self.columns):  # a GPU stopped answering: keep columns aligned
            row += [None] * (len(self.columns) - len(row))
        if self.stride == 1:
            self.rows.append(row)
        else:
            self._pending.append(row)
            if len(self._pending) >= self.stride:
                self.rows.append(self._merge(self._pending))
                self._pending = []
        if len(self.rows) >= TIMELINE_CAP:
            self.rows = [self._merge(self.rows[i : i + 2]) for i in range(0, len(self.rows), 2)]
            self.stride *= 2

    def _merge(self, rows: list[list[float | None]]) -> list[float | None]:
        if self._mean_cols_for != len(self.columns):  # GPU columns may have been added since
            self._mean_cols_for = len(self.columns)
            self._mean_cols = [i for i, c in enumerate(self.columns) if c.endswith(MEAN_COLUMNS_SUFFIX)]
        out: list[float | None] = list(rows[0])
        for i in range(1, len(out)):
            vals = [r[i] for r in rows if i < len(r) and r[i] is not None]
            if not vals:
                continue
            out[i] = round(sum(vals) / len(vals), 1) if i in self._mean_cols else max(vals)  # type: ignore[type-var,arg-type]
        return out

    def timeline(self) -> dict[str, Any]:
        rows = self.rows + ([self._merge(self._pending)] if self._pending else [])
        return {"columns": self.columns, "rows": rows, "stride": self.stride}

    # ------------------------------------------------------------------ output

    def summary(self, *, details: bool = True) -> dict[str, Any]:
        """The report as a `models.ResourceUsage` dict (bytes and seconds).

        `details=False` leaves out the per-process list and the event timeline (empty lists): the live
        view's once-a-second progress needs only the run's figures, at a fraction of the size.
        """
        mx = self.max
        sources: dict[str, str] = {}
        notes = list(self.notes)
        main = self.procs.get(self.main_pid)
        desc = [p for p in self.procs.values() if p.role == "descendant"]
        main_peak = max(mx["main_rss"], main.peak_rss if main else 0)
        if main and main.peak_rss >= mx["main_rss"] and main.peak_rss:
            sources["max_ram.main.total_rss"] = f"exact ({main.peak_source})"
        else:
            sources["max_ram.main.total_rss"] = "sampled"
        desc_single = max((p.peak_rss for p in desc), default=0)
        desc_peak = max(mx["desc_total"], desc_single)
        sources["max_ram.descendants.total_rss"] = (
            "sampled lower bound (each descendant's own peak is its VmHWM)" if desc else "no descendants"
        )
        # The largest single process ever in the tree: VmHWM of those we saw, and ru_maxrss of those we
        # reaped (which covers the children they waited for, even ones no sample saw).
        single_max = max(main_peak, desc_single, *self.reaped_maxrss.values(), 0)
        comb_sampled = mx["comb_total"]
        # Σ of per-process peaks bounds the tree from above — for the processes we saw.
        upper = max(sum(p.peak_rss for p in self.procs.values()), single_max) or None
        low = max(single_max, comb_sampled)
        if self.cgroup_peak is not None and low <= self.cgroup_peak <= (upper or 0):
            comb_peak = self.cgroup_peak
            peak_source = "cgroup"
            sources["max_ram.combined.total_rss"] = f"exact ({self.cgroup_source})"
        elif self.cgroup_peak is not None and self.cgroup_peak > (upper or 0):
            # The cgroup also charges page cache (files read or written): more than every process's
            # peak together held. Report the processes' bound; the raw figure stays in cgroup_peak.
            comb_peak = max(low, upper or 0)
            peak_source = "upper_bound"
            sources["max_ram.combined.total_rss"] = (
                "Σ of per-process peaks (an upper bound); the job cgroup's peak "
                f"({self.cgroup_peak} bytes, cgroup_peak) is larger because it counts page cache"
            )
        elif self.cgroup_peak is not None:
            # The cgroup is not charged for file pages (libraries) cached by others before the job, so
            # one process's RSS can exceed it; the tree held at least that process.
            comb_peak = low
            peak_source = "VmHWM"
            sources["max_ram.combined.total_rss"] = (
                f"exact (largest single process; the job cgroup's peak, {self.cgroup_peak} bytes, "
                "does not count shared file pages charged elsewhere)"
            )
        else:
            comb_peak = low
            peak_source = "sampled"
            sources["max_ram.combined.total_rss"] = (
                "sampled lower bound (with the largest exact single-process peak); "
                "combined_upper_bound = Σ per-process peaks"
            )
        for k in ("private_rss", "shared_rss"):
            sources[f"max_ram.*.{k}"] = "sampled (smaps_rollup USS/PSS, carried forward between reads)"
        sources["max_ram.system"] = "sampled (MemTotal - MemAvailable)"
        sources["max_gpu_ram"] = "sampled (NVML running processes)"
        sources["cpu_utilization"] = "sampled percentages per interval"
        sources["cpu_time"] = (
            "exact (rusage of reaped children + utime/stime/cutime/cstime of live processes)"
            if self.cpu_source == "exact"
            else "kernel counters of live processes (/proc stat), read each sample"
        )
        sources["peak_threads"] = "sampled"
        wall = max(self.end_time - self.start_time, 1e-9)
        cpu_total = self.cpu_user + self.cpu_system
        gpus = []
        for idx, st in sorted(self.gpus.items()):
            gpus.append(
                {
                    "index": idx,
                    "uuid": st.uuid,
                    "name": st.name,
                    "memory_total": st.total,
                    "peak_memory_used": st.peak_used,
                    "tree_peak_memory": st.tree_peak,
                    "mean_utilization": (st.util.sum / st.util.n) if st.util.n else None,
                    "max_utilization": st.util.max if st.util.n else None,
                    "counted": st.counted,
                    "simulated": self.simulated_gpus,
                    "lost": st.lost,
                    "pci_bus_id": st.g.pci_bus_id,
                    "mig_parent": st.g.mig_parent,
                    "gpu_instance_id": st.g.gpu_instance_id,
                    "compute_instance_id": st.g.compute_instance_id,
                    "mean_power_w": (st.power.sum / st.power.n) if st.power.n else None,
                    "max_power_w": st.power.max if st.power.n else None,
                    "max_temperature_c": st.max_temp,
                    "energy_j": _energy_j(st),
                    "tree_peak_sm_utilization": st.tree_sm_peak,
                    "peak_unattributed_memory": st.peak_unattributed,
                    **{f"mean_{k}": st.extra[k].sum / st.extra[k].n for k in st.extra},
                    **{f"max_{k}": st.extra[k].max for k in st.extra},
                }
            )
            if st.lost:
                notes.append(f"GPU {idx} ({st.uuid}) was lost during the run; its figures stop there")
            if st.peak_unattributed:
                notes.append(
                    f"GPU {idx}: up to {st.peak_unattributed} bytes of GPU memory belong to processes whose "
                    "host PIDs could not be mapped into this PID namespace (container); they are unattributed, "
                    "not counted in max_gpu_ram, and may belong to the tracked tree"
                )
        leaks = self.leak_suspects()
        for lk in leaks:
            notes.append(
                f"possible leak: process {lk['pid']} ({lk['name']}) RSS grew steadily by "
                f"{lk['slope_bytes_per_s'] / 1e6:.1f} MB/s (R² {lk['r2']:.2f}, {lk['n_samples']} samples)"
            )
        if self.events.dropped:
            notes.append(f"{self.events.dropped} process/peak events not kept (more than the cap per session)")
        fits = (
            {p.pid: p.leak_fit() if p.lk_n >= LEAK_MIN_SAMPLES else None for p in self.procs.values()}
            if details
            else {}
        )
        leak_pids = {lk["pid"] for lk in leaks}
        energy = [e for st in self.gpus.values() if st.counted and (e := _energy_j(st)) is not None]
        for line in sorted(self.gpu_problems):
            notes.append(line)
        n_expected_gpus = sum(1 for st in self.gpus.values() if st.counted)
        if self.gpus and self.gpu_selection_reason:
            counted = ", ".join(str(i) for i, st in sorted(self.gpus.items()) if st.counted) or "none"
            notes.append(f"GPUs counted for utilization: {counted} ({self.gpu_selection_reason})")
        return {
            "max_ram": {
                "unit": "bytes",
                "system_capacity": self.system_capacity,
                "system": mx["system"],
                "main": {
                    "total_rss": main_peak,
                    "private_rss": mx["main_private"],
                    "shared_rss": mx["main_shared"],
                },
                "descendants": {
                    "total_rss": desc_peak,
                    "private_rss": mx["desc_private"],
                    "shared_rss": mx["desc_shared"],
                },
                "combined": {
                    "total_rss": comb_peak,
                    "private_rss": min(mx["comb_private"], comb_peak),
                    "shared_rss": min(mx["comb_shared"], comb_peak),
                },
                "peak_source": peak_source,
                "combined_sampled": comb_sampled,
                "cgroup_peak": self.cgroup_peak,
                "combined_upper_bound": upper,
            },
            "max_gpu_ram": {
                "unit": "bytes",
                "system_capacity": self.gpu_capacity,
                "system": mx["gpu_system"],
                "main": mx["gpu_main"],
                "descendants": mx["gpu_desc"],
                "combined": mx["gpu_comb"],
            },
            "cpu_utilization": {
                "system_core_count": self.system_core_count,
                "n_expected_cores": self.n_expected_cores,
                "system": self.cpu["system"].as_dict(self.system_core_count),
                "main": self.cpu["main"].as_dict(self.n_expected_cores),
                "descendants": self.cpu["descendants"].as_dict(self.n_expected_cores),
                "combined": self.cpu["combined"].as_dict(self.n_expected_cores),
                "main_n_threads": mx["main_threads"],
                "descendants_n_threads": mx["desc_threads"],
                "combined_n_threads": mx["comb_threads"],
            },
            "gpu_utilization": {
                "system_gpu_count": len(self.gpus),
                "n_expected_gpus": n_expected_gpus,
                "gpu_percentages": self.gpu_util.as_dict(n_expected_gpus),
            },
            "compute_time": {"unit": "seconds", "time": wall},
            "cpu_time": {
                "unit": "seconds",
                "user": self.cpu_user,
                "system": self.cpu_system,
                "total": cpu_total,
                "mean_percent": 100.0 * cpu_total / wall,
                "source": self.cpu_source,
            },
            "peak_threads": mx["comb_threads"],
            "gpus": gpus,
            "gpu_note": self.gpu_note,
            "gpu_energy_j": sum(energy) if energy else None,
            "gpu_energy_wh": sum(energy) / 3600.0 if energy else None,
            "processes": [
                {
                    "pid": p.pid,
                    "ppid": p.ppid,
                    "name": p.name,
                    "cmdline": p.cmdline,
                    "role": p.role,
                    "first_seen": p.first_seen,
                    "last_seen": p.last_seen,
                    "peak_rss": p.peak_rss,
                    "peak_rss_source": p.peak_source,
                    "peak_private": p.peak_private,
                    "peak_pss": p.peak_pss,
                    "peak_threads": p.peak_threads,
                    "cpu_seconds": p.cpu_seconds,
                    "max_cpu_percent": p.max_cpu,
                    "peak_gpu_memory": p.peak_gpu,
                    "exit_code": p.exit_code,
                    "rss_slope": fit[0] if (fit := fits.get(p.pid)) else None,
                    "rss_r2": fit[1] if fit else None,
                    "leak_suspected": p.pid in leak_pids,
                }
                for p in (sorted(self.procs.values(), key=lambda p: p.first_seen) if details else ())
            ],
            "events": list(self.events.events) if details else [],
            "leak_suspects": leaks,
            "alerts": {
                "warn_at": self.warn_at,
                "critical_at": self.critical_at,
                "mem_limit": self.mem_limit or self.system_capacity or None,
                "mem_limit_source": self.mem_limit_source if self.mem_limit else "system RAM",
                "ram_percent": self.last_ram_percent,
                "events_dropped": self.events.dropped,
            },
            "sources": sources,
            "notes": notes,
            "command": self.command,
            "mode": self.mode,
            "pid": self.main_pid,
            "exit_code": self.exit_code,
            "exit_signal": self.exit_signal,
            "status": self.status,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "host": self.host,
            "interval": self.interval,
            "n_samples": self.n_samples,
            "n_processes": len(self.procs),
            "smaps_max_age": self.smaps_max_age,
            "tool_version": __version__,
            "schema_version": SCHEMA_VERSION,
        }
