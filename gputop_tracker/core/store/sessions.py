"""Saved sessions: one JSON file per session, written atomically (temp file + rename), no shared index.

Fifty runs into one store at once never touch the same file, so nothing needs a lock. Readers validate
with `models.Session` and list unreadable files with the reason instead of failing.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import secrets
import socket
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputop_tracker.core.model import paths

if TYPE_CHECKING:
    from gputop_tracker.core.model.models import Session

SUFFIX = ".json"
# save_session writes the timeline last; a reader that needs only meta and summary stops parsing here.
# Whitespace allowed around it: a session pretty-printed by another tool (jq) is found the same way.
_TIMELINE_KEY = re.compile(rb',\s*"timeline"\s*:')
_KEY_OVERLAP = 4096  # bytes of the previous chunk searched again: the key may straddle two chunks
_HEAD_CHUNK = 1 << 20
_HEAD_MAX = 64 << 20  # meta and summary are far smaller; past this the key is not looked for any more
_LIST_WHOLE_MAX = 128 << 20  # a file read whole for a listing (no timeline key found) is never larger


def new_session_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    host = "".join(c for c in socket.gethostname().split(".")[0] if c.isalnum() or c == "-")[:24] or "host"
    return f"{stamp}-{host}-{os.getpid()}-{secrets.token_hex(2)}"


def write_atomic(
    path: Path, data: bytes, mode: int | None = None, *, durable: bool = True, make_dirs: bool = True
) -> None:
    """Write `path` whole or not at all: a temporary file beside it, renamed over it. The file gets `mode`
    (else mkstemp's 0600). `durable=False` skips the fsync (a checkpoint the final save will supersede).
    `make_dirs`: its directory is made when missing (the store's; never a directory the user named)."""
    if make_dirs:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    made = os.fstat(fd)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            now = os.lstat(tmp)
            if (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino):  # ours still: never what replaced it
                os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    """This process's umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


class OutputError(ValueError):
    """An `-o FILE` that cannot be written: the CLI says so in one line and exits 2 before any work."""


def check_output(name: str) -> None:
    """The one rule for every `-o FILE` (the report, `sessions export`, `sessions events`): refuse, before any
    work, what a shell's `> FILE` would refuse. A regular file must be writable by us (`os.access`, so root
    may overwrite a 0444 file as its shell would); a new one needs an existing, writable directory (no
    directory is created); a FIFO, a device or /dev/stdout must be writable and is written in place."""
    if not name:
        raise OutputError("cannot write '': no such file or directory")
    if name.endswith(os.sep):  # Path() drops the slash: FILE.png/ would become FILE.png, as no shell does
        raise OutputError(f"cannot write {name}: a file name cannot end in {os.sep}")
    out = Path(name)
    try:
        st: os.stat_result | None = os.stat(out)
    except FileNotFoundError:
        st = None  # new, or a dangling symlink: its target is created
    except OSError as e:
        raise OutputError(f"cannot write {name}: {e.strerror}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"cannot write {name}: is a directory")
        if not os.access(out, os.W_OK):
            raise OutputError(f"cannot write {name}: permission denied")
        if stat.S_ISREG(st.st_mode):
            _check_can_replace(name, Path(os.path.realpath(out)).parent)  # replaced by a rename inside its directory
        return
    parent = Path(os.path.realpath(out)).parent
    if not parent.is_dir():
        raise OutputError(f"cannot write {name}: directory {parent} does not exist")
    _check_can_replace(name, parent)


def _check_can_replace(name: str, parent: Path) -> None:
    """A file can be created in `parent` (what the atomic write does at the end). `os.access` alone says yes to
    root for /sys or /proc, where no file can be created: a probe file is made, and removed at once (only that
    very file: the same inode)."""
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {name}: directory {parent} is not writable")
    try:
        fd, probe = tempfile.mkstemp(prefix=".gputop-probe-", suffix=".tmp", dir=parent)
    except OSError as e:
        raise OutputError(f"cannot write {name}: no file can be created in {parent} ({e.strerror})") from None
    try:
        made = os.fstat(fd)
        os.close(fd)
        now = os.lstat(probe)
        if (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino):
            os.unlink(probe)
    except OSError:
        pass


def check_store(store: Path) -> None:
    """The store can take a session: a writable directory, or one that `mkdir -p` can make (its nearest
    existing ancestor is a writable directory). OutputError otherwise."""
    probe = Path(store).absolute()  # not abspath: "link/.." is the kernel's to resolve, through the link
    while not os.path.lexists(probe) and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"the session cannot be saved in {store}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"the session cannot be saved in {store}: {probe} is not writable")


def write_output(
    path: Path, data: bytes, *, make_dirs: bool = False, give_up: Callable[[], bool] | None = None
) -> None:
    """Write a file the user named (`-o FILE`) as a shell's `>` would leave it, but atomically where it can.

    A FIFO, a device or anything else that is not a regular file (also through a symlink: /dev/stdout) is
    opened and written in place, never replaced. A regular file is replaced atomically, through its
    symlinks (the link stays a link), keeping its permissions. A new file gets 0666 less the umask.
    `give_up`: a FIFO nobody reads yet is waited for, as `>` waits, until it says True (OSError EINTR then).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        opened = _open_fifo(path, give_up) if give_up is not None and stat.S_ISFIFO(st.st_mode) else None
        with open(path, "wb") if opened is None else os.fdopen(opened, "wb") as f:
            f.write(data)
        return
    target = Path(os.path.realpath(path))  # a (dangling) symlink: write its target
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    # as `>`: a missing directory (removed during the run) is an error, unless the caller asks for it
    write_atomic(target, data, mode, make_dirs=make_dirs)


def _open_fifo(path: Path, give_up: Callable[[], bool]) -> int:
    """A FIFO opened for writing once a reader opens it, polled: a blocking open() cannot be interrupted by a
    process whose signals one thread takes with sigwaitinfo (the headless front end), and would wait forever."""
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            if give_up():
                raise OSError(errno.EINTR, "interrupted while waiting for a reader of the FIFO") from None
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return fd


def save_session(store: Path, session: dict[str, Any], *, durable: bool = True) -> Path:
    path = paths.session_file(store, session["meta"]["id"])
    write_atomic(path, json.dumps(session, separators=(",", ":")).encode(), durable=durable)
    return path


def write_running(path: Path, session: dict[str, Any]) -> None:
    """A running session's figures so far (`paths.running_file`): atomic, no fsync (rewritten every few seconds)."""
    write_atomic(path, json.dumps(session, separators=(",", ":")).encode(), durable=False)


def ask_running(path: Path) -> None:
    """Ask the sampler of the running session `path` for its figures so far (it writes them within a couple of
    seconds, and goes on while asked again within 10 s: `core.sampling.saving`). Silent where it cannot."""
    watch = paths.watch_file(path.parent, path.name.removesuffix(SUFFIX))
    try:
        fd = os.open(watch, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        os.utime(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def forget_running(store: Path, session_id: str) -> None:
    """The running session's request and figures gone (it ended, was interrupted, or was deleted)."""
    for path in (paths.running_file(store, session_id), paths.watch_file(store, session_id)):
        try:
            path.unlink()
        except OSError:
            pass


def load_running(path: Path) -> Entry | None:
    """A running session's figures so far, as written by `write_running` (None where there are none, or they
    are older than the session's own file), listed under the session's own file name."""
    sid = path.name.removesuffix(SUFFIX)
    fresh = paths.running_file(path.parent, sid)
    try:
        if fresh.stat().st_mtime < path.stat().st_mtime:
            return None
    except OSError:
        return None
    entry = load(fresh)
    if entry.session is None or entry.session.meta.id != sid or entry.session.meta.status != "running":
        return None
    return Entry(sid, path, entry.session, partial=True)


@dataclass
class Entry:
    """One file of the store: a readable session, or the reason it is not."""

    id: str
    path: Path
    session: Session | None
    error: str | None = None
    partial: bool = False
    """True when loaded without its timeline (`load(..., timeline=False)`): load it again in full to chart it."""

    @property
    def running(self) -> bool:
        """Still being written by a live gputop-track (its sampler's pid is alive on this host)."""
        if self.session is None or self.session.meta.status != "running":
            return False
        meta = self.session.meta
        if meta.host != socket.gethostname() or not meta.engine_pid:
            return True  # cannot check another host: trust the file
        try:
            os.kill(meta.engine_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class NotRegular(OSError):
    """A store entry that is not a regular file (a FIFO, a directory, a device): never read, never waited on."""


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a device or special file")


def open_regular(path: Path) -> io.BufferedReader:
    """Open `path` for reading only if it is a regular file (through symlinks). The open itself cannot block:
    O_NONBLOCK makes a FIFO without a writer open at once, and it is then refused by its fstat."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(f"not a regular file ({_kind(mode)})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _cannot_read(e: OSError) -> str:
    if isinstance(e, NotRegular):
        return str(e)
    return f"cannot read: {e.strerror or e}"


def _read_head(path: Path) -> bytes | None:
    """The session without its timeline, as JSON, or None when the file is not laid out as save_session writes.

    Reads from the start only up to the timeline, so a day-long session costs no more than a short one.
    Inside a JSON string a quote is always escaped, so `,"timeline":` occurs only as a key. The file must end
    by closing both the timeline and the session, so one cut short inside its timeline is not taken as whole.
    """
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        head = bytearray()  # grown in place: linear in the bytes read, whatever the layout
        while True:
            chunk = f.read(_HEAD_CHUNK)
            if not chunk or len(head) >= _HEAD_MAX:
                return None
            searched = max(0, len(head) - _KEY_OVERLAP)
            head += chunk
            found = _TIMELINE_KEY.search(head, searched)
            if found is not None:
                break
        f.seek(max(0, size - 64))
        if not re.sub(rb"\s", b"", f.read()).endswith(b"}}"):
            return None
    return bytes(head[: found.start()]) + b"}"


def load(path: Path, *, timeline: bool = True) -> Entry:
    """One session file, validated. With `timeline=False` the timeline is not read (a list of sessions needs
    only meta and summary; a long session's timeline is megabytes) and the entry is marked `partial`."""
    sid = path.name.removesuffix(SUFFIX)
    if not timeline:
        try:
            head = _read_head(path)
        except OSError as e:
            return Entry(sid, path, None, _cannot_read(e))
        if head is not None:
            entry = _parse(sid, path, head)
            if entry.session is not None:
                entry.partial = True
                return entry
        # not laid out as expected, or the head alone does not parse: the full parse gives the true reason,
        # unless the file is too large to read whole for a mere listing
        too_large = _too_large_to_list(path)
        if too_large is not None:
            return Entry(sid, path, None, too_large)
    try:
        with open_regular(path) as f:
            raw = f.read()
    except OSError as e:
        return Entry(sid, path, None, _cannot_read(e))
    except MemoryError:
        return Entry(sid, path, None, "too large to read into memory")
    return _parse(sid, path, raw)


def _too_large_to_list(path: Path) -> str | None:
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size <= _LIST_WHOLE_MAX:
        return None
    return (
        f"not listed: {size / 1e6:.0f} MB without the layout gputop-track writes (meta and summary first); "
        "`sessions show` reads it whole"
    )


REPORT_KEYS = frozenset(("max_ram", "compute_time", "cpu_time"))  # every report gputop-track wrote has them


def _json_object(raw: bytes) -> tuple[dict[str, Any], str | None]:
    """The file's JSON object, or why it is no session's."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        what = e.msg.removesuffix(" at")  # json's "Invalid control character at": not "at at byte"
        return {}, f"corrupt or truncated JSON ({what} at byte {e.pos})"
    except UnicodeDecodeError as e:
        return {}, f"corrupt: not UTF-8 text ({e.reason} at byte {e.start})"
    except ValueError as e:
        return {}, f"corrupt: {e}"
    except RecursionError:
        return {}, "not a session (JSON nested too deeply to read)"
    except MemoryError:
        return {}, "too large to parse in memory"
    if not isinstance(data, dict):
        return {}, "not a session (JSON is not an object)"
    summary = data.get("summary")
    if isinstance(summary, dict) and not REPORT_KEYS & summary.keys():
        # every figure has a default: an object with none of a report's keys would list as a finished 0 s run
        return {}, "invalid session: summary holds none of a report's figures"
    return data, None


def _parse(sid: str, path: Path, raw: bytes) -> Entry:
    from pydantic import ValidationError

    from gputop_tracker.core.model.models import SCHEMA_VERSION, Session

    data, error = _json_object(raw)
    if error is not None:
        return Entry(sid, path, None, error)
    version = data.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        return Entry(sid, path, None, f"written by a newer gputop-tracker (schema {version} > {SCHEMA_VERSION})")
    try:
        session = Session.model_validate(data)
    except (RecursionError, MemoryError):
        return Entry(sid, path, None, "invalid session (nested too deeply or too large to validate)")
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        return Entry(sid, path, None, f"invalid session: {where}: {first['msg']} ({e.error_count()} errors)")
    return Entry(sid, path, session)


def list_entries(store: Path, *, timeline: bool = True) -> list[Entry]:
    """Every session file, newest first (by file name, which starts with the start time).

    `timeline=False` skips the timelines (see `load`): what a list of sessions needs."""
    try:
        files = [p for p in store.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(".")]
    except FileNotFoundError:
        return []
    except NotADirectoryError:  # bad input (`--store FILE`), as `find` says it
        raise LookupError(f"the store {store} is not a directory") from None
    files.sort(key=lambda p: p.name, reverse=True)
    return [load(p, timeline=timeline) for p in files]


def _check_id(session_id: str) -> None:
    if not session_id or "/" in session_id or "\0" in session_id or session_id.startswith("."):
        raise LookupError(f"invalid session id {session_id!r}: give an id (or its start) as `sessions list` shows")


def find(store: Path, session_id: str) -> Path:
    """The file of a session id, or of the only session whose id starts with it. Only plain names of the
    store are matched: an id with '/' or starting with '.' is refused."""
    _check_id(session_id)
    try:
        names = [n.name for n in store.iterdir()]
    except FileNotFoundError:
        names = []
    except NotADirectoryError:
        raise LookupError(f"the store {store} is not a directory") from None
    sessions = [n for n in names if n.endswith(SUFFIX) and not n.startswith(".")]
    if session_id + SUFFIX in sessions:
        return store / (session_id + SUFFIX)
    matches = sorted(n for n in sessions if n.startswith(session_id))
    if len(matches) == 1:
        return store / matches[0]
    if not matches:
        raise LookupError(f"no session {session_id!r} in {store}")
    raise LookupError(f"{session_id!r} matches {len(matches)} sessions; give more of the id")


def delete(store: Path, session_id: str) -> Path:
    path = find(store, session_id)
    path.unlink()
    sid = path.name.removesuffix(SUFFIX)
    paths.output_file(store, sid).unlink(missing_ok=True)
    forget_running(store, sid)
    import shutil

    for dump in store.iterdir():  # its OOM dump bundles go with it
        if dump.name.startswith(f"{sid}.oom-"):
            shutil.rmtree(dump, ignore_errors=True)
    return path
