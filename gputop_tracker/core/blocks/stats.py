"""Per-block figures: the block messages of the tracked program folded with the samples taken meanwhile.

Exact figures come from the process that ran the block (its message): duration, CPU seconds (process CPU
time across the block), and peak RAM (VmHWM reset at entry, read at exit). Sampled figures come from the
samples taken while a run was open (the sampler takes one at every block boundary): peak private memory and
GPU memory of that process, and the GPUs' utilization — or, where the GPU memory watcher runs, the highest of
its reads over the run's own span (that process, and the tree at one read). `hwm` keeps each process's VmHWM
as it was just before a block reset it, so the run's own peaks never lose what a reset cleared.
Plain Python: it runs in the sampler.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Sequence
from typing import Any

from gputop_tracker.core.blocks.allocator import BRACKET, BlockAllocators
from gputop_tracker.core.blocks.allocator import EXACT as ALLOC_EXACT

MAX_OPEN = 10_000  # runs open at once (a program that never closes its blocks must not grow us forever)
MAX_NAMES = 1_000  # distinct block names kept; later names are counted, not kept
MAX_PIDS = 100  # pids listed per block
# block_start/block_end events: the first runs of each name, and at most so many in all (a step called a
# million times must not push process and alert events out of the bounded timeline); marks alike
EVENT_RUNS_PER_NAME = 100
MAX_BLOCK_EVENTS = 2000
MAX_MARK_EVENTS = 1000
MAX_LIVE = 100  # block names in the live view's table (the most recently active)


class _Run:
    """One open run of a block."""

    __slots__ = (
        "evented",
        "gpu_n",
        "gpu_util",
        "n",
        "name",
        "peak_gpu",
        "peak_private",
        "peak_rss",
        "start",
        "tree_peak",
        "window",
    )

    def __init__(self, name: str, start: float, evented: bool) -> None:
        self.name = name
        self.start = start
        self.evented = evented  # its start is on the event timeline: its end goes there too
        self.n = 0  # samples taken while it was open
        self.peak_private = 0
        self.peak_rss = 0
        self.peak_gpu = 0
        self.gpu_util = 0.0
        self.gpu_n = 0  # samples with GPU readings
        self.tree_peak = 0  # the largest tree total (Σ PSS, as the summary counts it) in those samples
        self.window: int | None = None  # the job cgroup's peak window (`cgroup.PeakWindows`), when it has one


class _Agg:
    """Every run of one block name."""

    __slots__ = (
        "calls",
        "cpu",
        "d_max",
        "d_min",
        "d_sq",
        "d_sum",
        "first",
        "gpu_label",
        "gpu_n",
        "gpu_short",
        "gpu_util",
        "gpu_watched",
        "marks",
        "peak_exact",
        "peak_gpu",
        "peak_private",
        "peak_ram",
        "pids",
        "sampled_runs",
        "tree_exact",
        "tree_peak",
        "tree_peak_gpu",
    )

    def __init__(self, first: float) -> None:
        self.first = first
        self.calls = 0
        self.d_sum = self.d_sq = 0.0
        self.d_min = math.inf
        self.d_max = 0.0
        self.cpu = 0.0
        self.peak_ram = 0
        self.peak_exact = True
        self.peak_private: int | None = None
        self.peak_gpu: int | None = None
        self.gpu_util = 0.0
        self.gpu_n = 0
        self.sampled_runs = 0
        self.pids: set[int] = set()
        self.tree_peak: int | None = None
        self.tree_exact = True  # every run's tree peak came from the job cgroup
        self.marks = 0
        self.gpu_watched = 0  # runs whose GPU peaks came from the watcher's reads over their span
        self.gpu_short = 0  # of those, runs shorter than the watcher's period
        self.gpu_label = ""
        self.tree_peak_gpu: int | None = None

    def add_gpu_watched(self, peak: Any, short: bool, label: str) -> None:
        """A run's GPU memory over its span, from the watcher (`watch.BlockPeak`)."""
        self.gpu_watched += 1
        self.gpu_short += short
        self.gpu_label = label
        self.peak_gpu = max(self.peak_gpu or 0, peak.process)
        self.tree_peak_gpu = max(self.tree_peak_gpu or 0, peak.tree)

    def add_tree(self, run: _Run, window: int | None, own_peak: int | None) -> None:
        """The tree's peak during one run. What is surely held: the largest tree total sampled, and the exact
        peak of the process that ran it (`own_peak`). The cgroup's window (`window`) is the figure when it is not
        below that. Below it (the group does not count library pages charged to others before the run), it bounds
        nothing: the tree's other processes held their own pages too; the lower bound stands, labelled so."""
        low = max(run.tree_peak if run.n else 0, own_peak or 0)
        if window is not None and window >= low:
            peak = window
        else:
            self.tree_exact = False
            if not low:
                return  # neither a sample nor the process's own figure: unknown
            peak = low
        self.tree_peak = max(self.tree_peak or 0, peak)

    def add(self, run: _Run, pid: int, duration: float, cpu: float, peak: int | None) -> None:
        self.calls += 1
        self.d_sum += duration
        self.d_sq += duration * duration
        self.d_min = min(self.d_min, duration)
        self.d_max = max(self.d_max, duration)
        self.cpu += max(cpu, 0.0)
        if peak is None:  # the process could not reset its VmHWM: what the samples saw
            self.peak_exact = False
            peak = run.peak_rss
        self.peak_ram = max(self.peak_ram, peak)
        if len(self.pids) < MAX_PIDS:
            self.pids.add(pid)
        if run.n:
            self.sampled_runs += 1
            if run.peak_private:  # 0: no smaps read of it yet (unknown, not nothing)
                self.peak_private = max(self.peak_private or 0, run.peak_private)
        if run.gpu_n:
            if not self.gpu_label:  # the watcher's figure (add_gpu_watched) is the run's own span, not the samples'
                self.peak_gpu = max(self.peak_gpu or 0, run.peak_gpu)
            self.gpu_util += run.gpu_util
            self.gpu_n += run.gpu_n

    def as_dict(self, name: str, tree_source: str | None = None) -> dict[str, Any]:
        n = self.calls
        mean = self.d_sum / n
        var = max(self.d_sq / n - mean * mean, 0.0)
        sampled = f"sampled lower bound ({self.sampled_runs} of {n} runs seen by a sample)"
        out: dict[str, Any] = {
            "name": name,
            "calls": n,
            "duration": {"total": self.d_sum, "min": self.d_min, "mean": mean, "max": self.d_max, "std": var**0.5},
            "peak_ram": self.peak_ram,
            "peak_private": self.peak_private,
            "peak_gpu_ram": self.peak_gpu,
            "cpu_seconds": self.cpu,
            "mean_cpu_percent": 100.0 * self.cpu / self.d_sum if self.d_sum > 0 else 0.0,
            "mean_gpu_utilization": self.gpu_util / self.gpu_n if self.gpu_n else None,
            "pids": sorted(self.pids),
            "tree_peak_ram": self.tree_peak,
            "marks": self.marks,
            "sources": {
                "duration": "exact (the process's monotonic clock)",
                "peak_ram": "exact (VmHWM reset at entry, read at exit)" if self.peak_exact else sampled,
                "peak_private": sampled,
                "peak_gpu_ram": sampled,
                "cpu_seconds": "exact (the process's CPU time across the block, all its threads)",
                "mean_cpu_percent": "exact (cpu_seconds / duration)",
                "mean_gpu_utilization": sampled,
                "tree_peak_ram": f"exact ({tree_source}; page cache included)"
                if self.tree_exact and tree_source
                else TREE_SAMPLED,
            },
        }
        if self.gpu_watched:
            out["tree_peak_gpu_ram"] = self.tree_peak_gpu
            sources = out["sources"]
            sources["peak_gpu_ram"] = sources["tree_peak_gpu_ram"] = self._gpu_source()
        return out

    def _gpu_source(self) -> str:
        text = f"{self.gpu_label}, the highest read over each run"
        if self.gpu_short:
            text += (
                f"; {self.gpu_short} of {self.calls} runs shorter than the watcher's period: for those, the reads "
                "during or just around the run"
            )
        return text


