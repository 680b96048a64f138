"""What every exporter offers the front ends, and the options they are opened with (no outside library here)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gputop_tracker.core.model.messages import Message

DEFAULT_TOP_PROCESSES = 20  # processes given their own series, by RSS: label cardinality stays bounded
MAX_TOP_PROCESSES = 1000
EXTRA = "prometheus"  # the pyproject extra that brings prometheus-client


class ExportError(ValueError):
    """An exporter cannot be opened: one line for the user (bad address, port in use, library missing)."""

    errno: int | None = None  # the socket error behind it, where there is one


class Exporter(Protocol):
    def start(self) -> None:
        """Begin serving (threads start here: the CLI forks the sampler between opening and starting)."""

    def observe(self, msg: Message) -> None:
        """One message from the sampler, as the front end received it; cheap (keeps references only)."""

    def close(self) -> None:
        """Stop serving; remove what would otherwise go stale (the textfile)."""

    def set_reporter(self, report: Callable[[str], None]) -> None:
        """Where a failure while exporting is told (once per failure, one line): stderr unless set; the live
        view, which owns the terminal, shows it as a notification. Called from the exporter's threads."""


@dataclass
class Address:
    host: str
    port: int
    family: int
    every: bool = False  # `:PORT`: every interface, IPv4 and IPv6 (one dual-stack socket where IPv6 exists)

    def __str__(self) -> str:
        if self.every:
            return f":{self.port}"
        return f"[{self.host}]:{self.port}" if self.family == socket.AF_INET6 else f"{self.host}:{self.port}"


def every_interface(port: int) -> Address:
    """`:PORT`: an IPv6 socket that takes IPv4 too (`::`, IPV6_V6ONLY off) where the kernel has IPv6, as
    Prometheus' own exporters listen; else every IPv4 interface."""
    if socket.has_ipv6:
        try:
            socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()
            return Address("::", port, socket.AF_INET6, every=True)
        except OSError:
            pass  # IPv6 disabled in this kernel or container
    return Address("0.0.0.0", port, socket.AF_INET, every=True)


@dataclass
class ExportOptions:
    prometheus: str | None = None  # ADDR of the /metrics endpoint: ":9464", "127.0.0.1:9464", "[::1]:9464"
    textfile: str | None = None  # node_exporter textfile collector: FILE rewritten atomically
    top_processes: int = DEFAULT_TOP_PROCESSES
    flag: str = "--prometheus"  # how the user named the endpoint option, for error lines (API: prometheus=)
    textfile_flag: str = "--prometheus-textfile"

    @classmethod
    def for_api(
        cls, prometheus: str | None, textfile: str | os.PathLike[str] | None, top_processes: int
    ) -> ExportOptions:
        """The API's `Tracker(prometheus=..., prometheus_textfile=..., prometheus_top=...)`, checked."""
        if prometheus is not None and not isinstance(prometheus, str):  # 9464: the port, but on which interface?
            raise ExportError(f"prometheus= is an address as a str, e.g. '127.0.0.1:9464', not {prometheus!r}")
        try:
            textfile_name = os.fspath(textfile) if textfile is not None else None
        except TypeError:
            raise ExportError(f"prometheus_textfile= must be a file name (str or Path), not {textfile!r}") from None
        if isinstance(textfile_name, bytes):
            raise ExportError(f"prometheus_textfile= must be a file name as str or Path, not bytes {textfile!r}")
        options = cls(prometheus, textfile_name, top_processes, "prometheus=", "prometheus_textfile=")
        options.check()
        return options

    @property
    def enabled(self) -> bool:
        return self.prometheus is not None or self.textfile is not None  # "" is asked for, and refused by check

    def check(self) -> None:
        """What can be checked without binding or importing anything; ExportError otherwise."""
        if self.prometheus is not None:
            parse_address(self.prometheus, self.flag)
        if self.textfile is not None:
            check_textfile(self.textfile, self.textfile_flag)
        if isinstance(self.top_processes, bool) or not isinstance(self.top_processes, int):
            raise ExportError(f"the number of top processes must be an integer, not {self.top_processes!r}")
        if not 0 <= self.top_processes <= MAX_TOP_PROCESSES:
            raise ExportError(f"the number of top processes must be 0 to {MAX_TOP_PROCESSES}, not {self.top_processes}")


