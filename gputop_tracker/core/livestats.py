"""The run-so-far figures a live view shows between samples, counted as the final report counts them.

The sampler's `SummaryBuilder` owns the report; the front end only sees `Sample`s. This folds those
samples into the same peaks and means (Σ PSS or the largest exact single-process peak, exact CPU-seconds,
mean of the summed utilizations) and keeps the short histories the sparklines draw. It lives in core so
history never rides in UI messages (which a UI may drop) and so it is testable without a screen.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputop_tracker.core.models import Sample

HISTORY = 120  # sparkline points kept per GPU


@dataclass
class GpuStats:
    util_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    memory_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    util_sum: float = 0.0
    util_n: int = 0
    util_max: float = 0.0
    tree_peak_memory: int = 0
    peak_memory_used: int = 0

    @property
    def mean_utilization(self) -> float | None:
        return self.util_sum / self.util_n if self.util_n else None


@dataclass
class LiveStats:
    """Running maxima and means over every sample seen so far."""

    n_samples: int = 0
    elapsed: float = 0.0
    peak_combined: int = 0  # max(largest Σ PSS in a sample, largest exact single-process peak): the report's rule
    peak_private: int = 0  # Σ USS
    peak_main_rss: int = 0
    peak_threads: int = 0
    peak_gpu_memory: int = 0
    peak_host_used: int = 0
    cpu_seconds: float = 0.0
    cpu_percent_sum: float = 0.0
    cpu_percent_max: float = 0.0
    gpu_util_sum: float = 0.0  # summed over counted GPUs, as the report's gpu_percentages
    gpu_util_max: float = 0.0
    gpu_util_n: int = 0
    processes_seen: set[int] = field(default_factory=set)
    gpus: dict[int, GpuStats] = field(default_factory=dict)

    def add(self, s: Sample) -> None:
        t = s.tree
        self.n_samples += 1
        self.elapsed = s.elapsed
        single = max((p.peak_rss for p in s.processes), default=0)
        self.peak_combined = max(self.peak_combined, t.combined_total, single)
        self.peak_private = max(self.peak_private, t.combined_private)
        self.peak_main_rss = max(self.peak_main_rss, t.main_rss)
        self.peak_threads = max(self.peak_threads, t.threads)
        self.peak_gpu_memory = max(self.peak_gpu_memory, t.gpu_memory)
        self.peak_host_used = max(self.peak_host_used, s.host.memory_used)
        self.cpu_seconds = max(self.cpu_seconds, t.cpu_seconds)
        self.cpu_percent_sum += t.cpu_percent
        self.cpu_percent_max = max(self.cpu_percent_max, t.cpu_percent)
        self.processes_seen.update(p.pid for p in s.processes)
        if s.gpus:
            total = 0.0
            for g in s.gpus:
                st = self.gpus.setdefault(g.index, GpuStats())
                util = g.utilization_gpu
                if util is not None:
                    st.util_history.append(util)
                    st.util_sum += util
                    st.util_n += 1
                    st.util_max = max(st.util_max, util)
                    if g.counted:
                        total += util
                if g.memory_used is not None:
                    st.memory_history.append(float(g.memory_used))
                    st.peak_memory_used = max(st.peak_memory_used, g.memory_used)
                st.tree_peak_memory = max(st.tree_peak_memory, g.tree_memory)
            self.gpu_util_sum += total
            self.gpu_util_max = max(self.gpu_util_max, total)
            self.gpu_util_n += 1

    @property
    def mean_cpu_percent(self) -> float:
        """Mean of the sampled tree CPU % (100 = one core): the report's combined mean."""
        return self.cpu_percent_sum / self.n_samples if self.n_samples else 0.0

    @property
    def cpu_time_percent(self) -> float:
        """CPU-seconds over wall time (the report's "% of one core on average")."""
        return 100.0 * self.cpu_seconds / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def mean_gpu_util(self) -> float | None:
        return self.gpu_util_sum / self.gpu_util_n if self.gpu_util_n else None
