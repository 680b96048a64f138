"""The sampler's end of code-block reporting: a FIFO in a private temporary directory.

The command (and every descendant) finds it through the GPUTOP_TRACKER_BLOCKS environment variable; a block
writes one JSON line (under PIPE_BUF, so atomic) at its start and its end, without ever blocking (a full FIFO
drops the message: the writer counts it and says so in its next message). The sampler reads the FIFO in its
select loop. It holds a write end of its own too, so the FIFO never reads as closed between two writers.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import re
import stat
from typing import Any

from gputop_tracker.core.blocks.protocol import ENV

F_SETPIPE_SZ = 1031
PIPE_SIZE = 1 << 20  # 1 MiB: the most an unprivileged process may ask for by default (fs.pipe-max-size)
MAX_PENDING = 1 << 16  # bytes of an unfinished line kept (a line is at most PIPE_BUF)


class BlockInbox:
    def __init__(self, directory: str, path: str, fd: int, keep_fd: int) -> None:
        self.directory = directory
        self.path = path
        self.fd = fd
        self.keep_fd = keep_fd
        self.partial = b""
        self.bad = 0  # lines that were not a block message
        self._at_exit: Any = None

    @classmethod
    def create(cls) -> BlockInbox | None:
        """A fresh FIFO in a directory only we can enter; None when the machine does not allow one."""
        # as tempfile.mkdtemp (a random name, mode 0700), without loading tempfile into the sampler before the
        # fork: the command's ru_maxrss is judged against our own size then. TMPDIR first, then the usual
        # places, as tempfile does (a TMPDIR that is gone must not turn blocks off); absolute: a relative TMPDIR
        # would name a FIFO that a program changing its cwd (or a child started elsewhere) could not find
        for base in dict.fromkeys(os.path.abspath(b) for b in (os.environ.get("TMPDIR"), *FALLBACKS) if b):
            made = cls._make(base)
            if made is not None:
                return made
        return None

    @classmethod
    def _make(cls, base: str) -> BlockInbox | None:
        sweep(base)
        directory = os.path.join(base, f"{PREFIX}{os.getpid()}-{os.urandom(6).hex()}")
        path = os.path.join(directory, "blocks")
        try:
            os.mkdir(directory, 0o700)
        except OSError:
            return None
        try:
            os.chmod(directory, 0o700)  # the modes as given, whatever the program's umask (0o277: no FIFO)
            os.mkfifo(path, 0o600)
            os.chmod(path, 0o600)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            keep_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            _remove(directory, path)
            return None
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
        return cls(directory, path, fd, keep_fd)

    @classmethod
    def attach(cls, path: str) -> BlockInbox | None:
        """The reading end of a FIFO made by someone else (the Tracker): it removes it, not us."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            keep_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        return cls(os.path.dirname(path), path, fd, keep_fd)

    def export(self) -> None:
        """Name the FIFO in our environment: the command we launch inherits it."""
        os.environ[ENV] = self.path

    def read(self) -> list[dict[str, Any]]:
        """The whole messages waiting, oldest first: what the FIFO held when it was read, at most PIPE_SIZE bytes
        (a program writing blocks without pause never keeps the sampler here; the rest comes next time)."""
        chunks = [self.partial]
        total = 0
        while total < PIPE_SIZE:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EAGAIN: empty; anything else: nothing to read either
                break
            chunks.append(data)
            total += len(data)
            if len(data) < 65536:  # emptied (or closed): what came after is for the next read
                break
        *lines, rest = b"".join(chunks).split(b"\n")
        self.partial = rest[-MAX_PENDING:]
        out = []
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                self.bad += 1
                continue
            if _valid(msg):
                out.append(msg)
            else:
                self.bad += 1
        return out

    def take(self, name: str, cap: int) -> tuple[int, int]:
        """(an open descriptor, its size) of `name`, a file a tracked process left in our directory beside the
        FIFO (the probe's out-of-memory state, an allocator history), now taken away (unlinked): only a regular
        file of ours, named as the probe names them, at most `cap` bytes; (-1, size or -1) otherwise. Nothing
        else is opened, a link is never followed. The caller closes the descriptor."""
        if not OWN_FILE.fullmatch(name):
            return -1, -1
        path = os.path.join(self.directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return -1, -1
        with contextlib.suppress(OSError):
            os.unlink(path)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_size <= cap:
                return fd, st.st_size
            size = st.st_size
        except OSError:
            size = -1
        os.close(fd)
        return -1, size

    def claim(self, name: str, cap: int) -> bytes | None:
        """`take`'s file read whole (a small one), or None."""
        fd, _ = self.take(name, cap)
        if fd < 0:
            return None
        try:
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read(cap + 1)[:cap]
        except OSError:
            return None
        finally:
            os.close(fd)

    def close_fds(self) -> None:
        for fd in (self.fd, self.keep_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self.keep_fd = -1

    def close(self) -> None:
        """No more messages: writers get an error (and stop), the FIFO and its directory go."""
        self.close_fds()
        _remove(self.directory, self.path)
        if self._at_exit is not None:
            atexit.unregister(self._at_exit)
            self._at_exit = None

    def remove_at_exit(self) -> None:
        """Should this process exit before close() (a Tracker never stopped), the FIFO and its directory go then
        (by this process only: a forked child's exit leaves them to us)."""
        pid, directory, path = os.getpid(), self.directory, self.path

        def remove() -> None:
            if os.getpid() == pid:
                _remove(directory, path)

        self._at_exit = remove
        atexit.register(remove)


FALLBACKS = ("/tmp", "/var/tmp", "/dev/shm")  # after TMPDIR
OWN_FILE = re.compile(r"oom-[0-9]{1,10}-[0-9]{1,6}\.(json|pickle)")  # what the probe leaves beside the FIFO
PREFIX = "gputop-blocks-"  # + the sampler's pid + a random part


def sweep(base: str) -> None:
    """Remove the FIFO directories of samplers that are gone (killed: they could not clean up), ours only."""
    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX) :].split("-")[0]
        directory = os.path.join(base, name)
        try:
            if not pid.isdigit() or os.path.exists(f"/proc/{pid}") or os.stat(directory).st_uid != os.getuid():
                continue
        except OSError:
            continue
        path = os.path.join(directory, "blocks")
        if _read_by_someone(path):
            continue  # a sampler in another PID namespace (a container sharing /tmp): its pid is not ours to see
        _remove(directory, path)