TREE_SAMPLED = (
    "sampled lower bound (the largest tree total, Σ PSS, of the samples taken while it ran, its boundaries "
    "included, or the exact peak of the process that ran it)"
)


class BlockStats:
    """The session's blocks (fed by the Engine; read by the summary)."""

    def __init__(self) -> None:
        self.open: dict[tuple[int, int], _Run] = {}
        self.aggs: dict[str, _Agg] = {}
        self.hwm: dict[int, int] = {}  # pid -> largest VmHWM a block message reported (before its reset)
        self.dropped = 0  # messages the program could not send (the FIFO was full)
        self.names_dropped = 0
        self.unmatched = 0  # ends without a start (the start was dropped)
        self.marks = 0
        self.event_runs: dict[str, int] = {}  # name -> runs with events
        self.n_events = 0
        self.events_dropped = 0
        self.windows: Any = None  # cgroup.PeakWindows of the run's own cgroup, where it can be reset
        self.open_names: dict[str, int] = {}  # name -> runs open now
        self.recent: dict[str, float] = {}  # name -> first start, the most recently started or ended last
        self.marks_in: dict[str, int] = {}  # name -> marks made while a run of it was open (anywhere in the tree)
        self.version = 0  # bumped by every message: the live view's table is sent again only when it moved
        self.allocators = BlockAllocators()  # the GPU allocators' figures at block boundaries
        self.gpu_watch: Any = None  # the GPU memory watcher (`watch.GpuWatcher`), where one runs
        # ended runs waiting for the watcher's next read to take their GPU peak: (agg, run, pid, end, duration)
        self._gpu_pending: list[tuple[_Agg, _Run, int, float, float]] = []
        self.tree: Container[int] = ()  # the tracked tree's pids (the summary's process table)

    def feed(self, msgs: Sequence[dict[str, Any]], events: Any, sample_now: Callable[[], bool]) -> bool:
        """Fold messages in, adding their events; `sample_now()` before a run closes (its last sample). True
        when a run started since: the caller samples once more, so a short block is seen while it runs."""
        started = False
        for m in msgs:
            pid, kind = m["pid"], m.get("k")
            name = str(m.get("name", "?"))[:200]
            self.dropped += int(m.get("dropped", 0) or 0)
            hwm = m.get("hwm")
            if isinstance(hwm, int) and hwm > self.hwm.get(pid, 0):
                self.hwm[pid] = hwm
            if kind == "s" and len(self.open) < MAX_OPEN:
                self.allocators.start(m)
                evented = self._event_due(name)
                run = self.open[(pid, int(m.get("id", 0)))] = _Run(name, float(m["t"]), evented)
                self._opened(run)
                started = True
                if evented:
                    events.add("block_start", m["t"], f"block {name!r} started", pid=pid, name=name)
            elif kind == "e":
                # the run's last sample first (the caller keeps boundary samples apart)
                if (pid, int(m.get("id", 0))) in self.open and sample_now():
                    started = False
                self.allocators.end(m, name)
                self._end(m, pid, name, events)
            elif kind == "m":
                self.marks += 1
                for open_name in self.open_names:
                    self.marks_in[open_name] = self.marks_in.get(open_name, 0) + 1
                if self.marks <= MAX_MARK_EVENTS:
                    events.add("mark", m["t"], name, pid=pid, name=name)
                else:
                    self.events_dropped += 1
        # after the messages, not before: a table sent from a boundary sample taken meanwhile (before a run's
        # end was folded in) is sent again once this state is complete
        self.version += 1
        return started

    def _event_due(self, name: str) -> bool:
        runs = self.event_runs.get(name, 0)
        if runs >= EVENT_RUNS_PER_NAME or self.n_events >= MAX_BLOCK_EVENTS:
            self.events_dropped += 1
            return False
        self.event_runs[name] = runs + 1
        self.n_events += 2
        return True

    def _opened(self, run: _Run) -> None:
        name = run.name
        self.open_names[name] = self.open_names.get(name, 0) + 1
        self.recent[name] = self.recent.pop(name, run.start)
        if len(self.recent) > 2 * MAX_NAMES:  # a new name per run (f"step {i}"): the oldest go
            for old in list(self.recent)[:MAX_NAMES]:
                del self.recent[old]
        if self.windows is not None:
            run.window = self.windows.open()
        self._keep_gpu_reads()

    def _keep_gpu_reads(self) -> None:
        """The watcher keeps its reads from the oldest open or waiting run's start (its GPU peak is taken once it
        has ended and a read came at or after its start)."""
        if self.gpu_watch is not None:
            starts = [r.start for r in self.open.values()] + [item[1].start for item in self._gpu_pending]
            self.gpu_watch.keep_since(min(starts, default=None))

    def _closed(self, run: _Run) -> int | None:
        """The run left `open`: the job cgroup's peak over it (None: no exact figure)."""
        name = run.name
        left = self.open_names.pop(name, 1) - 1
        if left > 0:
            self.open_names[name] = left
        self.recent[name] = self.recent.pop(name, run.start)
        return self.windows.close(run.window) if run.window is not None else None

    def _end(self, m: dict[str, Any], pid: int, name: str, events: Any) -> None:
        run = self.open.pop((pid, int(m.get("id", 0))), None)
        if run is None:
            self.unmatched += 1
            return
        tree_exact = self._closed(run)
        agg = self.aggs.get(name)
        if agg is None:
            if len(self.aggs) >= MAX_NAMES:
                self.names_dropped += 1
                return
            agg = self.aggs[name] = _Agg(run.start)
        duration = float(m.get("dur", 0.0) or 0.0)
        peak = m.get("peak")
        self._gpu_over(agg, run, pid, float(m["t"]), duration)
        agg.add(run, pid, duration, float(m.get("cpu", 0.0) or 0.0), peak if isinstance(peak, int) else None)
        agg.add_tree(run, tree_exact, peak if isinstance(peak, int) else None)
        if run.evented:
            events.add("block_end", m["t"], f"block {name!r} ended after {duration:.3f} s", pid=pid, name=name)

    def _gpu_over(self, agg: _Agg, run: _Run, pid: int, end: float, duration: float) -> None:
        """The run's GPU memory from the watcher's reads over [start, end] (nothing without a watcher). A run no
        read fell in, ended before the watcher's next read, waits for that read (the one just after it)."""
        if self.gpu_watch is None:
            return
        self._gpu_pending.append((agg, run, pid, end, duration))
        self.settle_gpu()

    def settle_gpu(self) -> None:
        """The runs whose reads are all in (a read during each, or the one after it) take their GPU peak."""
        watch = self.gpu_watch
        if watch is None or not self._gpu_pending:
            return
        waiting = []
        for agg, run, pid, end, duration in self._gpu_pending:
            if not watch.has_read_since(run.start):
                waiting.append((agg, run, pid, end, duration))
                continue
            peak = watch.block_peak(pid, self.tree, run.start, end)
            if peak is not None:
                agg.add_gpu_watched(peak, duration < watch.period, watch.label())
        self._gpu_pending = waiting
        self._keep_gpu_reads()  # after: the reads of a run are kept until it has taken its peak

    def sample(self, readings: Sequence[Any], gpus: Sequence[Any]) -> None:
        """One sample of the tree while runs are open: each run's process figures (and the GPUs')."""
        self.settle_gpu()
        by_pid = {r.handle.pid: r for r in readings}
        util = sum(g.utilization_gpu for g in gpus if g.utilization_gpu is not None and g.mig_parent is None)
        # the tree's total as the summary counts it (summary.TreeFigures.total)
        tree = max(sum(r.pss for r in readings), max((r.rss for r in readings), default=0))
        for (pid, _id), run in self.open.items():
            run.n += 1
            run.tree_peak = max(run.tree_peak, tree)
            r = by_pid.get(pid)
            if r is not None and r.rss:  # an exiting process holds nothing: no figure of the block
                run.peak_private = max(run.peak_private, r.private)
                run.peak_rss = max(run.peak_rss, r.rss)
            if gpus:
                run.gpu_n += 1
                run.gpu_util += util
                run.peak_gpu = max(run.peak_gpu, _gpu_of(pid, run.start, gpus))

    def summary(self) -> list[dict[str, Any]]:
        """The `blocks` list of the report, in order of first start."""
        self.settle_gpu()
        items = sorted(self.aggs.items(), key=lambda kv: kv[1].first)
        source = self.windows.source if self.windows is not None else None
        out = [agg.as_dict(name, source) for name, agg in items]
        for b in out:
            b["marks"] = self.marks_in.get(b["name"], 0)
            b["gpu_allocator"] = self.allocators.summary(b["name"])
            if b["gpu_allocator"]:
                b["sources"]["gpu_allocator"] = ALLOC_EXACT if all(a["exact"] for a in b["gpu_allocator"]) else BRACKET
        return out

    def live(self) -> dict[str, Any]:
        """The live view's blocks table (`models.LiveBlocks`): the MAX_LIVE names most recently active, in
        order of first start, with their ended runs' figures and what the samples saw of their open runs."""
        names = list(self.recent)[-MAX_LIVE:]
        opened: dict[str, _Run] = {}  # name -> a run summing its open runs' sampled peaks (max) and oldest start
        for run in self.open.values():
            acc = opened.get(run.name)
            if acc is None:
                acc = opened[run.name] = _Run(run.name, run.start, False)
            acc.start = min(acc.start, run.start)
            acc.n += run.n
            acc.peak_rss = max(acc.peak_rss, run.peak_rss)
            acc.peak_private = max(acc.peak_private, run.peak_private)
            acc.peak_gpu = max(acc.peak_gpu, run.peak_gpu)
            acc.gpu_n += run.gpu_n
            acc.tree_peak = max(acc.tree_peak, run.tree_peak)
        rows = [_live_row(name, self.aggs.get(name), opened.get(name), self) for name in names]
        rows.sort(key=lambda row: self.recent[row["name"]])
        n_names = len(self.aggs) + sum(1 for name in self.open_names if name not in self.aggs)
        return {"blocks": rows, "names": n_names, "marks": self.marks, "open_runs": len(self.open)}

    def close(self) -> None:
        """Tracking ends: the cgroup windows of runs still open are closed (no figure)."""
        if self.windows is not None:
            for run in self.open.values():
                if run.window is not None:
                    self.windows.close(run.window, read=False)
                    run.window = None

    def notes(self) -> list[str]:
        out = []
        if self.dropped:
            out.append(f"{self.dropped} block messages dropped (the program sent them faster than we read)")
        if self.unmatched:
            out.append(f"{self.unmatched} block ends without their start (dropped) were left out")
        if self.names_dropped:
            out.append(f"block names past the first {MAX_NAMES}: {self.names_dropped} runs left out")
        if self.events_dropped:
            out.append(
                f"{self.events_dropped} block runs and marks left off the event timeline (kept: the first "
                f"{EVENT_RUNS_PER_NAME} runs of each block, {MAX_BLOCK_EVENTS} block events, {MAX_MARK_EVENTS} marks); "
                "their figures are all in `blocks`"
            )
        if self.open:
            out.append(f"{len(self.open)} block runs had not ended when tracking stopped (left out)")
        return out


