"""Code blocks in the tracked program: `with block("load"):`, `@tracked`, `mark("epoch 3")`.

Under `gputop-track -- …` (or inside a `Tracker`) the environment variable GPUTOP_TRACKER_BLOCKS names a FIFO
the sampler reads; each block sends one short JSON line at its start and one at its end (never blocking: when
the FIFO is full the message is dropped and counted). Outside tracking every call is a no-op of well under
2 µs. The peak RAM of a block is exact: at entry the process reads its VmHWM and resets it (writing "5" to
/proc/self/clear_refs); at exit it reads VmHWM again. The pre-reset VmHWM travels in the start message, so the
sampler never loses a whole-run peak to a reset. Light on purpose: standard library only.
"""

from __future__ import annotations

import atexit
import errno
import functools
import itertools
import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, overload

from gputop_tracker._probe.sitecustomize import open_ours
from gputop_tracker.core.blocks import ENV
from gputop_tracker.core.proc import own_peak_rss as _read_hwm

MAX_NAME = 200  # characters of a block name sent (a message stays under PIPE_BUF, so one write is atomic)

F = TypeVar("F", bound=Callable[..., Any])


class _Sink:
    """Where this process reports: the FIFO, opened lazily (once per process), and what it dropped."""

    __slots__ = ("dropped", "fd", "ident", "lock", "lost_hwm", "open_blocks", "path", "pid", "seq")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1
        self.ident = (0, 0)  # (st_dev, st_ino) of the FIFO `fd` was opened on: the number may be closed under us
        self.pid = 0
        self.dropped = 0
        self.lost_hwm = 0  # the largest VmHWM of a dropped message: the next message carries it
        # re-entrant: a signal handler that marks, or a collection that ends a @tracked generator, may run in
        # the thread that holds it (between two bytecodes of a block's entry)
        self.lock = threading.RLock()
        self.seq = itertools.count(1)
        self.open_blocks: dict[int, list[int]] = {}  # block id -> [its peak so far], this process's open blocks

    def here(self) -> None:
        """This process has its own fd: opened at first use here, or in a forked child (nothing of the parent's
        state). One thread opens it while the others wait; `pid` is set last, so a thread that finds it equal
        finds the fd, the lock and the open blocks set too (a message sent meanwhile was once lost, uncounted)."""
        pid = os.getpid()
        if pid == self.pid:
            return
        with _open_lock[0]:
            if pid != self.pid:
                self._reopen(pid)

    def send(self, msg: dict[str, Any]) -> None:
        """One message (the caller holds `lock`, and called `here()` before taking it)."""
        if self.fd < 0:
            return
        if self.dropped:
            msg["dropped"] = self.dropped
            if self.lost_hwm > msg.get("hwm", 0):  # a reset's VmHWM must reach the sampler (the run's peak)
                msg["hwm"] = self.lost_hwm
        data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        if not _owned(self.fd, self.ident) and not self._regain():
            return
        try:
            _write(self.fd, data)
        except OSError as e:  # full: dropped and counted; anything else: the sampler is gone, stop reporting
            if e.errno == errno.EAGAIN:
                if not self.dropped:
                    _tell_drops_at_exit()
                self.dropped += 1
                self.lost_hwm = max(self.lost_hwm, msg.get("hwm", 0))
            else:
                _close(self.fd)
                self.fd = -2
        else:
            if "dropped" in msg:
                self.dropped = self.lost_hwm = 0

    def flush(self, timeout: float) -> None:
        """The drops not told yet (they ride on the next message, and there may be none: the program's last
        blocks, a Tracker stopping) in a message of their own, waiting up to `timeout` s for room in the FIFO."""
        if self.pid != os.getpid():  # a forked child's copy: not its drops (nor its lock to take, see the fork)
            return
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.dropped and self.fd >= 0 and self.pid == os.getpid():
                before = self.dropped
                self.send({"k": "d", "pid": self.pid, "name": "", "t": time.time()})
                if not self.dropped or self.fd < 0:
                    return
                self.dropped = before  # the notice itself found no room: not a drop of the program's
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                poller = select.poll()
                poller.register(self.fd, select.POLLOUT)
                poller.poll(min(left, 0.05) * 1000)

    def _regain(self) -> bool:
        """The program closed our fd (`os.closerange`; its number may be a file of its own by now, never
        written to nor closed by us): the FIFO is opened again. False when it cannot be (the sampler is gone)."""
        self.fd, self.ident = _open_fifo(self.path)
        return self.fd >= 0

    def _reopen(self, pid: int) -> None:
        # the parent's fd was closed at the fork (`_after_fork_in_child`), while its number was surely still ours:
        # closed here, at the child's first block, it might be a file the child opened since
        fd, ident = _open_fifo(self.path)
        if self.pid == pid:  # a signal handler's block, in this thread, opened it meanwhile
            if fd >= 0:
                _close(fd)
            return
        self.ident = ident
        self.dropped = self.lost_hwm = 0
        self.open_blocks = {}
        self.lock = threading.RLock()  # the parent's may have been held by a thread the fork did not copy
        self.fd = fd
        self.pid = pid  # last (see `here`)


