"""The small running statistics the summary is made of, each owning one concern.

`SummaryBuilder` (summary.py) composes them: per-process figures (`ProcessStats` with its `RssTrend`), the
exact CPU ledger (`CpuLedger`), tree maxima (`TreeMaxima`), percentages (`PercentStats`), per-GPU figures
(`GpuStats`), alert levels (`AlertLevels`) and the bounded timeline (`TimelineRing`). Plain Python with
`__slots__`: every one of them runs every sample, a method call costs ~25 ns.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from gputop_tracker.core.gpu import GpuReading
from gputop_tracker.core.proc.procfs import Reading, started_at
from gputop_tracker.core.summary.events import PEAK_STEP_BYTES, PEAK_STEP_FRACTION, EventLog, LevelWatch

TIMELINE_CAP = 14_400  # rows; past it, neighbouring rows merge (24 h at 1 s stays ~3 MB)
# columns averaged when rows merge; every other column keeps its maximum (peaks survive downsampling)
MEAN_COLUMNS_SUFFIX = ("cpu_percent", "_util")


def next_peak_step(reported: int) -> int:
    """The next value that makes a new-peak event: +10 % and at least +64 MiB over the last one reported."""
    return reported + max(PEAK_STEP_BYTES, int(reported * PEAK_STEP_FRACTION))


def megabytes(v: float) -> str:
    return f"{v / 1e6:.0f} MB"


# --------------------------------------------------------------------------- percentages


class PercentStats:
    """Maximum and mean of a percentage series."""

    __slots__ = ("max", "n", "sum")

    def __init__(self) -> None:
        self.max = 0.0
        self.sum = 0.0
        self.n = 0

    def add(self, v: float) -> None:
        if v > self.max:
            self.max = v
        self.sum += v
        self.n += 1

    @property
    def mean(self) -> float | None:
        return self.sum / self.n if self.n else None

    def as_dict(self, cores: int) -> dict[str, float]:
        mean = self.sum / self.n if self.n else 0.0
        cores = max(cores, 1)
        return {
            "max_sum_percent": self.max,
            "max_hardware_percent": self.max / cores,
            "mean_sum_percent": mean,
            "mean_hardware_percent": mean / cores,
        }


# --------------------------------------------------------------------------- one process


class RssTrend:
    """Least-squares fit of RSS against time over one process's samples (running sums, nothing stored).

    Sums are of (t - t0, rss - rss0): shifted so float64 keeps its precision over long runs."""

    __slots__ = ("first_rss", "last_time", "n", "st", "start", "stt", "sty", "sy", "syy")

    def __init__(self, now: float, rss: int) -> None:
        self.start = now
        self.first_rss = rss
        self.last_time = now
        self.n = 0
        self.st = self.sy = self.stt = self.sty = self.syy = 0.0

    def add(self, now: float, rss: int) -> None:
        t = now - self.start
        y = float(rss - self.first_rss)
        self.n += 1
        self.st += t
        self.sy += y
        self.stt += t * t
        self.sty += t * y
        self.syy += y * y
        self.last_time = now

    def fit(self) -> tuple[float, float] | None:
        """(slope of RSS in bytes/s, R²), or None with too few samples or no spread in time."""
        n = self.n
        if n < 3:
            return None
        sxx = n * self.stt - self.st * self.st
        syy = n * self.syy - self.sy * self.sy
        sxy = n * self.sty - self.st * self.sy
        if sxx <= 0:
            return None
        slope = sxy / sxx
        r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
        return slope, min(1.0, r2)


class ProcessStats:
    """Everything the summary keeps about one process of the tree."""

    __slots__ = (
        "autoreaps",
        "child_faults0",
        "cmdline",
        "cpu_base",
        "cpu_seconds",
        "ended",
        "exec_seen",
        "exit_code",
        "exit_reported",
        "first_seen",
        "hwm_at_attach",
        "hwm_reset",
        "last_seen",
        "max_cpu",
        "max_sampled_rss",
        "name",
        "never_read",
        "next_gpu_event",
        "next_rss_event",
        "peak_before_attach",
        "peak_gpu",
        "peak_private",
        "peak_pss",
        "peak_rss",
        "peak_source",
        "peak_threads",
        "pid",
        "ppid",
        "reaped",
        "role",
        "rusage_maxrss",
        "started",
        "trend",
        "waited",
        "waited_for_children",
    )

    def __init__(self, r: Reading, role: str, now: float, attached: bool = False) -> None:
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
        self.max_sampled_rss = 0
        self.peak_private = 0
        self.peak_pss = 0
        self.peak_threads = 0
        self.cpu_seconds = 0.0
        # attached to a process that ran before: its CPU counts from the attach, and a VmHWM above its RSS
        # at the attach is a peak from before it (reported apart, never as the peak while attached)
        self.cpu_base = r.utime_stime if attached else 0.0
        # cminflt + cmajflt of the children it waited for: a rise means it reaped one (attached: from now on)
        self.child_faults0 = r.child_faults if attached else 0
        self.waited = False  # it reaped a child itself (its cminflt rose): maybe one no sample saw
        self.autoreaps = False  # seen ignoring SIGCHLD: the kernel reaps its children, unaccounted
        self.hwm_at_attach = r.hwm if attached and r.hwm > r.rss else None
        self.peak_before_attach: int | None = self.hwm_at_attach
        self.max_cpu = 0.0
        self.peak_gpu = 0
        self.exit_code: int | None = None
        self.exit_reported = False
        self.reaped = False  # by us, with wait4: its rusage is known
        self.never_read = False  # a child we reaped that no sample ever read
        self.waited_for_children: bool | None = None  # read from its zombie when we reap it
        self.rusage_maxrss: int | None = None
        self.hwm_reset = False  # its VmHWM went down within one image: the kernel's counters miss what came before
        self.exec_seen = False  # seen replacing its image: its VmHWM covers the last image only
        ticks = getattr(h, "starttime", 0)
        self.started: float | None = started_at(ticks) if ticks else None  # None: not known (then: the run's start)
        self.ended: float | None = None  # when its end was seen (reaped, vanished, reported); None: alive, or unknown
        self.next_rss_event = PEAK_STEP_BYTES
        self.next_gpu_event = PEAK_STEP_BYTES
        self.trend = RssTrend(now, r.rss)

    @classmethod
    def unseen(cls, pid: int, ppid: int, name: str, now: float) -> ProcessStats:
        """A child we reaped that no sample ever saw (it lived and died between two): its rusage is all we know."""
        r = Reading()
        r.handle = _Who(pid, ppid, name)  # type: ignore[assignment]
        p = cls(r, "descendant", now)
        p.peak_source = "ru_maxrss"
        p.never_read = True
        return p

    def update(self, r: Reading, now: float, gpu_bytes: int) -> None:  # noqa: C901 — per process per sample: the hot path folds every figure in one pass
        h = r.handle
        self.last_seen = now
        self.ppid = h.ppid
        self.name = h.name
        self.cmdline = h.cmdline
        if r.child_faults > self.child_faults0:
            self.waited = True
        if r.autoreaps:
            self.autoreaps = True
        if r.hwm_reset:
            self.hwm_reset = True
        if r.exec_seen:
            self.exec_seen = True
        rss = r.rss
        if rss > self.max_sampled_rss:
            self.max_sampled_rss = rss
        self.see_hwm(r.hwm)
        if r.private > self.peak_private:
            self.peak_private = r.private
        if r.pss > self.peak_pss:
            self.peak_pss = r.pss
        if r.threads > self.peak_threads:
            self.peak_threads = r.threads
        cpu = r.utime_stime - self.cpu_base
        if cpu > self.cpu_seconds:
            self.cpu_seconds = cpu
        if r.cpu_percent > self.max_cpu:
            self.max_cpu = r.cpu_percent
        if gpu_bytes > self.peak_gpu:
            self.peak_gpu = gpu_bytes
        if rss:  # an exiting process (or a zombie) holds no memory any more: not a point of its RSS curve
            self.trend.add(now, rss)

    def see_hwm(self, hwm: int) -> None:
        """A VmHWM of this process (read by a sample, or by a code block before its reset) into its peak. Attached:
        one not above the VmHWM at the attach is from before it, and the samples' RSS stands instead."""
        if self.hwm_at_attach is not None:
            if hwm > self.hwm_at_attach:
                self.hwm_at_attach = None  # a new peak while attached: VmHWM is this run's again
                self.peak_source = "VmHWM"
            else:
                hwm = self.max_sampled_rss
                self.peak_source = "sampled while attached (its VmHWM predates the attach)"
        if hwm > self.peak_rss:
            self.peak_rss = hwm

    def peak_events(self, events: EventLog, now: float, rss: int, gpu_bytes: int) -> None:
        """A `peak` event each time RSS or GPU memory passes the next step over the last one reported."""
        if rss >= self.next_rss_event:
            events.add(
                "peak",
                now,
                f"process {self.pid} ({self.name}) RSS peak {megabytes(rss)}",
                pid=self.pid,
                name=self.name,
                resource="ram",
                value=rss,
            )
            self.next_rss_event = next_peak_step(rss)
        if gpu_bytes >= self.next_gpu_event:
            events.add(
                "peak",
                now,
                f"process {self.pid} ({self.name}) GPU memory peak {megabytes(gpu_bytes)}",
                pid=self.pid,
                name=self.name,
                resource="gpu",
                value=gpu_bytes,
            )
            self.next_gpu_event = next_peak_step(gpu_bytes)