@dataclass
class SessionInfo:
    """What `gputop_session_info` carries; the session id arrives with the sampler's `started` message."""

    command: list[str] = field(default_factory=list)
    host: str = field(default_factory=socket.gethostname)
    slurm_job_id: str = ""
    session: str = ""


def command_of(pid: int) -> list[str]:
    """The command line of a running process (attach, the API), or ["pid N"] when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        args = []
    return args or [f"pid {pid}"]


def _split_address(s: str, where: str) -> tuple[str, str]:
    """(host, port text) of `[IPV6]:PORT`, `HOST:PORT` or a bare PORT (host "")."""
    if s.startswith("["):
        host, sep, port_text = s[1:].partition("]:")
        if not sep or not host:
            raise ExportError(f"{where}: an IPv6 address is written [ADDR]:PORT, e.g. [::1]:9464")
        return host, port_text
    if ":" in s:
        host, _, port_text = s.rpartition(":")
        if ":" in host:
            raise ExportError(f"{where}: put an IPv6 address in brackets, e.g. [::1]:9464")
        return host, port_text
    return "", s


def _port(port_text: str, where: str) -> int:
    try:
        port = int(port_text, 10)
    except ValueError:
        raise ExportError(f"{where}: the port must be a number (e.g. :9464)") from None
    if not 1 <= port <= 65535:
        raise ExportError(f"{where}: the port must be 1 to 65535, not {port}")
    return port


def parse_address(text: str, flag: str = "--prometheus") -> Address:
    """`:PORT` (every interface, IPv4 and IPv6), `HOST:PORT`, `[IPV6]:PORT` or a bare PORT; ExportError when
    bad."""
    where = f"{flag} {text!r}"
    s = text.strip()
    if not s:
        raise ExportError(f"{where}: needs an address, e.g. :9464 or 127.0.0.1:9464")
    if "://" in s or "/" in s:
        raise ExportError(f"{where}: an address is HOST:PORT, without a scheme or a path (e.g. 127.0.0.1:9464)")
    host, port_text = _split_address(s, where)
    port = _port(port_text, where)
    if not host:
        return every_interface(port)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ExportError(f"{where}: cannot use address {host!r}: {reason}") from None
    family, _, _, _, sockaddr = found[0]
    return Address(str(sockaddr[0]), port, family)


def check_textfile(path: str, flag: str = "--prometheus-textfile") -> None:
    """FILE can be replaced atomically and removed at the end without touching anything that is not ours: its
    directory exists and is writable, and FILE is new or a textfile an earlier gputop-track run left behind."""
    if not path:
        raise ExportError(f"{flag} needs a file name")
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ExportError(f"{flag} {path}: is a directory")
    if not os.path.isdir(directory):
        raise ExportError(f"{flag} {path}: no such directory: {directory}")
    if os.path.lexists(path) and not is_our_textfile(path):
        raise ExportError(
            f"{flag} {path}: exists and is not a textfile written by gputop-track (it would be replaced and"
            " removed at the end): name a new file"
        )
    if textfile_in_use(path):
        raise ExportError(
            f"{flag} {path}: another gputop-track run is writing it now (each would replace the other's figures):"
            " name a file of this run's own (e.g. with the PID, or ${SLURM_JOB_ID}-${SLURM_LOCALID})"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ExportError(f"{flag} {path}: directory not writable: {directory}")
    try:  # access() says yes to root everywhere, and on /proc, /sys or a read-only mount: try it
        with tempfile.TemporaryFile(dir=directory, prefix=".gputop-check-"):
            pass
    except OSError as e:
        raise ExportError(f"{flag} {path}: cannot write in {directory}: {e.strerror or e}") from None


TEXTFILE_MARK = b"# HELP gputop_"  # every textfile this tool writes starts with one of its metric families


def is_our_textfile(path: str) -> bool:
    """A regular file (not a link, FIFO or device) whose first line is one of this tool's metric families: what a
    run killed before its end left behind. Opened without following links and without blocking on a FIFO."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        head = os.read(fd, len(TEXTFILE_MARK))
    except OSError:
        return False
    finally:
        os.close(fd)
    return head == TEXTFILE_MARK


def hold_textfile(fd: int) -> None:
    """The writer's mark on a textfile it put in place: a shared lock, held while the fd is open (a run that is
    killed loses it with its fds). Where the file system has no locks, no mark: nothing is refused for it."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)


def textfile_in_use(path: str) -> bool:
    """Some process (another run, or another Tracker of this program) holds path's textfile as its writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)  # our own test lock goes with it
    return False
