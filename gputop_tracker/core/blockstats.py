"""Per-block figures: the block messages of the tracked program folded with the samples taken meanwhile.

Exact figures come from the process that ran the block (its message): duration, CPU seconds (process CPU
time across the block), and peak RAM (VmHWM reset at entry, read at exit). Sampled figures come from the
samples taken while a run was open (the sampler takes one at every block boundary): peak private memory and
GPU memory of that process, and the GPUs' utilization. `hwm` keeps each process's VmHWM as it was just
before a block reset it, so the run's own peaks never lose what a reset cleared.
Plain Python: it runs in the sampler.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

MAX_OPEN = 10_000  # runs open at once (a program that never closes its blocks must not grow us forever)
MAX_NAMES = 1_000  # distinct block names kept; later names are counted, not kept
MAX_PIDS = 100  # pids listed per block
# block_start/block_end events: the first runs of each name, and at most so many in all (a step called a
# million times must not push process and alert events out of the bounded timeline); marks alike
EVENT_RUNS_PER_NAME = 100
MAX_BLOCK_EVENTS = 2000
MAX_MARK_EVENTS = 1000


class _Run:
    """One open run of a block."""

    __slots__ = ("evented", "gpu_n", "gpu_util", "n", "name", "peak_gpu", "peak_private", "peak_rss", "start")

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
        "gpu_n",
        "gpu_util",
        "peak_exact",
        "peak_gpu",
        "peak_private",
        "peak_ram",
        "pids",
        "sampled_runs",
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
            self.peak_gpu = max(self.peak_gpu or 0, run.peak_gpu)
            self.gpu_util += run.gpu_util
            self.gpu_n += run.gpu_n

    def as_dict(self, name: str) -> dict[str, Any]:
        n = self.calls
        mean = self.d_sum / n
        var = max(self.d_sq / n - mean * mean, 0.0)
        sampled = f"sampled lower bound ({self.sampled_runs} of {n} runs seen by a sample)"
        return {
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
            "sources": {
                "duration": "exact (the process's monotonic clock)",
                "peak_ram": "exact (VmHWM reset at entry, read at exit)" if self.peak_exact else sampled,
                "peak_private": sampled,
                "peak_gpu_ram": sampled,
                "cpu_seconds": "exact (the process's CPU time across the block, all its threads)",
                "mean_cpu_percent": "exact (cpu_seconds / duration)",
                "mean_gpu_utilization": sampled,
            },
        }


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
                evented = self._event_due(name)
                self.open[(pid, int(m.get("id", 0)))] = _Run(name, float(m["t"]), evented)
                started = True
                if evented:
                    events.add("block_start", m["t"], f"block {name!r} started", pid=pid, name=name)
            elif kind == "e":
                # the run's last sample first (the caller keeps boundary samples apart)
                if (pid, int(m.get("id", 0))) in self.open and sample_now():
                    started = False
                self._end(m, pid, name, events)
            elif kind == "m":
                self.marks += 1
                if self.marks <= MAX_MARK_EVENTS:
                    events.add("mark", m["t"], name, pid=pid, name=name)
                else:
                    self.events_dropped += 1
        return started

    def _event_due(self, name: str) -> bool:
        runs = self.event_runs.get(name, 0)
        if runs >= EVENT_RUNS_PER_NAME or self.n_events >= MAX_BLOCK_EVENTS:
            self.events_dropped += 1
            return False
        self.event_runs[name] = runs + 1
        self.n_events += 2
        return True

    def _end(self, m: dict[str, Any], pid: int, name: str, events: Any) -> None:
        run = self.open.pop((pid, int(m.get("id", 0))), None)
        if run is None:
            self.unmatched += 1
            return
        agg = self.aggs.get(name)
        if agg is None:
            if len(self.aggs) >= MAX_NAMES:
                self.names_dropped += 1
                return
            agg = self.aggs[name] = _Agg(run.start)
        duration = float(m.get("dur", 0.0) or 0.0)
        peak = m.get("peak")
        agg.add(run, pid, duration, float(m.get("cpu", 0.0) or 0.0), peak if isinstance(peak, int) else None)
        if run.evented:
            events.add("block_end", m["t"], f"block {name!r} ended after {duration:.3f} s", pid=pid, name=name)

    def sample(self, readings: Sequence[Any], gpus: Sequence[Any]) -> None:
        """One sample of the tree while runs are open: each run's process figures (and the GPUs')."""
        by_pid = {r.handle.pid: r for r in readings}
        util = sum(g.utilization_gpu for g in gpus if g.utilization_gpu is not None and g.mig_parent is None)
        for (pid, _id), run in self.open.items():
            run.n += 1
            r = by_pid.get(pid)
            if r is not None and r.rss:  # an exiting process holds nothing: no figure of the block
                run.peak_private = max(run.peak_private, r.private)
                run.peak_rss = max(run.peak_rss, r.rss)
            if gpus:
                run.gpu_n += 1
                run.gpu_util += util
                run.peak_gpu = max(run.peak_gpu, sum(g.processes.get(pid, 0) for g in gpus))

    def summary(self) -> list[dict[str, Any]]:
        """The `blocks` list of the report, in order of first start."""
        items = sorted(self.aggs.items(), key=lambda kv: kv[1].first)
        return [agg.as_dict(name) for name, agg in items]

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