class _Who:
    """Who a process was, for one we never read (the fields of procfs.ProcHandle a ProcessStats takes)."""

    __slots__ = ("cmdline", "name", "pid", "ppid")

    def __init__(self, pid: int, ppid: int, name: str) -> None:
        self.pid, self.ppid, self.name = pid, ppid, name
        self.cmdline: list[str] = []


# --------------------------------------------------------------------------- CPU-seconds, counted once


class CpuLedger:
    """Exact CPU-seconds of the tree: the one place where each second is counted exactly once.

    A process's time lives in one place at a time: its own utime/stime (and cutime/cstime of the children it
    waited for) while it lives; then, once reaped, in its reaper's cutime — or in the wait4 rusage we bank
    when we reap it. A process that vanished without us reaping it was reaped by its last known parent: if
    that parent's time is itself accounted for (alive in the tree, reaped by us, or vanished with its time
    going on up the tree in the same way), the vanished process's time is already there; only otherwise is
    its last reading banked — the most we will ever know of it.
    """

    __slots__ = ("banked_system", "banked_user", "live", "reaped", "source", "system", "user")

    def __init__(self) -> None:
        self.banked_user = 0.0
        self.banked_system = 0.0
        self.live: dict[int, tuple[float, float]] = {}  # pid -> (utime+cutime, stime+cstime) at its last read
        self.reaped: set[int] = set()  # pids we reaped (wait4): their rusage is banked
        self.user = 0.0
        self.system = 0.0
        self.source = "sampled"

    @property
    def total(self) -> float:
        return self.user + self.system

    def reap(self, pid: int, user: float, system: float) -> None:
        """wait4 rusage of a child we reaped: exact, and includes the children it waited for."""
        self.banked_user += user
        self.banked_system += system
        self.live.pop(pid, None)
        self.reaped.add(pid)
        self.source = "exact"

    def vanish(
        self,
        gone: Collection[int],
        parent_of: Mapping[int, int],
        alive: Collection[int],
        autoreapers: Collection[int] = (),
    ) -> None:
        """Processes that disappeared since the last sample without us reaping them (one batch). A parent in
        `autoreapers` ignores SIGCHLD: the kernel reaped its child, whose time reached no cutime."""
        gone_set = set(gone)
        memo: dict[int, bool] = {}

        def accounted(pid: int, depth: int = 0) -> bool:
            """Is the time of `pid`'s reaper (its last known parent) counted somewhere?"""
            if pid in memo:
                return memo[pid]
            parent = parent_of.get(pid)
            if parent is None or depth > 4096 or parent in autoreapers:
                ok = False
            elif parent in alive or parent in self.reaped:
                ok = True
            elif parent in gone_set:
                ok = accounted(parent, depth + 1)
            else:
                ok = False  # never ours (init, attach's parent) or gone before it: time went out of the tree
            memo[pid] = ok
            return ok

        for pid in gone_set:
            last = self.live.pop(pid, None)
            if last is not None and not accounted(pid):
                self.banked_user += last[0]
                self.banked_system += last[1]

    def start_attached(self, live_user: float, live_system: float) -> None:
        """Attached to running processes: count the time they use from now on, not before."""
        self.banked_user -= live_user
        self.banked_system -= live_system

    def close_sample(self, live_user: float, live_system: float) -> None:
        """The total never decreases. User and system come together from one reading: the kernel re-splits
        utime/stime as a process runs, so separate maxima would add up to more than was used."""
        user, system = self.banked_user + live_user, self.banked_system + live_system
        if user + system >= self.user + self.system:
            self.user, self.system = user, system