def _read_by_someone(path: str) -> bool:
    """The FIFO still has a reader: opening it to write, without blocking, succeeds (ENXIO: none)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


def _remove(directory: str, path: str) -> None:
    """The FIFO and its directory, only if they are still what we make: a FIFO (never a file put in its
    place), the files the probe leaves there and no one took (named as it names them; a link among them goes as a
    link, what it points to is untouched), then the directory if empty (never a directory with anything else in
    it)."""
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.lstat(path).st_mode):
            os.unlink(path)
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            left = os.path.join(directory, name)
            if OWN_FILE.fullmatch(name) and not stat.S_ISDIR(os.lstat(left).st_mode):
                os.unlink(left)
    with contextlib.suppress(OSError):
        os.rmdir(directory)


_NUMBERS = ("t", "dur", "cpu")
_INTS = ("pid", "id", "hwm", "peak", "dropped")


def _valid(msg: Any) -> bool:
    """A block message as `gputop_tracker.api.blocks` writes it (anything else in the FIFO is counted and left)."""
    kinds = ("s", "e", "m", "d", "x", "r", "o")  # x, r: a probe's exit report and its reap list; o: a GPU OOM
    if not isinstance(msg, dict) or msg.get("k") not in kinds or not isinstance(msg.get("name"), str):
        return False
    if not isinstance(msg.get("pid"), int) or not isinstance(msg.get("t"), (int, float)):
        return False
    if msg["k"] in ("s", "e") and not isinstance(msg.get("id"), int):
        return False
    for k in _NUMBERS:
        v = msg.get(k)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or abs(v) > 1e15):
            return False
    return all(msg.get(k) is None or (isinstance(msg[k], int) and not isinstance(msg[k], bool)) for k in _INTS)
