"""stdout/stderr closed or full, and a reader that goes away: one line where one can be written, never a
traceback, never a process left behind (real CLI, real pipes, /dev/full)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop_tracker.core.sampling.tee import OutputTee

PY = sys.executable
FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")


def _sh(script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`script` in bash, `$0` the interpreter with our package: stdout and stderr redirected as the script says."""
    return subprocess.run(["bash", "-c", script, PY], capture_output=True, text=True, timeout=timeout)


def _one_line(proc: subprocess.CompletedProcess[str], code: int, says: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputop-track: error:") and says in lines[0], proc.stderr


def _in_session(sid: int) -> list[int]:
    """The processes still in session `sid` (what a run left behind)."""
    left = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
                if int(data[data.rindex(b")") + 2 :].split()[3]) == sid:
                    left.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return left


@needs_dev_full
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["sessions", "--help"], ["advise", "--help"]])
def test_help_and_version_into_a_full_disk_are_a_write_error(args: list[str]) -> None:
    """As coreutils: `ls --help >/dev/full` says "write error" and exits 1 (was: exit 0, nothing said)."""
    proc = _sh(f'"$0" -m gputop_tracker {" ".join(args)} >/dev/full')
    _one_line(proc, 1, "write error: No space left on device")


@needs_dev_full
@pytest.mark.parametrize("redirect", [">&-", ">/dev/full"])
@pytest.mark.parametrize("args", [["sessions", "list"], ["sessions", "list", "-f", "json"], ["advise"]])
def test_listing_and_advice_into_a_closed_or_full_stdout(store: Path, args: list[str], redirect: str) -> None:
    """(was: AttributeError with stdout closed, OSError with a full disk: a traceback, rc 1)"""
    subprocess.run(
        [PY, "-m", "gputop_tracker", "--headless", "--", "true"], capture_output=True, timeout=60, check=True
    )
    proc = _sh(f'"$0" -m gputop_tracker {" ".join(args)} {redirect}')
    why = "Bad file descriptor" if redirect == ">&-" else "No space left on device"
    _one_line(proc, 1, f"write error: {why}")


def test_json_report_into_a_closed_stdout(store: Path) -> None:
    """(was: AttributeError) The report cannot go anywhere: one line says so and where the session is."""
    proc = _sh('"$0" -m gputop_tracker --headless -f json -- true >&-')
    assert proc.returncode == 0, proc.stderr
    assert "cannot write the report to stdout: Bad file descriptor" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# ends as the console script does (`_entry.run`): a thread still writing, an atexit handler, a buffered write
EXIT_NOW = r"""
import atexit, sys, threading, time
from gputop_tracker._entry import exit_now
atexit.register(lambda: sys.stdout.write("atexit ran\n"))
threading.Thread(target=lambda: (time.sleep(0.3), sys.stdout.write("thread done\n"))).start()
sys.stdout.write("buffered\n")
exit_now(int(sys.argv[1]))
"""
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout keeps what it was given


def test_the_quick_exit_does_what_pythons_exit_does() -> None:
    """The console script ends by os._exit, without the interpreter's teardown: threads are joined first, atexit
    handlers run and stdout is flushed as at Python's own exit, and the exit code is kept."""
    proc = subprocess.run([PY, "-c", EXIT_NOW, "3"], capture_output=True, text=True, timeout=60, env=BUFFERED)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered\nthread done\natexit ran\n" and proc.stderr == ""


@needs_dev_full
@pytest.mark.parametrize(("code", "expected"), [(0, 1), (3, 3)])
def test_the_quick_exit_into_a_full_disk_is_one_write_error_line(code: int, expected: int) -> None:
    """What is left in stdout's buffer cannot be written: one line, exit 1 unless the code says otherwise already
    (Python's own exit printed a traceback and ended with 120)."""
    proc = subprocess.run(
        ["bash", "-c", '"$0" -c "$1" "$2" >/dev/full', PY, EXIT_NOW, str(code)],
        capture_output=True, text=True, timeout=60, env=BUFFERED,
    )  # fmt: skip
    _one_line(proc, expected, "write error: No space left on device")


