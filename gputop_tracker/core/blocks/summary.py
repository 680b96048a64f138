"""The session's `SummaryBuilder` with code blocks: the sampler's builder (`SummaryBuilder` stays as it is).

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
from gputop_tracker.core.summary.probe import ProbeStats

LIVE_PERIOD = 0.5  # seconds at least between two live block tables


class BlocksSummaryBuilder(SummaryBuilder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.blocks = BlockStats()
        self.probe = ProbeStats(False)  # the in-process probe's exit reports (the relay binds its own)
        self.blocks.tree = self.procs
        self.live_version = 0  # BlockStats.version when the live table was last sent
        self.next_live = 0.0

    def add(
        self,
        now: float,
        readings: Sequence[Reading],
        gpus: Sequence[GpuReading],
        host: tuple[int, int, float],
        want_sample: bool = False,
    ) -> dict[str, Any] | None:
        out = super().add(now, readings, gpus, host, want_sample=want_sample)
        if self.blocks.open:  # code blocks running now: their process's figures
            self.blocks.sample(readings, gpus)
        else:  # ended runs still waiting for the GPU watcher's next read
            self.blocks.settle_gpu()
        return out

    def live_blocks(self, now: float) -> dict[str, Any] | None:
        """The live view's blocks table (`models.LiveBlocks`) when blocks changed since it was last sent and
        LIVE_PERIOD has passed (monotonic `now`); None otherwise — never anything for a run without blocks."""
        if self.blocks.version == self.live_version or now < self.next_live:
            return None
        self.live_version, self.next_live = self.blocks.version, now + LIVE_PERIOD
        return self.blocks.live()

    def summary(self, *, details: bool = True, job: dict[str, Any] | None = None) -> dict[str, Any]:
        apply_block_hwm(self)
        out = super().summary(details=details, job=job)
        out["blocks"] = self.blocks.summary()
        out["notes"] = [*out["notes"], *self.blocks.notes()]
        return out


def apply_block_hwm(b: BlocksSummaryBuilder) -> None:
    """Each process's VmHWM as its blocks read it before their resets: into its peak (and its ru_maxrss,
    which after a reset is only the peak since the reset)."""
    for pid, hwm in b.blocks.hwm.items():
        p = b.procs.get(pid)
        if p is None or (p.peak_before_attach is not None and hwm <= p.peak_before_attach):
            continue  # attached: a VmHWM not above the one at the attach is from before it
        if p.hwm_at_attach is not None:
            p.hwm_at_attach, p.peak_source = None, "VmHWM"  # a new peak while attached, as in ProcessStats.update
        if hwm > p.peak_rss:
            p.peak_rss = hwm
        if p.rusage_maxrss is not None and hwm > p.rusage_maxrss:
            p.rusage_maxrss = hwm
        if pid in b.reaped_maxrss and hwm > b.reaped_maxrss[pid]:
            b.reaped_maxrss[pid] = hwm
