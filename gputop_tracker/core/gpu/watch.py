"""The GPU memory watcher: a thread of its own that reads the process lists and memory of the counted GPUs at
its own rate (default 50 Hz), whatever the sampling interval, and keeps what it saw between two samples.

NVML keeps no high-water mark of GPU memory: what a process held between two reads is lost. So the watcher
reads often, and each sample takes from it (`take`) the highest memory used of each device, the highest of
each process, and the distinct process lists it saw, each with the wall-clock span it was seen for; the tree's
figures (main, descendants, combined, per GPU) are the largest of those lists summed at one read, never a sum
of highs seen at different moments. Code blocks ask for the highest over their own span (`block_peak`).

Its cost is bounded: when one cycle (CPU time of the thread from one pass to the next, its wake-up included:
on a small VM waking a thread costs more than the reads) costs more than BUDGET of its period, the period grows,
and the label of every figure it gives says at what rate it read. Plain Python: it runs in the sampler.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass, field

DEFAULT_HZ = 50.0
BUDGET = 0.005  # share of one core the watcher's thread may use (CPU time per cycle / period)
SMOOTH = 0.2  # weight of the newest pass in the running cost
MAX_HISTORY = 20_000  # distinct process lists kept for code blocks' spans (a list changes only on an allocation)
KEEP = 5.0  # seconds of history kept when no block is open

#: one pass: device index -> pid -> bytes, and device index -> memory used (bytes)
Procs = dict[int, dict[int, int]]
PollFn = Callable[[], "tuple[Procs, dict[int, int]] | None"]


@dataclass
class Seen:
    """One process list of every watched device, read unchanged from `first` to `last` (wall clock)."""

    first: float
    last: float
    procs: Procs


@dataclass
class TreePeaks:
    """The tree's highest GPU memory over a window, each summed over the GPUs at one read."""

    main: int = 0
    descendants: int = 0
    combined: int = 0
    per_device: dict[int, int] = field(default_factory=dict)


@dataclass
class Window:
    """What the watcher saw since the previous sample (or, when it has not read since, its latest read)."""

    seen: list[Seen]
    used_max: dict[int, int]  # device index -> highest memory used
    procs_max: Procs  # device index -> pid -> highest bytes
    #: the highest memory used of the physical GPUs read (`GpuWatcher.summed`), summed at one read; None: no read
    used_sum_max: int | None = None

    def process_peaks(self, devices: Container[int] | None = None) -> dict[int, int]:
        """Each process's highest GPU memory over the window, summed over `devices` (None: all) at one read: a
        process on two GPUs whose highs fell at different reads never gets their sum."""
        out: dict[int, int] = {}
        for s in self.seen:
            at: dict[int, int] = {}
            for dev, procs in s.procs.items():
                if devices is None or dev in devices:
                    for pid, used in procs.items():
                        at[pid] = at.get(pid, 0) + used
            for pid, used in at.items():
                if used > out.get(pid, 0):
                    out[pid] = used
        return out

    def tree_peaks(
        self,
        main_pid: int,
        tree: Container[int],
        extra: dict[int, int] | None = None,
        devices: Container[int] | None = None,
    ) -> TreePeaks:
        """The tree's peaks over the window, from the reads of `devices` (None: all); `extra` (pid -> bytes) is what
        the other devices held at the sample, added at every read (a device the watcher stopped reading, its GPUs
        chosen meanwhile, is counted there only)."""
        base_main, base_desc, _ = _split(extra or {}, main_pid, tree)
        out = TreePeaks(main=base_main, descendants=base_desc, combined=base_main + base_desc)
        for s in self.seen:
            main, desc = base_main, base_desc
            for dev, procs in s.procs.items():
                if devices is not None and dev not in devices:
                    continue
                on_main, on_desc, on_dev = _split(procs, main_pid, tree)
                main, desc = main + on_main, desc + on_desc
                if on_dev > out.per_device.get(dev, 0):
                    out.per_device[dev] = on_dev
            out.main = max(out.main, main)
            out.descendants = max(out.descendants, desc)
            out.combined = max(out.combined, main + desc)
        return out


