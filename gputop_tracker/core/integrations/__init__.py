"""The outside worlds a run lives in or reports to: SLURM, and exporters for monitoring systems (Prometheus).
Its face: `__all__` (`core/face.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop_tracker.core.face import lazy

_FACE = {
    "DEFAULT_TOP_PROCESSES": "exporters.base",
    "ExportError": "exporters.base",
    "ExportOptions": "exporters.base",
    "Exporter": "exporters",
    "SessionInfo": "exporters.base",
    "command_of": "exporters.base",
    "open_exporter": "exporters",
    "slurm": "",
}
__all__ = [
    "DEFAULT_TOP_PROCESSES",
    "ExportError",
    "ExportOptions",
    "Exporter",
    "SessionInfo",
    "command_of",
    "open_exporter",
    "slurm",
]
__getattr__ = lazy(__name__, _FACE, globals())

if TYPE_CHECKING:
    from gputop_tracker.core.integrations import slurm
    from gputop_tracker.core.integrations.exporters import Exporter, open_exporter
    from gputop_tracker.core.integrations.exporters.base import (
        DEFAULT_TOP_PROCESSES,
        ExportError,
        ExportOptions,
        SessionInfo,
        command_of,
    )
