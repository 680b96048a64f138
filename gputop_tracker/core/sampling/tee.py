"""The command's output, read on its way: the --watch-output tee and the output-file poller.

`OutputTee`: the command writes into pipes; we copy every byte on to where it would have gone (its stdout /
stderr), buffered and never blocking, and hand each chunk to a scanner (OOM messages). It outlives the
command: background writers keep writing after it exited, so we linger, then fork a small helper that copies
on. `OutputFilePoller`: the live TUI's output file, read as it grows. Plain Python: runs in the sampler.
"""

from __future__ import annotations

import os
import select
import stat
import time
from collections.abc import Callable

TEE_BUFFER_MAX = 16 << 20  # bytes held per destination before we stop reading the command's pipe
TEE_LINGER_SECONDS = 5.0  # how long we keep copying after the command exited (background writers)
READ_SIZE = 1 << 16
POLL_READS_MAX = 16  # reads of the output file per sample: a flood of output never stalls sampling

Scanner = Callable[[bytes], None]


class OutputTee:
    def __init__(self, scan: Scanner | None = None) -> None:
        self.scan = scan  # every chunk read, in order
        self.sources: dict[int, int] = {}  # pipe read fd -> where the command's output goes
        self.pending: dict[int, bytearray] = {}  # destination fd -> bytes not yet written there
        self._takes_whole_buffers: dict[int, bool] = {}  # destination is a file, or already non-blocking

    def open_pipes(self, stdout: int | None, stderr: int | None) -> tuple[int, int]:
        """Pipes in front of the command's stdout and stderr (None: ours); their write ends, for the command."""
        write_ends = []
        for target, default in ((stdout, 1), (stderr, 2)):
            r, w = os.pipe()
            os.set_blocking(r, False)
            self.sources[r] = target if target is not None else default
            write_ends.append(w)
        return write_ends[0], write_ends[1]

    @property
    def busy(self) -> bool:
        """Pipes still open, or bytes still to write."""
        return bool(self.sources) or any(self.pending.values())

    def readable(self) -> list[int]:
        """The command's pipes we read now: not those whose destination already holds TEE_BUFFER_MAX unwritten
        bytes (the command then blocks on its own writes, as it would without --watch-output)."""
        return [r for r, t in self.sources.items() if len(self.pending.get(t, b"")) < TEE_BUFFER_MAX]

    def writable(self) -> list[int]:
        """Destinations with bytes waiting: select them for writing."""
        return [t for t, buf in self.pending.items() if buf]

    def read(self, fd: int) -> None:
        """`fd` (one of `sources`) is readable: copy what it holds on, and scan it."""
        try:
            data = os.read(fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # every writer closed it
            os.close(fd)
            del self.sources[fd]
            return
        target = self.sources[fd]
        self.pending.setdefault(target, bytearray()).extend(data)
        self.flush(target)
        if self.scan is not None:
            self.scan(data)

    def flush(self, target: int) -> None:
        """Write what we can to `target` without blocking; the rest stays buffered, never dropped.

        We never set O_NONBLOCK on the destination (it is shared: a terminal, the user's pipe): a file or an
        already non-blocking fd takes the whole buffer; anything else gets PIPE_BUF-sized writes, each only once
        select() says it is writable (a pipe then has room for it: the write cannot block)."""
        buf = self.pending.get(target)
        if not buf:
            return
        whole = self._takes_whole_buffers.get(target)
        if whole is None:
            try:
                whole = stat.S_ISREG(os.fstat(target).st_mode) or not os.get_blocking(target)
            except OSError:
                whole = False
            self._takes_whole_buffers[target] = whole
        while buf:
            if not whole and not _writable(target):
                return
            try:
                n = os.write(target, buf if whole else buf[: select.PIPE_BUF])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the destination is gone (EPIPE...)
                self._destination_gone(target)
                return
            del buf[:n]

    def _destination_gone(self, target: int) -> None:
        """Writing to `target` failed: behave as the pipe the command would have written into. We stop reading
        what goes there and close our read ends, the only ones: the command's next write there fails with
        EPIPE / SIGPIPE, as it would have without us (`yes | head` ends instead of being copied into nothing)."""
        self.pending.pop(target, None)
        for fd in [fd for fd, t in self.sources.items() if t == target]:
            del self.sources[fd]
            try:
                os.close(fd)
            except OSError:
                pass

    def copy_until(self, deadline: float | None) -> None:
        """Copy until every writer closed the pipes and everything was written, or until `deadline`
        (monotonic; None: no limit)."""
        while self.busy:
            timeout = None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                timeout = min(left, 0.5)
            try:
                ready, writable, _ = select.select(self.readable(), self.writable(), [], timeout)
            except OSError:
                return
            for t in writable:
                self.flush(t)
            for fd in ready:
                if fd in self.sources:
                    self.read(fd)

    def linger(self, in_helper: Callable[[set[int]], None]) -> None:
        """After tracking ends: keep copying (background processes of the command still write) for at most
        TEE_LINGER_SECONDS; then a small helper process takes over the copying, so a late writer never dies
        of SIGPIPE and no byte is lost. `in_helper(fds to keep)` readies the helper (closes the rest)."""
        if not self.busy:
            return
        self.copy_until(time.monotonic() + TEE_LINGER_SECONDS)
        if self.busy:
            self._hand_over(in_helper)

    def _hand_over(self, in_helper: Callable[[set[int]], None]) -> None:
        try:
            pid = os.fork()
        except OSError:
            return
        if pid:  # the helper copies on; we forget the pipes (our copies closed: EOF is the helper's business)
            for fd in self.sources:
                os.close(fd)
            self.sources.clear()
            self.pending.clear()
            return
        try:  # the helper: copy until every writer closed the pipes, nothing else (no scanning)
            in_helper({*self.sources, *self.pending})
            self.scan = None
            self.copy_until(None)
        finally:
            os._exit(0)


class OutputFilePoller:
    """The command's output file (live TUI), read as it grows; each chunk handed to `scan`."""

    def __init__(self, path: str | None, scan: Scanner) -> None:
        self.scan = scan
        self.fd = -1
        if path:
            try:
                self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self.fd = -1

    def poll(self) -> None:
        if self.fd < 0:
            return
        for _ in range(POLL_READS_MAX):
            try:
                data = os.read(self.fd, READ_SIZE)
            except OSError:
                return
            if not data:
                return
            self.scan(data)


def _writable(fd: int) -> bool:
    try:
        return bool(select.select([], [fd], [], 0)[1])
    except (OSError, ValueError):
        return False
