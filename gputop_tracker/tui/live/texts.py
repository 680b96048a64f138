"""Small parts of the live view kept out of its App: the lines it and the terminal after it both say, and the
pacing of its draws. No Textual import here: `run` imports this module before the view loads."""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from gputop_tracker.core.model.models import ResourceUsage


def detached_text(pid: int | None, mode: str, output_path: object = None) -> str:
    """What detaching left behind: the process runs on, and (launched here) where its output goes now."""
    who = f"PID {pid}" if pid else "the command"
    if mode == "attach":
        return f"detached: {who} keeps running, untouched"
    out = f"its output goes on to {output_path}" if output_path else "its output goes to a deleted file (--no-save)"
    return f"detached: {who} keeps running; {out}"


def left_running(u: ResourceUsage | None) -> bool:
    """Tracking stopped while the command (or the attached process) ran on: detached. Attached, the sampler
    calls it "stopped" (the process was never ours to stop)."""
    return u is not None and (u.status == "detached" or (u.mode == "attach" and u.status == "stopped"))


@functools.lru_cache(maxsize=256)
def typed_command(argv: tuple[str, ...]) -> tuple[str, ...]:
    """A command line as the user would type it: a program found on PATH by its name alone (an attached
    process's command line starts with the interpreter's full path, `/usr/bin/python3 train.py`, where a
    launched one reads as typed, `python3 train.py`)."""
    if not argv or "/" not in argv[0]:
        return argv
    prog = argv[0]
    name = os.path.basename(prog)
    found = shutil.which(name)
    try:
        same = found is not None and os.path.samefile(found, prog)
    except OSError:
        same = False
    return (name if same else prog, *argv[1:])


def status_text(
    u: ResourceUsage | None, failed: str | None, ended: bool, source_error: str | None, quit_choice: str | None
) -> str:
    """The header's status: running, stopping…, exited with code N, detached (still running), …"""
    if failed is not None:
        return f"failed: {failed}"
    if u is not None:
        if left_running(u):
            return "detached (still running)"
        if u.mode == "attach":
            return "target exited" if u.status == "exited" else "tracking stopped"
        if u.exit_signal:
            return f"killed by signal {u.exit_signal} (exit code {u.exit_code})"
        return f"exited with code {u.exit_code}"
    if ended:
        return "sampler stopped unexpectedly" + (f": {source_error}" if source_error else "")
    return {"stop": "stopping…", "detach": "detaching…"}.get(quit_choice or "", "running")


class DrawPacer:
    """Draws the newest sample at most once a `period`: one that comes within it is drawn at its end (a timer
    of the app), folded with any that come meanwhile. Period 0: every sample at once."""

    def __init__(self, app: Any, period: float, draw: Callable[[], None]) -> None:
        self.app = app  # what sets the timer (Textual's App.set_timer)
        self.period = period
        self.draw = draw
        self.last = -1e9  # monotonic time of the last draw
        self.timer: Any = None

    def sample_came(self) -> None:
        wait = self.last + self.period - time.monotonic()
        if wait <= 0.1 * self.period:
            if self.timer is not None:
                self.timer.stop()
            self._draw()
        elif self.timer is None:
            self.timer = self.app.set_timer(wait, self._draw)

    def _draw(self) -> None:
        self.timer = None
        self.last = time.monotonic()
        self.draw()
