"""Code blocks on the sampler's side: the FIFO the tracked program writes to, and per-block figures.
Its face: `__all__` (`core/face.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop_tracker.core.face import lazy

_FACE = {
    "BlockInbox": "inbox",
    "ENV": "protocol",
    "InProcess": "probe",
    "history_setting": "probe",
}
__all__ = [
    "ENV",
    "BlockInbox",
    "InProcess",
    "history_setting",
]


__getattr__ = lazy(__name__, _FACE, globals())

if TYPE_CHECKING:
    from gputop_tracker.core.blocks.inbox import BlockInbox
    from gputop_tracker.core.blocks.probe import InProcess, history_setting
    from gputop_tracker.core.blocks.protocol import ENV
