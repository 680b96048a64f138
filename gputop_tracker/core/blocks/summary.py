"""Code blocks as a part of the session's summary (`summary.parts.SummaryPart`), owned by its `SummaryBuilder`.

It keeps a `BlockStats` (fed by the Engine's `BlockRelay`), hands it the figures of each sample while a
block runs, and puts `blocks` (and their notes) in the report. A block resets its process's VmHWM: the
VmHWM read just before (in its message) still counts for that process's peak and the tree's, so the run's
peaks never lose what a reset cleared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gputop_tracker.core.blocks.stats import BlockStats
from gputop_tracker.core.gpu import GpuReading
from gputop_tracker.core.proc.procfs import Reading
from gputop_tracker.core.summary.builder import SummaryBuilder

LIVE_PERIOD = 0.5  # seconds at least between two live block tables


class BlocksPart:
    def __init__(self, builder: SummaryBuilder) -> None:
        self.stats = BlockStats()
        self.stats.tree = builder.procs
        self.live_version = 0  # BlockStats.version when the live table was last sent
        self.next_live = 0.0

    @classmethod
    def attach(cls, builder: SummaryBuilder) -> BlocksPart:
        part = cls(builder)
        builder.parts.append(part)
        return part

    def sampled(self, readings: Sequence[Reading], gpus: Sequence[GpuReading]) -> None:
        if self.stats.open:  # code blocks running now: their process's figures
            self.stats.sample(readings, gpus)
        else:  # ended runs still waiting for the GPU watcher's next read
            self.stats.settle_gpu()

    def live_blocks(self, now: float) -> dict[str, Any] | None:
        """The live view's blocks table (`models.LiveBlocks`) when blocks changed since it was last sent and
        LIVE_PERIOD has passed (monotonic `now`); None otherwise — never anything for a run without blocks."""
        if self.stats.version == self.live_version or now < self.next_live:
            return None
        self.live_version, self.next_live = self.stats.version, now + LIVE_PERIOD
        return self.stats.live()

    def before_report(self, builder: SummaryBuilder) -> None:
        """Each process's VmHWM as its blocks read it before their resets: into its peak (by the same rule as a
        sample's VmHWM), and to the builder, whose figures take it as evidence (`ProcessFacts.blocks`)."""
        for pid, hwm in self.stats.hwm.items():
            p = builder.procs.get(pid)
            if p is None or (p.peak_before_attach is not None and hwm <= p.peak_before_attach):
                continue  # attached: a VmHWM not above the one at the attach is from before it
            p.see_hwm(hwm)
            builder.cleared_hwm[pid] = max(hwm, builder.cleared_hwm.get(pid, 0))
            if pid in builder.reaped_maxrss and hwm > builder.reaped_maxrss[pid]:
                builder.reaped_maxrss[pid] = hwm

    def report(self, out: dict[str, Any]) -> None:
        out["blocks"] = self.stats.summary()
        out["notes"] = [*out["notes"], *self.stats.notes()]
