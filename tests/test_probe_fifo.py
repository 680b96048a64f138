"""The probe and code blocks write only into the tracker's own FIFO: never through a link, into a regular file or a
device, into a FIFO of another user's, or in a directory another user can enter. Its path comes from the environment
and outlives the run: a process the job left running keeps it, and another user may re-create the directory."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import track

from gputop_tracker._probe.sitecustomize import open_ours
from gputop_tracker.core.blocks.probe import PROBE_DIR

PY = sys.executable
NOBODY = 65534
VICTIM = b"precious bytes that must never change\n"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another user")


def _fifo_dir(base: Path, mode: int = 0o700) -> tuple[Path, Path]:
    d = base / "gputop-tracker-1-abc"
    d.mkdir()
    d.chmod(mode)
    return d, d / "blocks"


def _victim(base: Path, mode: int = 0o600) -> Path:
    v = base / "victim"
    v.write_bytes(VICTIM)
    v.chmod(mode)
    return v


@pytest.fixture
def reader() -> Iterator[Callable[[Path], int]]:
    """Opens a FIFO's read end (so that a writer's non-blocking open would succeed); closed at the end."""
    fds: list[int] = []

    def open_reader(p: Path) -> int:
        fds.append(os.open(p, os.O_RDONLY | os.O_NONBLOCK))
        return fds[-1]

    yield open_reader
    for fd in fds:
        os.close(fd)


def _symlink_to_victim(tmp: Path) -> tuple[Path, Path]:
    v = _victim(tmp)
    _d, fifo = _fifo_dir(tmp)
    fifo.symlink_to(v)
    return fifo, v


def _regular_file(tmp: Path) -> tuple[Path, Path]:
    _d, fifo = _fifo_dir(tmp)
    fifo.write_bytes(VICTIM)
    return fifo, fifo


def _open_directory(tmp: Path) -> tuple[Path, Path]:
    _d, fifo = _fifo_dir(tmp, 0o755)  # others can enter: they could have swapped the FIFO
    os.mkfifo(fifo, 0o600)
    return fifo, fifo


def _directory_is_a_link(tmp: Path) -> tuple[Path, Path]:
    real, fifo = _fifo_dir(tmp)
    os.mkfifo(fifo, 0o600)
    link = tmp / "link"
    link.symlink_to(real)
    return link / "blocks", fifo


CASES = {
    "symlink to a file": _symlink_to_victim,
    "regular file": _regular_file,
    "directory others can enter": _open_directory,
    "directory is a link": _directory_is_a_link,
}


@pytest.mark.parametrize("case", CASES)
def test_open_ours_refuses(tmp_path: Path, case: str, reader: Callable[[Path], int]) -> None:
    path, target = CASES[case](tmp_path)
    if stat.S_ISFIFO(target.stat().st_mode):
        reader(target)  # a reader is there: only the rule can refuse
    assert open_ours(str(path)) == -1
    assert open_ours("relative/blocks") == -1 and open_ours("/") == -1 and open_ours("") == -1
    assert open_ours("blocks") == -1 and open_ours("/blocks") == -1


def test_open_ours_opens_the_trackers_fifo(tmp_path: Path, reader: Callable[[Path], int]) -> None:
    _, fifo = _fifo_dir(tmp_path)
    os.mkfifo(fifo, 0o600)
    assert open_ours(str(fifo)) == -1  # no reader: nothing to write to
    r = reader(fifo)
    fd = open_ours(str(fifo))
    assert fd >= 0
    os.write(fd, b"x\n")
    os.close(fd)
    assert os.read(r, 10) == b"x\n"


@as_root
def test_open_ours_refuses_another_users_directory_or_fifo(tmp_path: Path, reader: Callable[[Path], int]) -> None:
    tmp_path.chmod(0o755)
    d, fifo = _fifo_dir(tmp_path)
    os.mkfifo(fifo, 0o600)
    reader(fifo)
    os.chown(d, NOBODY, NOBODY)  # another user's directory, 0700, a FIFO of ours inside: they could swap it
    assert open_ours(str(fifo)) == -1
    os.chown(d, 0, 0)
    os.chown(fifo, NOBODY, NOBODY)  # our directory, their FIFO
    assert open_ours(str(fifo)) == -1
    os.chown(fifo, 0, 0)
    assert open_ours(str(fifo)) >= 0  # the same, ours again: opened (the fd is closed with the process)


# ---------------------------------------------------------------------------------------- a real exiting process
# A Python process with the probe on its path and the variable set, as a process the job left running has them.
EXITS = {
    "normal exit": "pass",
    "os._exit": "import os; os._exit(0)",
    "code block": "from gputop_tracker import block\nwith block('b'):\n    pass",
}


def _exit_with(path: Path, code: str, user: int | None = None, probe: Path = PROBE_DIR) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(probe), str(Path(__file__).resolve().parents[1])]),
        "GPUTOP_TRACKER_BLOCKS": str(path),
    }
    py, kw = PY, {}
    if user is not None:  # a Python that user can run (ours may be under root's home)
        py, kw = "/usr/bin/python3", {"user": user, "group": user}
    p = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True, timeout=30, **kw)  # type: ignore[call-overload]
    assert p.returncode == 0 and not p.stderr, p.stderr


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can reach (/tmp/x, 0755), the probe's files copied into it."""
    d = Path(tempfile.mkdtemp(dir="/tmp"))
    d.chmod(0o755)
    shutil.copytree(PROBE_DIR, d / "probe")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("how", EXITS)