def _gpu_of(pid: int, start: float, gpus: Sequence[Any]) -> int:
    """What `pid` held on the GPUs in this sample: the watcher's highest read since the run started (only reads
    after `start`: the sample's window may reach back before it), else the sample's own reading."""
    window = next((g.window for g in gpus if g.window is not None), None)
    if window is None:
        return sum(g.processes.get(pid, 0) for g in gpus)
    return max(
        (sum(p.get(pid, 0) for p in s.procs.values()) for s in window.seen if s.last >= start),
        default=0,
    )


def _max(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _live_row(name: str, agg: _Agg | None, run: _Run | None, stats: BlockStats) -> dict[str, Any]:
    """One row of `BlockStats.live`: figures of the ended runs (agg), peaks the samples saw of the open ones."""
    calls = agg.calls if agg is not None else 0
    total = agg.d_sum if agg is not None else 0.0
    seen = run if run is not None and run.n else None  # open runs a sample saw (else nothing known of them)
    return {
        "name": name,
        "calls": calls,
        "open": stats.open_names.get(name, 0),
        "open_since": run.start if run is not None else None,
        "duration_total": total,
        "duration_mean": total / calls if calls else None,
        "peak_ram": _max(agg.peak_ram if agg else None, seen.peak_rss if seen else None),
        "peak_private": _max(agg.peak_private if agg else None, (seen.peak_private or None) if seen else None),
        "peak_gpu_ram": _max(agg.peak_gpu if agg else None, seen.peak_gpu if seen and seen.gpu_n else None),
        "tree_peak_ram": _max(agg.tree_peak if agg else None, seen.tree_peak if seen else None),
        "cpu_seconds": agg.cpu if agg is not None else 0.0,
        "marks": stats.marks_in.get(name, 0),
    }
