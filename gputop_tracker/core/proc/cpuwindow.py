"""CPU % of one process over a window of at least the sampling interval, and the cheap sign of an exec.

The kernel counts CPU time in clock ticks (10 ms). Samples a few ms apart (taken at code-block boundaries)
would divide one tick by a few ms and show 200-800 % for a single thread, so the percentage is always taken
against a reference reading about a window old (the sampling interval and at least MIN_WINDOW, less JITTER so
that a timer waking a little late then a little early does not double it): with samples every interval it is
exactly the last interval's figure; with extra samples in between, it spans between one and two intervals.
"""

from __future__ import annotations

import os

HOST_CORES = os.cpu_count() or 1
JITTER = 0.9  # a reference this fraction of the window old is old enough
# utime and stime are each truncated to a tick: a difference may be off by up to 2 ticks (20 ms). Over at least
# 0.25 s (x JITTER) that is under 9 points, so one busy thread never reads above 110 % at any interval.
MIN_WINDOW = 0.25
# /proc/PID/stat fields (0-based, after the comm) that a new program image replaces on execve: start_code,
# start_stack, start_brk, arg_start, arg_end. With address randomisation each exec moves them; without it the
# argument block's end still moves when the arguments' length does. Zero when we may not read them (another
# user's process): then only a change of comm tells an exec.
EXEC_FIELDS = (23, 25, 44, 45, 46)


def exec_signature(fields: list[bytes]) -> tuple[bytes, ...]:
    """What changes when the process execs a new program, even one with the same name (python -> python)."""
    return tuple(fields[i] for i in EXEC_FIELDS if i < len(fields))


class CpuWindow:
    """Two readings (time, ticks, threads): `ref` at least a window old, `cand` the next reference."""

    __slots__ = ("cand_threads", "cand_ticks", "cand_time", "ref_threads", "ref_ticks", "ref_time")

    def __init__(self, now: float, ticks: int, threads: int) -> None:
        self.ref_time = self.cand_time = now
        self.ref_ticks = self.cand_ticks = ticks
        self.ref_threads = self.cand_threads = threads

    def percent(self, now: float, ticks: int, threads: int, window: float, clock_ticks: int) -> float:
        """CPU % since a reading at least `window` old (or since the first, while the process is younger)."""
        if now - self.cand_time >= max(window, MIN_WINDOW) * JITTER:
            # the candidate is old enough: it is the newest reference that spans a whole window
            self.ref_time, self.ref_ticks, self.ref_threads = self.cand_time, self.cand_ticks, self.cand_threads
            self.cand_time, self.cand_ticks, self.cand_threads = now, ticks, threads
        dt = now - self.ref_time
        if dt <= 0:
            return 0.0
        pct = 100.0 * (ticks - self.ref_ticks) / clock_ticks / dt
        return bounded(pct, max(threads, self.ref_threads, self.cand_threads))


def bounded(pct: float, threads: int) -> float:
    """A percentage no process can exceed: one core per thread, and no more cores than the machine has."""
    cap = 100.0 * min(max(threads, 1), HOST_CORES)
    return cap if pct > cap else max(pct, 0.0)
