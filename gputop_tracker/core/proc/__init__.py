"""The kernel's own figures, read: every tracked process's stat, statm and status (VmHWM) from /proc (procfs),
smaps_rollup (smaps), the machine (host), cgroups (cgroup), CPU windows (cpuwindow), and a process's own VmHWM
read in-process by code blocks (vmhwm).

The lowest floor of core: it imports nothing of the package but itself.
Its face: `__all__` (`core/face.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop_tracker.core.face import lazy

_FACE = {
    "own_peak_rss": "vmhwm",
}
__all__ = [
    "own_peak_rss",
]


__getattr__ = lazy(__name__, _FACE, globals())

if TYPE_CHECKING:
    from gputop_tracker.core.proc.vmhwm import own_peak_rss
