"""A GPU library call that never returns holds nothing: every call into NVML or amdsmi runs on a worker thread of
its own, and the sampler waits for each at most a deadline.

A GPU fallen off the bus can hang the driver's calls for seconds or for good (a process-list query taking 12 s a
call, a `nvmlInit` that never returns). Past the deadline the GPU is marked not responding (`not_responding`, and a
line in `note`): no call is made any more and the rest of the run is measured as without a GPU. The thread stuck in
the driver is a daemon left behind: nothing joins it, and the process exits with it still inside the C call.

The library is opened on the worker too. The sampler waits for that at most OPEN_WAIT (an open that answers in
time changes nothing); a slower one goes on while the run is measured without GPUs, which join once it answers
(`changed()` tells the sampler to take the backend's note and watcher again). An open still pending when tracking
ends is a driver not responding.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gputop_tracker.core.gpu.base import GpuBackend, GpuReading, NoGpuBackend

#: seconds one call may take (a healthy process-list query takes milliseconds, even behind a busy driver's lock)
DEADLINE = 3.0
#: seconds the sampler waits for the library to open before it starts measuring without GPUs
OPEN_WAIT = 3.0
LIBRARIES = {"nvidia": "NVML", "amd": "amdsmi"}

T = TypeVar("T")


class _Job:
    """One call for the worker; `done` is set once it returned or raised."""

    __slots__ = ("done", "error", "fn", "value")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as e:  # handed to the caller's thread
            self.error = e
        finally:
            self.done.set()


class Worker:
    """A daemon thread running calls in order. A call the caller stopped waiting for is left running."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="gpu-calls", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> _Job:
        job = _Job(fn)
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """End the thread after the calls already submitted (never waited for)."""
        self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run()


