"""gputop-tracker: what a job's whole process tree really used — RAM, CPU, threads, GPU memory and utilization."""

from __future__ import annotations

from gputop_tracker._version import __version__

TYPE_CHECKING = False  # not `typing`'s: this module loads first, and a Ctrl-C early in start-up must stay quiet
if TYPE_CHECKING:
    from typing import Any

    from gputop_tracker.api.blocks import block, mark, tracked
    from gputop_tracker.api.tracker import Tracker, TrackerError

__all__ = ["Tracker", "TrackerError", "__version__", "block", "load_ipython_extension", "mark", "tracked"]


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext gputop_tracker`: the `%%gputop` cell magic and `%gputop start|stop` (gputop_tracker/api/magics.py)."""
    from gputop_tracker.api import magics

    magics.load(ipython)


def __getattr__(name: str) -> Any:
    # Lazy so that `gputop-track --headless` does not pay for the API's imports at start-up.
    if name in ("Tracker", "TrackerError"):  # `except TrackerError` needs it where Tracker comes from
        from gputop_tracker.api import tracker

        return getattr(tracker, name)
    if name in ("block", "tracked", "mark"):  # code blocks (light: standard library only)
        from gputop_tracker.api import blocks

        value = getattr(blocks, name)
        globals()[name] = value
        return value
    raise AttributeError(name)