# --------------------------------------------------------------------------- tree maxima


class TreeMaxima:
    """Largest value of each tree figure seen in one sample (bytes, threads)."""

    KEYS = (
        "main_rss",
        "main_private",
        "main_shared",
        "descendants_total",
        "descendants_private",
        "descendants_shared",
        "combined_total",
        "combined_private",
        "combined_shared",
        "system",
        "gpu_main",
        "gpu_descendants",
        "gpu_combined",
        "gpu_system",
        "main_threads",
        "descendants_threads",
        "combined_threads",
    )
    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[str, int] = dict.fromkeys(self.KEYS, 0)

    def update(self, figures: Mapping[str, int]) -> None:
        values = self.values
        for key, val in figures.items():
            if val > values[key]:
                values[key] = val

    def __getitem__(self, key: str) -> int:
        return self.values[key]


# --------------------------------------------------------------------------- one GPU

GPM_FIELDS = ("sm_activity", "sm_occupancy", "tensor_activity", "dram_bandwidth")


class GpuStats:
    """Everything the summary keeps about one GPU (or MIG device)."""

    __slots__ = (
        "counted",
        "energy_first",
        "energy_last",
        "energy_reads",
        "first",
        "gpm",
        "lost",
        "max_temp",
        "peak_unattributed",
        "peak_used",
        "power",
        "total",
        "tree_memory_unknown",
        "tree_peak",
        "tree_sm_peak",
        "tree_used",
        "util",
    )

    def __init__(self, g: GpuReading, counted: bool) -> None:
        self.first = g  # the first reading: static facts (name, uuid, bus id, MIG ids)
        self.total = g.memory_total
        self.counted = counted
        self.peak_used: int | None = None
        self.tree_peak = 0
        self.tree_used = False  # a tracked process was listed on it (holding memory, or with no figure)
        self.tree_memory_unknown = False  # ... one of them with no figure (N/A): tree_peak is a lower bound
        self.util = PercentStats()
        self.power = PercentStats()
        self.max_temp: float | None = None
        self.lost = False
        self.energy_first: int | None = None
        self.energy_last: int | None = None
        self.energy_reads = 0
        self.tree_sm_peak: float | None = None
        self.peak_unattributed: int | None = None
        self.gpm: dict[str, PercentStats] = {}  # present only where the GPU has GPM (absent, not zero, elsewhere)

    def update(self, g: GpuReading, tree_memory: int, tree_sm: float | None) -> None:  # noqa: C901 — per GPU per sample: its figures folded in one pass on the hot path
        self.total = g.memory_total or self.total
        self.lost = self.lost or g.lost
        if tree_memory > self.tree_peak:
            self.tree_peak = tree_memory
            self.tree_used = True
        if g.memory_used is not None:
            self.peak_used = max(self.peak_used or 0, g.memory_used)
        if g.utilization_gpu is not None:
            self.util.add(g.utilization_gpu)
        if g.power_w is not None:
            self.power.add(g.power_w)
        if g.temperature_c is not None:
            self.max_temp = max(self.max_temp or g.temperature_c, g.temperature_c)
        if g.energy_mj is not None:
            self.add_energy(g.energy_mj)
        if tree_sm is not None:
            self.tree_sm_peak = max(self.tree_sm_peak or 0.0, tree_sm)
        if g.unattributed_memory is not None:
            self.peak_unattributed = max(self.peak_unattributed or 0, g.unattributed_memory)
        for name in GPM_FIELDS:
            v = getattr(g, name)
            if v is not None:
                self.gpm.setdefault(name, PercentStats()).add(v)

    def add_energy(self, mj: int) -> None:
        """One reading of the energy counter (mJ since the driver loaded). A counter that went back was reset (the
        driver reloaded, the GPU reset) and counts from 0 since: what was counted before is kept and the new count
        added (the energy between the last reading and the reset is lost: a lower bound), never a negative energy."""
        if self.energy_first is None or self.energy_last is None:
            self.energy_first = mj
        elif mj < self.energy_last:
            self.energy_first = -(self.energy_last - self.energy_first)
        self.energy_last = mj
        self.energy_reads += 1

    @property
    def energy_j(self) -> float | None:
        """Energy used between the first and the last reading (NVML counts mJ since the driver loaded)."""
        if self.energy_first is None or self.energy_last is None:
            return None
        return (self.energy_last - self.energy_first) / 1000.0

    @property
    def energy_measured_j(self) -> float | None:
        """The energy of the run for its report: None, not 0, where the counter was read only once (a GPU lost
        before its second reading, a counter that stopped answering): one reading measures nothing."""
        return self.energy_j if self.energy_reads > 1 else None


