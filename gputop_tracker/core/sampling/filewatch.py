"""Wait for a file to be written: inotify on Linux, a timed poll where it is missing.

The live view tails the command's output file. Polling it five times a second costs a wake-up, a read and a
thread switch each time, for a command that may print nothing for hours; inotify wakes the reader only when
the command wrote. Opened on the file's descriptor (`/proc/self/fd/N`), so it works for an unlinked file too.
"""

from __future__ import annotations

import ctypes
import os
import select
import stat

IN_MODIFY = 0x00000002
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC


class FileWatch:
    """`wait(timeout, *others)` returns when the file was written since the last wait, when one of the `others`
    descriptors is readable, or after `timeout` seconds. Without inotify it is a plain timed wait (`poll`
    seconds at most), so a caller reads the file again either way."""

    def __init__(self, fd: int, poll: float = 0.2) -> None:
        self.poll = poll
        # a regular file only: /dev/null (attach mode has no output) is written by every process on the machine
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        self._ifd = _inotify_watch(f"/proc/self/fd/{fd}") if regular else None

    @property
    def notified(self) -> bool:
        """True where inotify watches the file (waits need no timeout to see a write)."""
        return self._ifd is not None

    def wait(self, timeout: float | None, *others: int) -> list[int]:
        """The `others` that are readable (an empty list: the file was written, or the time ran out)."""
        fds = [*others] if self._ifd is None else [self._ifd, *others]
        if self._ifd is None:
            timeout = self.poll if timeout is None else min(timeout, self.poll)
        ready, _, _ = select.select(fds, [], [], timeout)
        if self._ifd is not None and self._ifd in ready:
            try:
                while os.read(self._ifd, 4096):  # the events themselves say nothing we need: drain them
                    pass
            except BlockingIOError:
                pass
        return [fd for fd in ready if fd != self._ifd]

    def close(self) -> None:
        if self._ifd is not None:
            os.close(self._ifd)
            self._ifd = None


def _inotify_watch(path: str) -> int | None:
    """An inotify descriptor watching `path` for writes, or None (not Linux, no libc, out of watches)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the C library already loaded (find_library runs ldconfig)
        init, add = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError, TypeError):
        return None
    ifd = int(init(IN_NONBLOCK | IN_CLOEXEC))
    if ifd < 0:
        return None
    if int(add(ifd, os.fsencode(path), IN_MODIFY)) < 0:
        os.close(ifd)
        return None
    return ifd
