"""What a live view keeps between samples for drawing: the short per-GPU histories its sparklines show, and
the run's time series its charts plot (a bounded ring over the whole run).

The run-so-far figures (peaks, CPU-seconds, means) are not counted here: the sampler sends its own
running summary (`channel.Progress`, the same `SummaryBuilder.summary` the final report prints). This
lives in core so history never rides in UI messages (which a UI may drop) and is testable without a screen;
it keeps counting while the view is paused.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputop_tracker.core.model.models import Sample

HISTORY = 120  # sparkline points kept per GPU
CHART_POINTS = 512  # points kept per chart series, whatever the length of the run
PROCESSES_KEPT = 4096  # per-process memos kept (those of exited processes are the first to go)


@dataclass
class GpuHistory:
    util: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    memory: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))


class TimeRing:
    """Named series over elapsed time, the whole run in at most `capacity` points.

    When full, neighbouring points merge pairwise — the larger value kept, so a peak is never averaged
    away — and from then on each point covers twice as many samples (`stride`). Series may start late
    (a GPU seen later): their earlier points are None. The exact peak of each series is kept apart.
    """

    def __init__(self, capacity: int = CHART_POINTS) -> None:
        self.capacity = max(4, capacity - capacity % 2)
        self.times: list[float] = []
        self.columns: dict[str, list[float | None]] = {}
        self.peaks: dict[str, tuple[float, float]] = {}  # name -> (value, elapsed)
        self.stride = 1
        self._pending: dict[str, float | None] = {}
        self._pending_n = 0

    def __len__(self) -> int:
        return len(self.times)

    def add(self, elapsed: float, values: dict[str, float | None]) -> None:
        for name, v in values.items():
            if v is not None and (name not in self.peaks or v > self.peaks[name][0]):
                self.peaks[name] = (v, elapsed)
            self._pending[name] = _larger(self._pending.get(name), v)
        self._pending_n += 1
        if self._pending_n < self.stride:
            return
        for name in self._pending:
            if name not in self.columns:
                self.columns[name] = [None] * len(self.times)
        for name, col in self.columns.items():
            col.append(self._pending.get(name))
        self.times.append(elapsed)
        self._pending = {}
        self._pending_n = 0
        if len(self.times) >= self.capacity:
            self._halve()

    def _halve(self) -> None:
        self.times = self.times[1::2]
        for name, col in self.columns.items():
            self.columns[name] = [_larger(a, b) for a, b in zip(col[0::2], col[1::2], strict=True)]
        self.stride *= 2

    def series(self, name: str) -> list[float | None]:
        return self.columns.get(name, [None] * len(self.times))


def _larger(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


@dataclass
class ProcessMemo:
    """What the view saw of one process over its life: for its detail pane."""

    first_seen: float  # elapsed seconds of the first sample that had it
    peak_rss: int = 0
    peak_private: int = 0
    peak_cpu_percent: float = 0.0
    peak_gpu: dict[str, int] = field(default_factory=dict)  # GPU uuid -> bytes


@dataclass
class SampleHistory:
    """The last `HISTORY` values per GPU (sparklines), the run's chart series, and how many samples were seen.

    Chart series: `ram` (the tree's Σ PSS), `private` (its Σ USS), `cpu` (% of one core), and per GPU
    `gpuN_memory` (what the tree holds on it) and `gpuN_util` (%)."""

    n_samples: int = 0
    gpus: dict[int, GpuHistory] = field(default_factory=dict)
    chart: TimeRing = field(default_factory=TimeRing)
    processes: dict[int, ProcessMemo] = field(default_factory=dict)

    def add(self, s: Sample) -> None:
        self.n_samples += 1
        self._remember(s)
        values: dict[str, float | None] = {
            "ram": float(s.tree.combined_total),
            "private": float(s.tree.combined_private),
            "cpu": s.tree.cpu_percent,
        }
        for g in s.gpus:
            h = self.gpus.setdefault(g.index, GpuHistory())
            if g.utilization_gpu is not None:
                h.util.append(g.utilization_gpu)
            if g.memory_used is not None:
                h.memory.append(float(g.memory_used))
            values[f"gpu{g.index}_memory"] = float(g.tree_memory)
            values[f"gpu{g.index}_util"] = g.utilization_gpu
        self.chart.add(s.elapsed, values)

    def _remember(self, s: Sample) -> None:
        for p in s.processes:
            m = self.processes.get(p.pid)
            if m is None:
                m = self.processes[p.pid] = ProcessMemo(first_seen=s.elapsed)
            m.peak_rss = max(m.peak_rss, p.peak_rss, p.rss)
            m.peak_private = max(m.peak_private, p.private)
            m.peak_cpu_percent = max(m.peak_cpu_percent, p.cpu_percent)
            for uuid, n in p.gpu_memory.items():
                m.peak_gpu[uuid] = max(m.peak_gpu.get(uuid, 0), n)
        if len(self.processes) > PROCESSES_KEPT:
            alive = {p.pid for p in s.processes}
            for pid in [pid for pid in self.processes if pid not in alive][: len(self.processes) - PROCESSES_KEPT]:
                del self.processes[pid]

    @property
    def gpu_indices(self) -> list[int]:
        return sorted(self.gpus)
