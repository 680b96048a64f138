"""Which of our processes the kernel's OOM killer killed: an oom_kill counter rise matched with a death.

The counters (`events.OomCounters`: the job cgroup's, else the machine's) only say that the OOM killer
killed *something*; `OomDetector` attributes a rise to one of our processes only when one of them died in a
way the OOM killer kills: reaped by us dead of SIGKILL, or vanished with a status we never saw. Exits we
reaped with any other status are never candidates, whatever happened elsewhere on the machine.

Pure apart from its two inputs — a monotonic clock and the counters — so it is tested with fakes of both.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import NamedTuple, Protocol

OOM_SIGKILL_WINDOW = 3.0  # seconds between an oom_kill counter rise and a child we reaped dead of SIGKILL
REAPED_MEMORY_SECONDS = 30.0  # at least this long we remember that we reaped a pid (so it did not "vanish")


class Counters(Protocol):
    def rose(self) -> str | None:
        """A description of the counter's rise since the last call, or None; every call moves the baseline."""
        ...


class OomKill(NamedTuple):
    pid: int
    signal: int | None  # SIGKILL when we reaped it, None when it vanished
    counter: str  # the counter's rise, "<label> <before> -> <now>"

    def message(self, name: str) -> str:
        how = "killed (SIGKILL)" if self.signal is not None else "gone"
        return f"process {self.pid} ({name}) {how} by the OOM killer ({self.counter})"


class _Death(NamedTuple):
    pid: int
    signal: int | None
    check: int  # number of the check it was seen before
    time: float


class _Rise(NamedTuple):
    counter: str
    check: int
    time: float


class OomDetector:
    """Feed it deaths (`reaped`, `vanished`) as they are seen and call `check` once a sample.

    A rise and a vanished death match in the same or the next check; a SIGKILL we reaped matches within
    max(OOM_SIGKILL_WINDOW, 3 intervals) seconds of the rise (the victim can take a while to exit)."""

    def __init__(self, clock: Callable[[], float], counters: Counters, interval: float, main_pid: int) -> None:
        self.clock = clock
        self.counters = counters
        self.main_pid = main_pid
        self.window = max(OOM_SIGKILL_WINDOW, 3 * interval)
        self.reaped_memory = max(REAPED_MEMORY_SECONDS, 3 * interval)
        self.killed: set[int] = set()  # every pid attributed to the OOM killer
        self._checks = 0
        self._rise: _Rise | None = None
        self._deaths: list[_Death] = []
        self._reaped_at: dict[int, float] = {}  # pids we reaped (their status is known) -> clock time

    def reaped(self, pid: int, exit_code: int) -> None:
        """We reaped `pid` (`exit_code` as os.waitstatus_to_exitcode gives it: -9 for SIGKILL)."""
        now = self.clock()
        self._reaped_at[pid] = now
        if exit_code == -signal.SIGKILL:  # the only way the OOM killer kills: a candidate
            self._deaths.append(_Death(pid, signal.SIGKILL, self._checks, now))

    def gone(self, pid: int) -> None:
        """`pid` left the tree: a candidate unless we reaped it (then its status is known)."""
        if self._reaped_at.pop(pid, None) is None:
            self._deaths.append(_Death(pid, None, self._checks, self.clock()))

    def check(self) -> OomKill | None:
        """Once a sample: the process the OOM killer killed, when a counter rise matches a death of ours."""
        self._checks += 1
        now = self.clock()
        counter = self.counters.rose()
        if counter is not None:
            self._rise = _Rise(counter, self._checks, now)
        self._forget_older_than(now)
        rise = self._rise
        if rise is None:
            return None
        matched = [d for d in self._deaths if self._matches(d, rise)]
        if not matched:
            if now - rise.time > self.window:
                self._rise = None
            return None
        death = next((d for d in matched if d.pid == self.main_pid), matched[0])
        self._rise = None
        self._deaths = [d for d in self._deaths if d not in matched]
        self.killed.add(death.pid)
        return OomKill(death.pid, death.signal, rise.counter)

    def _matches(self, death: _Death, rise: _Rise) -> bool:
        if death.signal == signal.SIGKILL and abs(death.time - rise.time) <= self.window:
            return True
        return abs(death.check - rise.check) <= 1

    def _forget_older_than(self, now: float) -> None:
        for pid in [p for p, t in self._reaped_at.items() if now - t > self.reaped_memory]:
            del self._reaped_at[pid]
        self._deaths = [d for d in self._deaths if now - d.time <= self.window]