# --------------------------------------------------------------------------- alert levels


class AlertLevels:
    """Tree and GPU memory against their limits: warning/critical events once per crossing, and tree peaks."""

    __slots__ = (
        "critical_at",
        "events",
        "gpu_watch",
        "last_ram_percent",
        "mem_limit",
        "mem_limit_source",
        "next_tree_gpu_event",
        "next_tree_rss_event",
        "ram_watch",
        "warn_at",
    )

    def __init__(
        self,
        events: EventLog,
        *,
        mem_limit: int | None = None,
        mem_limit_source: str = "system RAM",
        warn_at: float = 80.0,
        critical_at: float = 95.0,
    ) -> None:
        self.events = events
        self.mem_limit = mem_limit  # None = the system's RAM
        self.mem_limit_source = mem_limit_source if mem_limit else "system RAM"
        self.warn_at = warn_at
        self.critical_at = critical_at
        self.ram_watch = LevelWatch(warn_at, critical_at)
        self.gpu_watch: dict[int, LevelWatch] = {}
        self.next_tree_rss_event = PEAK_STEP_BYTES
        self.next_tree_gpu_event = PEAK_STEP_BYTES
        self.last_ram_percent: float | None = None

    def check_tree(self, now: float, tree_ram: int, tree_gpu: int, mem_total: int) -> None:
        events = self.events
        if tree_ram >= self.next_tree_rss_event:
            events.add("peak", now, f"tree RAM peak {megabytes(tree_ram)}", resource="ram", value=tree_ram)
            self.next_tree_rss_event = next_peak_step(tree_ram)
        if tree_gpu >= self.next_tree_gpu_event:
            events.add("peak", now, f"tree GPU memory peak {megabytes(tree_gpu)}", resource="gpu", value=tree_gpu)
            self.next_tree_gpu_event = next_peak_step(tree_gpu)
        limit = self.mem_limit or mem_total
        if not limit:
            return
        pct = 100.0 * tree_ram / limit
        self.last_ram_percent = pct
        level = self.ram_watch.check(pct, now)
        if level:
            events.add(
                "critical" if level == 2 else "warning",
                now,
                f"RAM {pct:.0f}% of {self.mem_limit_source} ({megabytes(tree_ram)} of {megabytes(limit)})",
                resource="ram",
                value=tree_ram,
                limit=limit,
                percent=round(pct, 1),
            )

    def check_gpu(self, now: float, index: int, used: int, total: int) -> None:
        watch = self.gpu_watch.get(index)
        if watch is None:
            watch = self.gpu_watch[index] = LevelWatch(self.warn_at, self.critical_at)
        pct = 100.0 * used / total
        level = watch.check(pct, now)
        if level:
            self.events.add(
                "critical" if level == 2 else "warning",
                now,
                f"GPU {index} memory {pct:.0f}% of the GPU's ({megabytes(used)} of {megabytes(total)})",
                resource=f"gpu{index}",
                value=used,
                limit=total,
                percent=round(pct, 1),
            )

    def as_dict(self, system_capacity: int, dropped: int) -> dict[str, Any]:
        return {
            "warn_at": self.warn_at,
            "critical_at": self.critical_at,
            "mem_limit": self.mem_limit or system_capacity or None,
            "mem_limit_source": self.mem_limit_source,
            "ram_percent": self.last_ram_percent,
            "events_dropped": dropped,
        }


# --------------------------------------------------------------------------- timeline


class TimelineRing:
    """The session's columnar timeline, bounded: past TIMELINE_CAP rows neighbouring rows merge, keeping peaks."""

    __slots__ = ("_mean_cols", "_mean_cols_for", "_pending", "columns", "rows", "stride")

    def __init__(self, columns: list[str]) -> None:
        self.columns = list(columns)
        self.rows: list[list[float | None]] = []
        self.stride = 1
        self._pending: list[list[float | None]] = []
        self._mean_cols: list[int] = []
        self._mean_cols_for = -1

    def add_columns(self, names: list[str]) -> None:
        self.columns += names

    def append(self, row: list[float | None]) -> None:
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

    def as_dict(self) -> dict[str, Any]:
        rows = self.rows + ([self._merge(self._pending)] if self._pending else [])
        return {"columns": self.columns, "rows": rows, "stride": self.stride}


EventSink = Callable[[dict[str, Any]], None]
