"""The latest figures the front end received from the sampler, kept for exporters to read at any time.

Fed from the thread that reads the sampler's pipe (`observe`: references kept, counters bumped — no
figure is computed again here), read from scrape or writer threads (`snapshot`). The sampler sends a
`sample` each interval and a `progress` (the report's figures so far) at most once a second.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gputop_tracker.core.integrations.exporters.base import SessionInfo

if TYPE_CHECKING:
    from gputop_tracker.core.model.models import ResourceUsage, Sample
    from gputop_tracker.core.sampling.channel import Message

ALERT_LEVELS = ("warning", "critical")


@dataclass(frozen=True)
class Snapshot:
    info: SessionInfo
    sample: Sample | None
    progress: ResourceUsage | None
    cpu_user: float
    cpu_system: float
    alerts: dict[tuple[str, str], int] = field(default_factory=dict)  # (level, resource) -> crossings
    ooms: int = 0
    gpus_lost: int = 0
    samples: int = 0


class LatestFigures:
    def __init__(self, info: SessionInfo) -> None:
        self.info = info
        self._lock = threading.Lock()
        self._sample: Sample | None = None
        self._progress: ResourceUsage | None = None
        self._cpu = (0.0, 0.0)  # (user, system): the exact ledger, never allowed to run backwards
        self._alerts: Counter[tuple[str, str]] = Counter({(level, "ram"): 0 for level in ALERT_LEVELS})
        self._ooms = 0
        self._gpus_lost = 0
        self._samples = 0

    def observe(self, msg: Message) -> bool:
        """Keep what `msg` brings; True for the first sample (a writer may want to write at once)."""
        from gputop_tracker.core.sampling.channel import EventMessage, Progress, SampleMessage, Started, Summary

        with self._lock:
            if isinstance(msg, SampleMessage):
                self._sample = msg.sample
                self._samples += 1
                return self._samples == 1
            if isinstance(msg, Progress | Summary):
                self._progress = msg.usage
                cpu = msg.usage.cpu_time
                self._cpu = (max(self._cpu[0], cpu.user), max(self._cpu[1], cpu.system))
                if not self.info.session and msg.usage.session_id:
                    self.info.session = msg.usage.session_id
            elif isinstance(msg, Started):
                self.info.session = msg.session_id
            elif isinstance(msg, EventMessage):
                self._count(msg.event.type, msg.event.resource)
        return False

    def _count(self, kind: str, resource: str | None) -> None:
        if kind in ALERT_LEVELS:
            self._alerts[(kind, resource or "ram")] += 1
        elif kind in ("oom", "gpu_oom"):  # the kernel, the output, the API, the probe (a CUDA OOM)
            self._ooms += 1
        elif kind == "gpu_lost":
            self._gpus_lost += 1

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                info=self.info,
                sample=self._sample,
                progress=self._progress,
                cpu_user=self._cpu[0],
                cpu_system=self._cpu[1],
                alerts=dict(self._alerts),
                ooms=self._ooms,
                gpus_lost=self._gpus_lost,
                samples=self._samples,
            )