class GuardedBackend(GpuBackend):
    """A vendor's backend (opened by `opener` on the worker) whose every call has a deadline."""

    def __init__(
        self,
        opener: Callable[[], GpuBackend],
        watch_hz: float,
        library: str,
        *,
        deadline: float = DEADLINE,
        open_wait: float = OPEN_WAIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.library = library
        self.deadline = deadline
        self._clock = clock
        self._t0 = clock()
        self._inner: GpuBackend | None = None
        self._copied: set[str] = set()  # the inner backend's problems as last copied into ours
        self._changed = False
        self._worker: Worker | None = Worker()
        self._opening = self._worker.submit(opener)
        # the watcher's first read included: off this thread too
        self._starting = self._worker.submit(lambda: self._opened().start_watch(watch_hz))
        if self._starting.done.wait(open_wait):
            self._adopt(late=False)
        else:
            self.note = f"waiting for {self._library()} to answer ({self._step()}): no GPU figures until it does"

    # ------------------------------------------------------------------ the interface

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        inner = self._live()
        if inner is None:
            return []
        return self._call("a reading", lambda: inner.read(pids), [])

    def read_energy(self) -> dict[int, int]:
        inner = self._live()
        return {} if inner is None else self._call("the energy counters at the end", inner.read_energy, {})

    def read_accounting_at_end(self, pids: Sequence[int]) -> list[GpuReading]:
        inner = self._live()
        if inner is None:
            return []
        return self._call("the accounting records at the end", lambda: inner.read_accounting_at_end(pids), [])

    def set_counted(self, uuids: set[str] | None) -> None:
        inner = self._live()
        if inner is not None:
            inner.set_counted(uuids)  # no library call: the watcher's list of devices

    def memory_source(self) -> str:
        return self._inner.memory_source() if self._inner is not None else super().memory_source()

    def found_none(self) -> bool:
        return self._inner is not None and self._inner.found_none()

    def changed(self) -> bool:
        changed, self._changed = self._changed, False
        return changed

    def stop_watch(self) -> None:
        """Tracking ends: the watcher stops (waited for at most the deadline); an open still pending now is a driver
        not responding."""
        if self._inner is None and not self.not_responding:
            self.library = self._library()
            self._hung(self._step(), f"had not answered after {self._clock() - self._t0:.1f} s")
            return
        watcher = self.watcher
        if watcher is not None and not watcher.stop(timeout=0.0 if self.not_responding else self.deadline):
            self._hung("the GPU memory watcher's read", f"did not answer within {self.deadline:g} s")  # first here

    def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        if self._inner is None:  # whenever the open returns (if ever), what it opened is closed
            worker.submit(lambda: self._opened().close())
        elif not self.not_responding:
            worker.submit(self._inner.close).done.wait(self.deadline)
        worker.stop()

    # ------------------------------------------------------------------ the deadline

    def _live(self) -> GpuBackend | None:
        """The backend to call now, or None: not open yet, nothing to read, or not responding."""
        if self.not_responding:
            return None
        if self._inner is None:
            if not self._starting.done.is_set():
                return None
            self._adopt(late=True)
        inner = self._inner
        return None if inner is None or isinstance(inner, NoGpuBackend) else inner

    def _opened(self) -> GpuBackend:
        """What the open returned (on the worker, after it): a backend, or a note of why none."""
        job = self._opening
        if job.error is not None or not job.done.is_set():
            return NoGpuBackend(f"GPU tracking did not start ({job.error!r})")
        backend: GpuBackend = job.value
        return backend

    def _library(self) -> str:
        """The library's name, known once the open returned."""
        return LIBRARIES.get(self._opened().vendor or "", self.library) if self._opening.done.is_set() else self.library

    def _step(self) -> str:
        return "its first reading" if self._opening.done.is_set() else "opening it"

    def _adopt(self, late: bool) -> None:
        """The open and the watcher's start returned: take the backend's vendor, note and watcher (on the sampler's
        thread)."""
        inner = self._opened()
        if self._starting.error is not None:
            inner.problems.add(f"the GPU memory watcher did not start ({self._starting.error!r})")
        self._inner = inner
        self.vendor, self.note, self.watcher = inner.vendor, inner.note, inner.watcher
        self.library = self._library()
        if late:
            took = self._clock() - self._t0
            self.problems.add(f"{self.library} took {took:.1f} s to open: GPU figures begin {took:.1f} s into the run")
            self._changed = True
        if isinstance(inner, NoGpuBackend) and self._worker is not None:  # nothing will be called: no thread kept
            self._worker.stop()
            self._worker = None
        self._sync()

    def _call(self, what: str, fn: Callable[[], T], default: T) -> T:
        worker = self._worker
        if worker is None:
            return default
        job = worker.submit(fn)
        if not job.done.wait(self.deadline):
            self._hung(what, f"did not answer within {self.deadline:g} s")
            return default
        self._sync()
        if job.error is not None:
            raise job.error
        value: T = job.value
        return value

    def _hung(self, what: str, how: str) -> None:
        """Past a deadline: not responding from now on, said once in the note (the first call that hung); the
        watcher told to stop."""
        if self.not_responding:
            return
        self.not_responding = self._changed = True
        at = self._clock() - self._t0
        figures = "GPU figures stop there" if self._inner is not None else "no GPU figures"
        self.note = (
            f"GPU not responding: {self.library} {how} ({what}, {at:.1f} s into the run); {figures}, and the rest "
            "is measured as without a GPU"
        )
        if self.watcher is not None:
            self.watcher.stop(timeout=0.0)  # its thread may be stuck in the driver too: never waited for

    def _sync(self) -> None:
        """The inner backend's problems into ours (the set the summary reads), lines it dropped dropped too. Only
        while no call of ours runs: a call left behind past its deadline never writes into our set."""
        inner = self._inner
        if inner is None:
            return
        theirs = inner.problems.copy()  # one C call: the watcher's thread may add a line meanwhile
        self.problems -= self._copied - theirs
        self.problems |= theirs
        self._copied = theirs