def _open_fifo(path: str) -> tuple[int, tuple[int, int]]:
    """A non-blocking write end and what it is; -2 when there is no reader (the sampler is gone) or no FIFO.

    Only a FIFO of this user's in a directory only this user can enter, named directly: never a regular file, a
    device, or a link such as /dev/stdout, which would get block records written into the program's own output
    (the probe's rule: `open_ours`)."""
    fd = open_ours(path)
    if fd < 0:
        return -2, (0, 0)
    st = os.fstat(fd)  # a fresh fd of ours
    return fd, (st.st_dev, st.st_ino)


def _owned(fd: int, ident: tuple[int, int]) -> bool:
    """`fd` is still the FIFO we opened (a program may close every fd and open a file that takes the number)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == ident


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


# taken by the one thread that opens the FIFO for this process; a new one in a forked child (a thread of the
# parent may have held it at the fork)
_open_lock = [threading.RLock()]  # re-entrant, as `_Sink.lock`


def _after_fork_in_child() -> None:
    """A forked child: a fresh open lock, and the parent's fd closed now, before the child can reuse its number
    (a daemon that closes every fd and opens a log); the child opens its own at its first block."""
    _open_lock[0] = threading.RLock()
    _reset_peak[0] = 0  # the parent's: a forked child's VmHWM starts afresh
    for sink in _sinks():  # the current one, an outer Tracker's, gputop-track's under the Trackers
        sink.lock = threading.RLock()  # a thread the fork did not copy may have held the parent's
        if sink.fd >= 0:
            if _owned(sink.fd, sink.ident):
                _close(sink.fd)
            sink.fd = -1


def _sinks() -> list[_Sink]:
    """Every sink of this process, once each."""
    base = [b for b, _path in _base]
    return list({id(s): s for s in (_sink, *_stack, *base) if s is not None}.values())


os.register_at_fork(after_in_child=_after_fork_in_child)


def _write(fd: int, data: bytes) -> None:
    """One write, with SIGPIPE blocked meanwhile: should the sampler be gone, a program that restored SIGPIPE's
    default (a CLI tool piping to `head`) gets EPIPE, never a signal that kills it; a pending one is taken."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGPIPE,))
    try:
        os.write(fd, data)
    except BrokenPipeError:
        if signal.SIGPIPE not in old:
            signal.sigtimedwait((signal.SIGPIPE,), 0)
        raise
    finally:
        if signal.SIGPIPE not in old:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


_sink: _Sink | None = None


def _activate(path: str | None) -> None:
    """Report to `path` from now on (None: stop). The Tracker calls it for its own process."""
    global _sink
    old = _sink
    _sink = _Sink(path) if path else None
    if old is not None:
        _retire(old)


_activate(os.environ.get(ENV))

# the Trackers running in this process, oldest first (each its own FIFO), and what was there before the first
# (gputop-track's FIFO, or nothing): blocks report to the newest; a Tracker's stop, in any order, closes only
# its own sink and leaves the others open (a block started under an outer Tracker ends there)
_stack: list[_Sink] = []
_base: list[tuple[_Sink | None, str | None]] = []


def _push(path: str) -> _Sink:
    """A Tracker starts: its FIFO gets this process's blocks (and its children's, through the environment)."""
    global _sink
    if not _stack:
        _base[:] = [(_sink, os.environ.get(ENV))]
    sink = _Sink(path)
    _stack.append(sink)
    _sink = sink
    os.environ[ENV] = path
    return sink


def _pop(sink: _Sink) -> None:
    """That Tracker stopped: its sink closes; the newest one still running (or what was there before) is back."""
    global _sink
    if sink not in _stack:  # popped already
        return
    _stack.remove(sink)
    path: str | None
    if _stack:
        _sink, path = _stack[-1], _stack[-1].path
    else:
        ((_sink, path),) = _base or [(None, None)]
        _base.clear()
    if path is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = path
    _retire(sink)


def _retire(old: _Sink) -> None:
    """Close a sink's fd (ours: not leaked, one per Tracker run); a block still open on it ends as a no-op."""
    if old.pid == os.getpid():
        try:
            old.flush(FLUSH_WAIT)
        finally:  # a Ctrl-C in the flush's wait still closes it
            with old.lock:
                if old.fd >= 0 and _owned(old.fd, old.ident):
                    _close(old.fd)
                old.fd = -2


