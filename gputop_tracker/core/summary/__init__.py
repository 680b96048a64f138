"""Where samples become the report: `builder.SummaryBuilder` composed of small accumulators, the rules that pick
and label each peak, alerts and events, and how much of a job's request was used.
Its face: `__all__` (`core/face.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop_tracker.core.face import lazy

_FACE = {
    "EVENT_TYPES": "events",
    "GpuHistory": "livestats",
    "ProcessMemo": "livestats",
    "SampleHistory": "livestats",
    "is_oom_exception": "events",
}
__all__ = [
    "EVENT_TYPES",
    "GpuHistory",
    "ProcessMemo",
    "SampleHistory",
    "is_oom_exception",
]
__getattr__ = lazy(__name__, _FACE, globals())

if TYPE_CHECKING:
    from gputop_tracker.core.summary.events import EVENT_TYPES, is_oom_exception
    from gputop_tracker.core.summary.livestats import GpuHistory, ProcessMemo, SampleHistory
