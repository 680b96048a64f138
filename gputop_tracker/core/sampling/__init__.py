"""Where figures are measured: the sampler process (launch or attach, read /proc each interval, the job cgroup,
OOM detection, the command's output) and the pipe that carries its messages to the front end.
Its face: `__all__` (`core/face.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop_tracker.core.face import lazy

_FACE = {
    "FileWatch": "filewatch",
    "LineFramer": "framing",
    "STOP_SIGNAL": "channel",
    "SamplerHandle": "channel",
    "become_subreaper": "orphans",
    "channel": "",
    "not_ignored": "jobctl",
    "orphans": "",
    "prepare": "channel",
    "start_forked": "channel",
    "start_spawned": "channel",
}
__all__ = [
    "STOP_SIGNAL",
    "FileWatch",
    "LineFramer",
    "SamplerHandle",
    "become_subreaper",
    "channel",
    "not_ignored",
    "orphans",
    "prepare",
    "start_forked",
    "start_spawned",
]
__getattr__ = lazy(__name__, _FACE, globals())

if TYPE_CHECKING:
    from gputop_tracker.core.sampling import channel, orphans
    from gputop_tracker.core.sampling.channel import STOP_SIGNAL, SamplerHandle, prepare, start_forked, start_spawned
    from gputop_tracker.core.sampling.filewatch import FileWatch
    from gputop_tracker.core.sampling.framing import LineFramer
    from gputop_tracker.core.sampling.jobctl import not_ignored
    from gputop_tracker.core.sampling.orphans import become_subreaper
