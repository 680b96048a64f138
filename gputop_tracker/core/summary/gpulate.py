"""GPU memory of a process that joins the tree after the watcher saw it.

The watcher reads NVML's process lists at 50 Hz; the tree is known at samples (`--interval`). A child that starts,
allocates and exits between two samples is on the watcher's lists while no sample knows it is ours: its PID joins
the tree only later (its exit reported by the in-process probe, its reap). Each sample's tree figures were summed
over the processes known then, so its GPU memory would be lost. So the reads that held PIDs not (yet) in the tree
are kept for a while, and when one of those PIDs joins, the tree's peaks are summed again over them: still one
read at a time, never highs of different moments added up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container

from gputop_tracker.core.gpu import Seen, TreePeaks, Window

HORIZON_S = 60.0  # how long a read with unknown PIDs is kept (a process joins the tree at most a few samples late)
MAX_KEPT = 1000  # distinct reads kept (a list changes only on an allocation; bounds memory on a busy shared GPU)


class LateJoiners:
    def __init__(self) -> None:
        self._kept: deque[Seen] = deque()
        self._strangers: dict[int, float] = {}  # PID on a list, not in the tree -> when last seen
        # PID -> (start of its latest unbroken run on the lists, still on them): a PID reused by the tree after
        # another user's process let it go is credited only with the reads of its own run
        self._runs: dict[int, tuple[float, bool]] = {}

    def keep(self, window: Window | None, tree: Container[int]) -> None:
        """The reads of this sample's window that held PIDs the tree does not have (yet)."""
        if window is None:
            return
        for s in window.seen:
            present = {pid for procs in s.procs.values() for pid in procs}
            for pid, (start, on) in self._runs.items():
                if on and pid not in present:
                    self._runs[pid] = (start, False)
            pids = {pid for pid in present if pid not in tree}
            if not pids:
                continue
            if not self._kept or self._kept[-1] is not s:  # a list still held is in two windows
                self._kept.append(s)
            for pid in pids:
                self._strangers[pid] = s.last
                run = self._runs.get(pid)
                if run is None or not run[1]:
                    self._runs[pid] = (s.first, True)
        if self._kept:
            self._prune(self._kept[-1].last - HORIZON_S)

    def _prune(self, since: float) -> None:
        kept = self._kept
        while kept and (len(kept) > MAX_KEPT or kept[0].last < since):
            kept.popleft()
        self._strangers = {pid: t for pid, t in self._strangers.items() if t >= since}
        self._runs = {pid: run for pid, run in self._runs.items() if pid in self._strangers}

    def joined(self, main_pid: int, tree: Container[int]) -> tuple[TreePeaks, dict[int, int]] | None:
        """When PIDs seen on the lists have joined the tree since: the tree's peaks over the kept reads (each
        joined PID only in the reads of its own latest run), and each joined PID's own highest (summed over its
        GPUs at one read). None when none joined."""
        joined = {pid: self._runs.pop(pid, (0.0, False))[0] for pid in self._strangers if pid in tree}
        if not joined:
            return None
        for pid in joined:
            del self._strangers[pid]
        seen = [_without_earlier(s, joined) for s in self._kept]
        own = {pid: max((sum(p.get(pid, 0) for p in s.procs.values()) for s in seen), default=0) for pid in joined}
        return Window(seen=seen, used_max={}, procs_max={}).tree_peaks(main_pid, tree), own


def _without_earlier(s: Seen, starts: dict[int, float]) -> Seen:
    """The read without the PIDs whose run (as the tree's process) began after it."""
    if not any(s.first < start for start in starts.values()):
        return s
    procs = {
        dev: {pid: b for pid, b in on.items() if s.first >= starts.get(pid, s.first)} for dev, on in s.procs.items()
    }
    return Seen(s.first, s.last, procs)