@dataclass
class BlockPeak:
    """A code block's GPU memory over its run: the process that ran it and the tree, at one read each."""

    process: int
    tree: int
    reads: int  # distinct lists seen during the run (0: none; the ones just before and after stand in)


class GpuWatcher:
    """Reads `poll()` on its own thread at `hz` (slower when a pass costs more than `budget` of a core)."""

    def __init__(
        self,
        poll: PollFn,
        hz: float = DEFAULT_HZ,
        budget: float = BUDGET,
        clock: Callable[[], float] = time.time,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self._poll = poll
        self.hz = hz
        self.budget = budget
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._history: deque[Seen] = deque(maxlen=MAX_HISTORY)
        self._new = 0  # entries of _history the next `take` hands over (from the right)
        self._used_max: dict[int, int] = {}
        self._used_sum_max: int | None = None
        #: devices whose memory used is summed at one read (physical GPUs: a MIG device's memory is its parent's);
        #: None: every device read
        self.summed: set[int] | None = None
        self._procs_max: Procs = {}
        self._keep_since: float | None = None  # a code block open since then: history is kept from there
        self.cost = 0.0  # running CPU seconds per pass
        self.period = 1.0 / hz
        self.slowest_hz = hz  # the lowest rate the budget forced
        self.passes = 0
        self._first = self._last = 0.0  # wall times of the first and the latest pass
        self.failures = 0
        self.stopped = False

    # ------------------------------------------------------------------ the thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpu-watcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """No read after this; True once the thread has ended (False: still in a call after `timeout` seconds, a
        driver that hangs: the daemon thread is left behind, never waited for again)."""
        self.stopped = True  # no read comes after this
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            if self._thread.is_alive():
                return False
            self._thread = None
        return True

    def _run(self) -> None:
        next_at = time.monotonic()
        last_cpu: float | None = None
        while not self._stop.is_set():
            cpu = self._cpu_clock()
            if last_cpu is not None:  # the whole cycle: the pass, the wait's own cost, the wake-up
                self.adapt(cpu - last_cpu)
            last_cpu = cpu
            self.poll_once()
            next_at += self.period
            now = time.monotonic()
            if next_at < now:  # a slow pass: skip ahead, never catch up in a burst
                next_at = now + self.period
            self._stop.wait(next_at - now)

    def poll_once(self) -> None:
        """One pass: read and record."""
        t = self._clock()
        try:
            got = self._poll()
        except Exception:  # never let the thread die: the sampler's own reads go on
            got = None
        if got is None:
            self.failures += 1
        else:
            self.record(t, *got)

    def adapt(self, cost: float) -> None:
        """The period from the running cost of a cycle: at least 1/hz, and long enough to stay within budget."""
        self.cost = cost if self.cost == 0.0 else (1 - SMOOTH) * self.cost + SMOOTH * cost
        self.period = max(1.0 / self.hz, self.cost / self.budget)
        rate = 1.0 / self.period
        if rate < self.slowest_hz * 0.99:
            self.slowest_hz = rate

    # ------------------------------------------------------------------ what it saw

    def record(self, t: float, procs: Procs, used: dict[int, int]) -> None:
        """One read at wall time `t` (also the entry point of unit tests with synthetic reads)."""
        with self._lock:
            self.passes += 1
            if self.passes == 1:
                self._first = t
            self._last = t
            self._fold_used(used)
            for dev, on_dev in procs.items():
                highs = self._procs_max.setdefault(dev, {})
                for pid, b in on_dev.items():
                    if b > highs.get(pid, -1):
                        highs[pid] = b
            h = self._history
            if h and h[-1].procs == procs:
                h[-1].last = t
                if self._new == 0:  # the list the last sample took is still held: it belongs to this window too
                    self._new = 1
            else:
                h.append(Seen(t, t, procs))
                self._new = min(self._new + 1, len(h))
            self._prune(t)

    def _fold_used(self, used: dict[int, int]) -> None:
        """Each device's highest memory used, and the highest of the summed ones at one read (under the lock)."""
        summed = self.summed
        total = 0
        for dev, u in used.items():
            if u > self._used_max.get(dev, -1):
                self._used_max[dev] = u
            if summed is None or dev in summed:
                total += u
        if self._used_sum_max is None or total > self._used_sum_max:
            self._used_sum_max = total

    def _prune(self, now: float) -> None:
        h = self._history
        since = now - KEEP if self._keep_since is None else min(self._keep_since, now - KEEP)
        while len(h) > max(self._new, 1) and h[0].last < since:
            h.popleft()

    def take(self) -> Window:
        """What was seen since the last take; the latest read again when nothing new was read."""
        with self._lock:
            h = self._history
            n = self._new if self._new else min(1, len(h))
            seen = [h[i] for i in range(len(h) - n, len(h))]
            out = Window(seen=seen, used_max=self._used_max, procs_max=self._procs_max, used_sum_max=self._used_sum_max)
            self._used_max, self._procs_max, self._new, self._used_sum_max = {}, {}, 0, None
            if seen:  # highs start again from what is held now
                self._procs_max = {dev: dict(p) for dev, p in seen[-1].procs.items()}
            return out

    def keep_since(self, t: float | None) -> None:
        """Keep the history from `t` on (the oldest open code block's start); None: the last KEEP seconds."""
        with self._lock:
            self._keep_since = t

    def has_read_since(self, start: float) -> bool:
        """A read fell at or after `start`: for a run that started then and has ended, `block_peak` has a read
        during it or the one just after it (else only the one before: wait for the next, unless stopped)."""
        with self._lock:
            return self.stopped or (self.passes > 0 and self._last >= start)

    def block_peak(self, pid: int, tree: Container[int], start: float, end: float) -> BlockPeak | None:
        """The highest GPU memory of `pid` and of the tree over [start, end] (wall clock). When no read fell in
        it (a run shorter than the period), the reads just before and after stand in. None: nothing kept."""
        with self._lock:
            during = [s for s in self._history if s.last >= start and s.first <= end]
            around = [] if during else self._around(start, end)
        if not during and not around:
            return None
        own = tree_total = 0
        for s in during or around:
            p = sum(procs.get(pid, 0) for procs in s.procs.values())
            t = sum(b for procs in s.procs.values() for q, b in procs.items() if q == pid or q in tree)
            own, tree_total = max(own, p), max(tree_total, t)
        return BlockPeak(own, tree_total, len(during))

    def reads_near(self, t: float, window: float) -> list[tuple[Procs, float]]:
        """The distinct process lists read within `window` seconds of wall time `t` (a CUDA out-of-memory
        error's), each with how far it lay from `t` (0: its span holds `t`), nearest first."""
        with self._lock:
            near = [(s, s.first - t if s.first > t else max(0.0, t - s.last)) for s in self._history]
            out = [({dev: dict(p) for dev, p in s.procs.items()}, gap) for s, gap in near if gap <= window]
        return sorted(out, key=lambda r: r[1])

    def _around(self, start: float, end: float) -> list[Seen]:
        before = [s for s in self._history if s.last < start]
        after = [s for s in self._history if s.first > end]
        return before[-1:] + after[:1]

    def label(self, what: str = "NVML process list") -> str:
        """How the figures it gives were read, for `sources`."""
        text = f"sampled at {_hz(self.hz)} ({what})"
        if self.slowest_hz < self.hz * 0.95:
            share = self.budget * 100
            span = self._last - self._first
            mean = f"{_hz((self.passes - 1) / span)} on average, " if span > 0 else ""
            text += (
                f"; slowed to {mean}{_hz(self.slowest_hz)} at the slowest, to keep its CPU under {share:g}% of a core"
            )
        return text


def _hz(hz: float) -> str:
    return f"{hz:.0f} Hz" if hz >= 10 else f"{hz:.2g} Hz"


def _split(procs: dict[int, int], main_pid: int, tree: Container[int]) -> tuple[int, int, int]:
    """(main's bytes, the descendants', the tree's) of one read of pid -> bytes."""
    main = desc = 0
    for pid, used in procs.items():
        if pid == main_pid:
            main += used
        elif pid in tree:
            desc += used
    return main, desc, main + desc