def test_watch_output_with_stdout_closed_leaves_nothing_running() -> None:
    """fd 1 closed at start: our tee's pipe took that number and copied into itself, a helper left forever."""
    proc = subprocess.Popen(
        ["bash", "-c", '"$0" -m gputop_tracker --headless --no-save --watch-output -- sh -c "echo hi; exit 4" >&-', PY],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 4, err
    assert "Traceback" not in err
    time.sleep(0.3)
    assert _in_session(proc.pid) == []


def test_watch_output_into_a_reader_that_goes_away_ends_as_a_pipe_would() -> None:
    """`yes | head -c 100`: without us `yes` dies of SIGPIPE at once; through the tee it was copied into nothing
    at 90 % of a core forever. Now the tee stops reading once its destination is gone: `yes` gets SIGPIPE."""
    script = '"$0" -m gputop_tracker --headless --no-save --watch-output -- yes | head -c 100 | wc -c'
    proc = subprocess.Popen(
        ["bash", "-c", script, PY], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    took = time.monotonic() - t0
    assert out.strip() == "100", (out, err)
    assert "killed by signal 13" in err or "SIGPIPE" in err, err  # the report: what killed `yes`
    # 2 s was the aim on an idle machine: our start-up (~0.5 s) and the report's imports dominate
    assert took < 8, took
    time.sleep(0.3)
    assert _in_session(proc.pid) == []


def test_the_tee_closes_the_pipes_whose_destination_is_gone() -> None:
    """The rule itself, no timing: once writing to a destination fails, its pipes are closed (the command's next
    write gets EPIPE) and nothing is kept for it; the other destination is copied on."""
    dest_r, dest_w = os.pipe()
    other_r, other_w = os.pipe()
    tee = OutputTee()
    out_w, err_w = tee.open_pipes(dest_w, other_w)
    os.close(dest_r)  # the reader of the command's stdout went away
    os.write(out_w, b"x" * 100)
    os.write(err_w, b"kept")
    for fd in list(tee.sources):
        tee.read(fd)
    assert dest_w not in tee.pending and all(t != dest_w for t in tee.sources.values())
    with pytest.raises(BrokenPipeError):
        os.write(out_w, b"more")  # as a pipe with no reader
    assert os.read(other_r, 100) == b"kept"
    os.write(err_w, b" and more")
    os.close(err_w)
    os.close(out_w)
    tee.copy_until(time.monotonic() + 5)  # to the end: every writer closed
    assert not tee.busy
    assert os.read(other_r, 100) == b" and more"
    for fd in (dest_w, other_r, other_w):
        os.close(fd)


def test_the_spawned_sampler_reserves_closed_standard_fds() -> None:
    """The API's sampler, spawned by a program whose stderr is closed, must not open its FIFO or pipes on fd 2:
    whatever the interpreter writes to stderr would go into them."""
    code = (
        "import os; os.close(2)\n"
        "from gputop_tracker.core.sampling.sampler import _reserve_standard_fds\n"
        "_reserve_standard_fds(); r, w = os.pipe(); print(os.readlink('/proc/self/fd/2'), r > 2 and w > 2)"
    )
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["/dev/null", "True"], proc.stdout + proc.stderr


# ------------------------------------------------------------------------------- a reader that stops reading


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """2,000 sessions (one saved, then copied under new ids: saving each took 10 s), and one with a long timeline;
    every listing or export of them is far more than a pipe holds. (store, the long session's id)"""
    from test_history_sessions import make_session

    from gputop_tracker.core.store import sessions as store

    root = tmp_path_factory.mktemp("big") / "store"
    first = make_session(0)
    store.save_session(root, first)
    sid = first["meta"]["id"]
    text = (root / f"{sid}.json").read_text()
    for i in range(1, 2000):
        new = f"20250101-120000-node-{i:05d}-0000"
        path = root / f"{new}.json"
        path.write_text(text.replace(sid, new))
        path.chmod(0o600)
    long = make_session(1, rows=3000)
    store.save_session(root, long)
    return root, long["meta"]["id"]


@pytest.mark.parametrize(
    "args",
    [
        ["sessions", "list"],
        ["sessions", "list", "-f", "json"],
        ["advise", "--last", "2000", "-f", "json"],
        ["sessions", "export", "{long}", "-f", "json"],
        ["sessions", "export", "{long}", "-f", "csv"],
    ],
)
def test_a_reader_that_stops_reading_is_a_quiet_exit(big_store: tuple[Path, str], args: list[str]) -> None:
    """`sessions list | head -1` over 2,000 sessions said "error: write error: Broken pipe" and exited 1. A reader
    that has what it wants is normal: nothing on stderr, exit 141, as `ls | head -1` ends."""
    store_dir, long = big_store
    argv = [a.replace("{long}", long) for a in args]
    proc = subprocess.Popen(
        [PY, "-m", "gputop_tracker", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "GPUTOP_TRACKER_STORE": str(store_dir)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # `head -1`: one line read, then the pipe closed
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""