FLUSH_WAIT = 2.0  # seconds at most for room in the FIFO to tell the last drops (at exit, at a Tracker's stop)
_exit_hook: list[int] = []  # the pid that registered it (a forked child registers its own)


def _tell_drops_at_exit() -> None:
    """At the first drop of a process: its drops are told at exit too (`os._exit` skips it: a forked worker's
    last drops stay untold)."""
    if _exit_hook != [os.getpid()]:
        _exit_hook[:] = [os.getpid()]
        atexit.register(_flush_all)


def _flush_all() -> None:
    for sink in _sinks():
        sink.flush(FLUSH_WAIT)


# the largest VmHWM a block's reset cleared in this process (the probe's exit report takes it into the peak)
_reset_peak = [0]


def _reset_hwm() -> bool:
    try:
        fd = os.open("/proc/self/clear_refs", os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, b"5")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class _Block:
    """A block: each `with` is one run. The same object may be entered again before it ends (recursion, several
    threads or asyncio tasks): each run is paired with its own end, per thread and per task."""

    __slots__ = ("name", "runs", "sink")

    def __init__(self, sink: _Sink, name: str) -> None:
        self.sink = sink
        self.name = (name if isinstance(name, str) else str(name))[:MAX_NAME]  # 42, b"x": as outside tracking
        self.runs: dict[Any, list[tuple[int, int, float, float]]] = {}  # whose -> open runs (id, pid, t0, cpu0)

    def __enter__(self) -> _Block:
        sink = self.sink
        sink.here()
        with sink.lock:
            run_id = next(sink.seq)
            hwm = _read_hwm()
            reset = _reset_hwm()
            if reset and hwm > _reset_peak[0]:
                _reset_peak[0] = hwm
            for peak in sink.open_blocks.values():  # an enclosing block keeps what the reset clears
                if hwm > peak[0]:
                    peak[0] = hwm
            sink.open_blocks[run_id] = [0 if reset else -1]
            msg = {"k": "s", "pid": sink.pid, "id": run_id, "name": self.name, "t": time.time(), "hwm": hwm}
            if alloc := _allocators():
                msg["ga"] = alloc
            # the wall-clock window holds the CPU window (never more CPU than wall time for one thread)
            self.runs.setdefault(_whose(), []).append((run_id, sink.pid, time.perf_counter(), time.process_time()))
            sink.send(msg)
        return self

    def __exit__(self, *exc: object) -> None:
        cpu1 = time.process_time()
        t1 = time.perf_counter()
        whose = _whose()
        stack = self.runs.get(whose)
        if not stack:
            only = next(iter(self.runs.items()), None)
            if len(self.runs) != 1 or only is None or len(only[1]) != 1:
                return  # an exit without its entry
            # a generator's block (one run) ended in another task or thread: an async generator closed by the
            # loop's finalizer after a `break`, a generator collected elsewhere
            whose, stack = only
        run_id, pid, t0, cpu0 = stack.pop()
        if not stack:
            del self.runs[whose]
        if os.getpid() != pid:
            return  # a forked child leaving its parent's block: not its run (even once it has blocks of its own)
        sink = self.sink
        with sink.lock:
            hwm = _read_hwm()
            peak = sink.open_blocks.pop(run_id, [-1])[0]
            if peak >= 0:
                peak = max(peak, hwm)
            for other in sink.open_blocks.values():
                if hwm > other[0]:
                    other[0] = hwm
            msg = {
                "k": "e",
                "pid": sink.pid,
                "id": run_id,
                "name": self.name,
                "t": time.time(),
                "dur": t1 - t0,
                "cpu": cpu1 - cpu0,
                "peak": peak if peak >= 0 else None,
                "hwm": hwm,
            }
            if alloc := _allocators():
                msg["ga"] = alloc
            sink.send(msg)


TORCH_STATS = (  # torch.cuda.memory_stats keys: what max_memory_allocated/reserved and their current figures read
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
)


def _allocators() -> list[list[Any]]:
    """The GPU allocators' figures now, for frameworks the program imported and initialised (never importing
    one, never resetting a statistic): [framework, device, allocated, peak allocated, reserved, peak reserved]."""
    try:
        return (_torch_figures() + _jax_figures())[:16]
    except Exception:  # a framework in a state we do not know: no figures, never an error in the program
        return []


def _torch_figures() -> list[list[Any]]:
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return []
    out = []
    for i in range(cuda.device_count()):
        st = cuda.memory_stats(i)
        figures = [int(st.get(k, 0)) for k in TORCH_STATS]
        if any(figures):
            out.append(["torch", f"cuda:{i}", *figures])
    return out


