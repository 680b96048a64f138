"""When tracking ends, and what is said about the processes around it (a part of the sampler's `Engine`).

- The command (or the attached process) exited: tracking ends at once, unless `--wait-descendants` keeps it
  going until every descendant still running (a daemon that double-forked away) is gone too. A signal for the
  command while only descendants are left stops the waiting.
- Descendants still running when tracking ends are named in the session's notes (PID and command line).
- The front end that started the sampler died (a SIGKILL): said once in the session's notes.
Plain Python, no figures: the Engine hands in the tree's pids and the builder's `note`.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Iterable

from gputop_tracker.core.proc.procfs import read_cmdline

MAX_NAMED = 10  # survivors named in the note; the rest are counted


class EndWatch:
    def __init__(self, *, wait_descendants: bool, api: bool, front_end: int = 0) -> None:
        self.wait_descendants = wait_descendants
        self.api = api  # the Python API's sampler: its stop() (not the process's exit) ends tracking
        # the process that started us (its pid as it gave it: had it died before we got here, getppid() would
        # already name our new parent): its death is noted in the session
        self.front_end = front_end or os.getppid()
        self.main_gone = False  # attach: the process exited (seen on its pidfd)
        self.waiting_since: float | None = None  # time.time() when only descendants were left to wait for

    def over(self, *, main_exited: bool, stop_requested: bool, interrupted: bool, descendants: list[int]) -> bool:
        """Whether tracking is over now. `descendants`: those of the tree still running."""
        ended = main_exited or self.main_gone
        if stop_requested:
            if not (self.api and self.wait_descendants):
                return True
            ended = True  # the API's stop(): with wait_descendants, the children it started are waited for
        if not ended or not self.wait_descendants:
            return ended
        if interrupted and self.waiting_since is not None:
            return True  # Ctrl-C / SIGTERM while only descendants are left: stop waiting for them
        if self.waiting_since is None and descendants:
            self.waiting_since = time.time()
        return not descendants

    @property
    def waiting(self) -> bool:
        return self.waiting_since is not None

    def check_front_end(self, note: Callable[[str], None], start_time: float) -> None:
        """When the front end that started us died (we were reparented), say so once. We track on to the end
        alone; the report is then only in the session."""
        if self.front_end and os.getppid() != self.front_end:
            what = "the Python process that started tracking" if self.api else "gputop-track's front end"
            note(
                f"{what} (PID {self.front_end}) died at +{time.time() - start_time:.1f} s; "
                "the sampler tracked on alone and saved this session"
            )
            self.front_end = 0

    def note_survivors(self, note: Callable[[str], None], survivors: Iterable[int], start_time: float) -> None:
        """Name the descendants still running as tracking ends (nothing is done to them)."""
        pids = sorted(survivors)
        if self.waiting_since is not None:
            note(
                f"--wait-descendants: the command exited at +{self.waiting_since - start_time:.1f} s; "
                f"descendants were tracked until +{time.time() - start_time:.1f} s"
                + (" (stopped by a signal)" if pids else "")
            )
        if not pids:
            return
        named = ", ".join(f"PID {pid} `{_command(pid)}`" for pid in pids[:MAX_NAMED])
        more = f" and {len(pids) - MAX_NAMED} more" if len(pids) > MAX_NAMED else ""
        hint = "" if self.wait_descendants else " (--wait-descendants tracks them to their end)"
        note(
            f"{len(pids)} descendant{'s' if len(pids) != 1 else ''} still running when tracking stopped, "
            f"not tracked further{hint}: {named}{more}"
        )


def _command(pid: int) -> str:
    argv = read_cmdline(pid)
    return shlex.join(argv)[:200] if argv else "?"