@pytest.mark.parametrize("case", ["symlink to a file", "regular file"])
def test_an_exiting_process_writes_nothing_through_a_hostile_path(tmp_path: Path, case: str, how: str) -> None:
    path, victim = CASES[case](tmp_path)
    before = victim.stat()
    _exit_with(path, EXITS[how])
    assert victim.read_bytes() == VICTIM
    assert victim.stat().st_mtime_ns == before.st_mtime_ns


@as_root
@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="no /usr/bin/python3 for another user")
@pytest.mark.parametrize("how", ["normal exit", "os._exit"])
def test_another_users_directory_with_a_link_to_roots_file(shared_dir: Path, how: str) -> None:
    """The report's case: root's daemon keeps the variable; another user re-creates the directory (theirs, 0700)
    with `blocks ->` a root-owned file. And the other way round: a user's process, root's directory."""
    victim = _victim(shared_dir, 0o666)  # writable by anyone: only the rule keeps the user's process out
    d, fifo = _fifo_dir(shared_dir)
    fifo.symlink_to(victim)
    os.lchown(fifo, NOBODY, NOBODY)
    os.chown(d, NOBODY, NOBODY)
    _exit_with(fifo, EXITS[how], probe=shared_dir / "probe")  # root's process, the other user's directory
    assert victim.read_bytes() == VICTIM
    os.chown(d, 0, 0)
    os.lchown(fifo, 0, 0)
    d.chmod(0o755)  # root's, and enterable: else the user could not even reach the link
    _exit_with(fifo, EXITS[how], user=NOBODY, probe=shared_dir / "probe")  # the other user's process, root's
    assert victim.read_bytes() == VICTIM
    # the control: the same link in a directory of that user's own, 0700, is still a link, and refused
    os.chown(d, NOBODY, NOBODY)
    d.chmod(0o700)
    os.lchown(fifo, NOBODY, NOBODY)
    _exit_with(fifo, EXITS[how], user=NOBODY, probe=shared_dir / "probe")
    assert victim.read_bytes() == VICTIM


DAEMON = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)  # as a daemon does: the run's output ends with the job
    open(sys.argv[1], "w").write(os.environ["GPUTOP_TRACKER_BLOCKS"])
    deadline = time.time() + 30
    while not os.path.exists(sys.argv[2]) and time.time() < deadline:
        time.sleep(0.02)
    sys.exit(0)  # the probe's exit report, with the variable of a run that has ended
"""


def test_a_process_left_running_after_the_run_writes_nothing(tmp_path: Path) -> None:
    """The whole story through the real CLI: a daemon outlives the job; after the run its FIFO's directory is gone,
    is re-created holding a link to a file, and the daemon exits: the file is untouched."""
    told, go = tmp_path / "fifo-path", tmp_path / "go"
    p = track("--headless", "--no-save", "--", PY, "-c", DAEMON, str(told), str(go), env={"TMPDIR": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    deadline = time.time() + 10
    while not told.exists() and time.time() < deadline:
        time.sleep(0.02)
    fifo = Path(told.read_text())
    assert not fifo.parent.exists()  # the run removed its directory
    victim = _victim(tmp_path)
    fifo.parent.mkdir(mode=0o700)
    fifo.symlink_to(victim)
    go.touch()
    deadline = time.time() + 20
    while time.time() < deadline and any(_is_daemon(pid, str(go)) for pid in _pids()):
        time.sleep(0.05)
    assert victim.read_bytes() == VICTIM


def _pids() -> list[int]:
    return [int(x) for x in os.listdir("/proc") if x.isdigit()]


def _is_daemon(pid: int, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_the_exit_line_is_json_whatever_the_process_calls_itself(tmp_path: Path) -> None:
    """The probe writes its exit line itself (json costs a millisecond to import at exit): a name with quotes,
    a backslash, a control character or a non-ASCII letter still makes one JSON line, with that name."""
    import json

    _d, fifo = _fifo_dir(tmp_path)
    os.mkfifo(fifo)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    names = ['a"b\\c', "tab\there", "caf\u00e9", "plain"]
    code = "import sys; open('/proc/self/comm', 'wb').write(sys.argv[1].encode()); x = bytearray(8 << 20)"
    env = {**os.environ, "PYTHONPATH": PROBE_DIR, "GPUTOP_TRACKER_BLOCKS": str(fifo)}
    try:
        for name in names:
            subprocess.run([PY, "-c", code, name], env=env, check=True, timeout=60)
        data = os.read(rfd, 1 << 20)
    finally:
        os.close(rfd)
    lines = [json.loads(line) for line in data.decode().splitlines()]
    assert [m["name"] for m in lines if m["k"] == "x"] == [n.encode()[:15].decode() for n in names]
    assert all(m["hwm"] >= 8 << 20 and m["ms"] >= m["hwm"] for m in lines if m["k"] == "x")