def _jax_figures() -> list[list[Any]]:
    bridge = sys.modules.get("jax._src.xla_bridge")  # its backends exist once the program used a device
    out = []
    for backend in list((getattr(bridge, "_backends", None) or {}).values()):
        for d in backend.local_devices():
            st = d.memory_stats() or {}
            if "peak_bytes_in_use" in st:
                figures = (st.get("bytes_in_use", 0), st["peak_bytes_in_use"])
                out.append(["jax", f"{d.platform}:{d.id}", *figures, st.get("bytes_reserved"), None])
    return out


def _whose() -> Any:
    """Whose run: this thread's, or this asyncio task's (tasks interleave in one thread)."""
    aio = sys.modules.get("asyncio")
    if aio is not None and aio._get_running_loop() is not None:
        return threading.get_ident(), id(aio.current_task())
    return threading.get_ident()


class _NoBlock:
    __slots__ = ()

    def __enter__(self) -> _NoBlock:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NOOP = _NoBlock()


def _caller_name(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def block(name: str | None = None) -> _Block | _NoBlock:
    """`with block("load data"):` — figures for that part of the program (name: file:line by default).
    Runs of the same name aggregate, nested blocks included. A no-op outside tracking."""
    sink = _sink
    if sink is None or sink.fd == -2:  # not tracked, or the sampler is gone
        return _NOOP
    return _Block(sink, name if name is not None else _caller_name(1))


@overload
def tracked(func: F) -> F: ...
@overload
def tracked(func: str | None = None) -> Callable[[F], F]: ...
def tracked(func: Any = None) -> Any:
    """`@tracked` or `@tracked("train step")`: every call of the function is a run of a block (named by the
    function's qualified name by default)."""
    if callable(func):
        return _wrap(func, func.__qualname__)

    def decorate(f: F) -> F:
        return _wrap(f, func if func is not None else f.__qualname__)

    return decorate


# code flags (as inspect reads them, without importing inspect)
CO_GENERATOR = 0x20  # a generator function
CO_COROUTINE = 0x80  # an `async def` function
CO_ASYNC_GENERATOR = 0x200  # an `async def` with `yield`


def _wrap(f: F, name: str) -> F:
    flags = getattr(getattr(f, "__code__", None), "co_flags", 0)
    if flags & CO_COROUTINE:
        return _wrap_async(f, name)
    if flags & CO_GENERATOR:
        return _wrap_generator(f, name)
    if flags & CO_ASYNC_GENERATOR:
        return _wrap_async_generator(f, name)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sink = _sink
        if sink is None or sink.fd == -2:
            return f(*args, **kwargs)
        with _Block(sink, name):
            return f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _wrap_async(f: F, name: str) -> F:
    """`@tracked` on an `async def`: a run lasts until the coroutine returns, not until it is created."""

    @functools.wraps(f)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        sink = _sink
        if sink is None or sink.fd == -2:
            return await f(*args, **kwargs)
        with _Block(sink, name):
            return await f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _wrap_generator(f: F, name: str) -> F:
    """`@tracked` on a generator function: a run lasts from its first item until it is exhausted, closed or
    collected, not just the call that creates it. `send`/`throw` reach it through `yield from`."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sink = _sink
        if sink is None or sink.fd == -2:
            return (yield from f(*args, **kwargs))
        with _Block(sink, name):
            return (yield from f(*args, **kwargs))

    return wrapper  # type: ignore[return-value]


def _wrap_async_generator(f: F, name: str) -> F:
    """`@tracked` on an async generator: a run lasts until it is exhausted or closed; `asend`, `athrow` and
    `aclose` are passed on (an async generator has no `yield from`)."""

    @functools.wraps(f)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        sink = _sink
        agen = f(*args, **kwargs)
        with _Block(sink, name) if sink is not None and sink.fd != -2 else _NOOP:
            try:
                value = await agen.__anext__()
                while True:
                    try:
                        sent = yield value
                    except GeneratorExit:
                        await agen.aclose()
                        raise
                    except BaseException as e:
                        value = await agen.athrow(e)
                    else:
                        value = await agen.asend(sent)
            except StopAsyncIteration:
                return

    return wrapper  # type: ignore[return-value]


def mark(name: str) -> None:
    """An instant on the session's timeline (`mark("epoch 3")`). A no-op outside tracking."""
    sink = _sink
    if sink is None:
        return
    sink.here()
    with sink.lock:
        sink.send({"k": "m", "pid": sink.pid, "name": str(name)[:MAX_NAME], "t": time.time()})


def tracking() -> bool:
    """Whether blocks are reported (the program runs under gputop-track or inside a Tracker)."""
    return _sink is not None
