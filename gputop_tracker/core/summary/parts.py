"""What a part of the summary does beside the builder: it sees each sample, readies its figures before the report
and adds its own section to it. The builder owns its parts and calls them; a part never reaches into another.
(Code blocks are one: `core/blocks/summary.BlocksPart`.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gputop_tracker.core.gpu import GpuReading
from gputop_tracker.core.proc.procfs import Reading


class SummaryPart(Protocol):
    def sampled(self, readings: Sequence[Reading], gpus: Sequence[GpuReading]) -> None:
        """After the builder took in a sample."""

    def before_report(self, builder: Any) -> None:
        """Before a report is built: hand the builder what this part knows of the processes' own figures."""

    def report(self, out: dict[str, Any]) -> None:
        """Its section of the report (`out` is the `models.ResourceUsage` dict)."""
