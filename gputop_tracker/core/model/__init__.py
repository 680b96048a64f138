"""What the tool's figures are: the pydantic models (one schema per shape), units, the sampler's configuration,
every path the tool reads or writes, checks of user input, and text made safe to show.
Its face: `__all__` (`core/face.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop_tracker.core.face import lazy

_FACE = {
    "BlocksMessage": "messages",
    "EngineConfig": "config",
    "Event": "models",
    "EventMessage": "messages",
    "Failed": "messages",
    "GpuSample": "models",
    "HostSample": "models",
    "JOB_SIGNALS": "config",
    "LiveBlock": "models",
    "LiveBlocks": "models",
    "Message": "messages",
    "ProcessSample": "models",
    "Progress": "messages",
    "ResourceUsage": "models",
    "Sample": "models",
    "SampleMessage": "messages",
    "Session": "models",
    "SlurmJob": "models",
    "Started": "messages",
    "Summary": "messages",
    "UnitError": "units",
    "Units": "units",
    "clean_output": "text",
    "escape_controls": "text",
    "human_bytes": "units",
    "human_seconds": "units",
    "parse_byte_size": "units",
    "paths": "",
    "validate": "",
}
__all__ = [
    "JOB_SIGNALS",
    "BlocksMessage",
    "EngineConfig",
    "Event",
    "EventMessage",
    "Failed",
    "GpuSample",
    "HostSample",
    "LiveBlock",
    "LiveBlocks",
    "Message",
    "ProcessSample",
    "Progress",
    "ResourceUsage",
    "Sample",
    "SampleMessage",
    "Session",
    "SlurmJob",
    "Started",
    "Summary",
    "UnitError",
    "Units",
    "clean_output",
    "escape_controls",
    "human_bytes",
    "human_seconds",
    "parse_byte_size",
    "paths",
    "validate",
]
__getattr__ = lazy(__name__, _FACE, globals())

if TYPE_CHECKING:
    from gputop_tracker.core.model import paths, validate
    from gputop_tracker.core.model.config import JOB_SIGNALS, EngineConfig
    from gputop_tracker.core.model.messages import (
        BlocksMessage,
        EventMessage,
        Failed,
        Message,
        Progress,
        SampleMessage,
        Started,
        Summary,
    )
    from gputop_tracker.core.model.models import (
        Event,
        GpuSample,
        HostSample,
        LiveBlock,
        LiveBlocks,
        ProcessSample,
        ResourceUsage,
        Sample,
        Session,
        SlurmJob,
    )
    from gputop_tracker.core.model.text import clean_output, escape_controls
    from gputop_tracker.core.model.units import UnitError, Units, human_bytes, human_seconds, parse_byte_size
