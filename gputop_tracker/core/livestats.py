"""What a live view keeps between samples for drawing: the short per-GPU histories its sparklines show.

The run-so-far figures (peaks, CPU-seconds, means) are not counted here: the sampler sends its own
running summary (`channel.Progress`, the same `SummaryBuilder.summary` the final report prints). This
lives in core so history never rides in UI messages (which a UI may drop) and is testable without a screen.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputop_tracker.core.models import Sample

HISTORY = 120  # sparkline points kept per GPU


@dataclass
class GpuHistory:
    util: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    memory: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))


@dataclass
class SampleHistory:
    """The last `HISTORY` values per GPU, and how many samples were seen."""

    n_samples: int = 0
    gpus: dict[int, GpuHistory] = field(default_factory=dict)

    def add(self, s: Sample) -> None:
        self.n_samples += 1
        for g in s.gpus:
            h = self.gpus.setdefault(g.index, GpuHistory())
            if g.utilization_gpu is not None:
                h.util.append(g.utilization_gpu)
            if g.memory_used is not None:
                h.memory.append(float(g.memory_used))
