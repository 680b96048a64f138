"""Signals with real terminals (ptys), real shells and real process groups: how often the command gets each.

The command is `COUNTER`: it counts the SIGHUP, SIGTERM and SIGINT it receives into a JSON file and exits a
quiet while after the last one, so every signal the kernel, the shell or gputop-track sends it is counted.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import wait_for

PY = sys.executable
TRACK = [PY, "-m", "gputop_tracker"]

COUNTER = r"""
import json, os, signal, sys, time
out = sys.argv[1]
quiet = float(sys.argv[2])
counts = {"HUP": 0, "TERM": 0, "INT": 0, "senders": []}
sigs = {signal.SIGHUP, signal.SIGTERM, signal.SIGINT}
signal.pthread_sigmask(signal.SIG_BLOCK, sigs)  # taken one by one with their sender: sigtimedwait
with open(out + ".ready.tmp", "w") as f:
    json.dump({"pid": os.getpid(), "pgid": os.getpgrp()}, f)
os.replace(out + ".ready.tmp", out + ".ready")
deadline = time.monotonic() + 60
last = None
while time.monotonic() < deadline and (last is None or time.monotonic() - last < quiet):
    info = signal.sigtimedwait(sigs, 0.02)
    if info is None or info.si_signo not in sigs:  # (0 after a stop and SIGCONT)
        continue
    name = signal.Signals(info.si_signo).name[3:]
    counts[name] += 1
    counts["senders"].append([name, info.si_pid, info.si_code])
    last = time.monotonic()
    with open(out + ".tmp", "w") as f:
        json.dump(counts, f)
    os.replace(out + ".tmp", out)
"""


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return b") Z" in f.read()
    except OSError:
        return True


class Pty:
    """A pty whose master we drain (so nothing written to the terminal ever blocks) and can close: a hang-up."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.data = bytearray()
        self._closing = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while not self._closing.is_set():
            if not select.select([self.master], [], [], 0.05)[0]:
                continue
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return
            if not chunk:
                return
            self.data += chunk

    def write(self, text: str) -> None:
        os.write(self.master, text.encode())

    def hang_up(self) -> None:
        """Close the master (no read may hold it open meanwhile): the kernel hangs the terminal up."""
        self._closing.set()
        self._reader.join()
        os.close(self.master)

    def spawn_leader(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """`argv` as the session leader with this pty as its controlling terminal (as sshd starts a command)."""

        def take_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        proc = subprocess.Popen(
            argv,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            start_new_session=True,
            preexec_fn=take_terminal,
            env={**os.environ, **(env or {})},
        )
        os.close(self.slave)
        return proc


def _counter(tmp_path: Path, quiet: float) -> tuple[list[str], Path]:
    script = tmp_path / "counter.py"
    script.write_text(COUNTER)
    out = tmp_path / "counts.json"
    return [PY, str(script), str(out), str(quiet)], out


def _counts(out: Path) -> dict[str, Any]:
    return json.loads(out.read_text()) if out.exists() else {"HUP": 0, "TERM": 0, "INT": 0, "senders": []}


def _ready(out: Path) -> dict[str, int]:
    ready = Path(str(out) + ".ready")
    wait_for(ready.exists, what="the command to start")
    return json.loads(ready.read_text())


# ---------------------------------------------------------------------------------------------- session leader


@pytest.mark.parametrize("live", [False, True], ids=["headless", "live"])
def test_hang_up_of_our_terminal_as_session_leader_reaches_the_command(tmp_path: Path, live: bool) -> None:
    """`ssh -t host gputop-track …` and the connection drops: the kernel sends SIGHUP to the session leader only."""
    command, out = _counter(tmp_path, quiet=1.0)
    pty = Pty()
    mode = [] if live else ["--headless"]
    proc = pty.spawn_leader([*TRACK, *mode, "--no-save", "--", *command], env={"TERM": "xterm-256color"})
    try:
        pid = _ready(out)["pid"]
        if live:  # the view is drawn: its handlers are in place
            wait_for(lambda: b"\x1b[" in pty.data and len(pty.data) > 2000, what="the live view")
        pty.hang_up()
        wait_for(lambda: gone(pid), what="the command to end")
        assert _counts(out)["HUP"] == 1
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------------- interactive shell


def _interactive_shell(pty: Pty, tmp_path: Path) -> subprocess.Popen[bytes]:
    rc = tmp_path / "bashrc"
    rc.write_text("PS1='$ '\n")
    shell = pty.spawn_leader(["bash", "--noprofile", "--rcfile", str(rc), "-i"], env={"TERM": "dumb"})
    wait_for(lambda: b"$ " in pty.data, what="the shell's prompt")
    return shell


def _run_in_foreground(tmp_path: Path, argv: list[str], out: Path) -> tuple[Pty, subprocess.Popen[bytes], dict]:
    pty = Pty()
    shell = _interactive_shell(pty, tmp_path)
    pty.write(shlex.join(argv) + "\n")
    return pty, shell, _ready(out)


def test_hang_up_in_a_shells_foreground_job_is_not_passed_on_again(tmp_path: Path) -> None:
    """The shell's job is hung up: bash passes SIGHUP on to its jobs, the kernel sends it to the terminal's
    job when bash exits — as without gputop-track (twice, or once where the two coalesce); never a third
    copy forwarded by us (sent by our sampler)."""
    command, out = _counter(tmp_path, quiet=3.0)
    pty, shell, ready = _run_in_foreground(tmp_path, [*TRACK, "--headless", "--no-save", "--", *command], out)
    # the front end has left the job: only the command is in it
    wait_for(lambda: _group_members(ready["pgid"]) == {ready["pid"]}, what="the front end to leave the job")
    pty.hang_up()
    shell.wait(timeout=30)
    wait_for(lambda: gone(ready["pid"]), what="the command to end")
    counts = _counts(out)
    assert 1 <= counts["HUP"] <= 2, counts
    kernel_or_shell = {0, shell.pid}
    assert all(pid in kernel_or_shell for _name, pid, _code in counts["senders"]), (counts, shell.pid)


def _group_members(pgid: int) -> set[int]:
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rindex(b")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != b"Z":
                members.add(int(entry))
    return members


def test_signal_to_the_foreground_job_reaches_the_command_once(tmp_path: Path) -> None:
    """`kill -TERM -PGID` of the shell's job, and a `kill -TERM` aimed at gputop-track itself: once each."""
    command, out = _counter(tmp_path, quiet=2.0)
    pty, shell, ready = _run_in_foreground(tmp_path, [*TRACK, "--headless", "--no-save", "--", *command], out)
    try:
        wait_for(lambda: _group_members(ready["pgid"]) == {ready["pid"]}, what="the front end to leave the job")
        os.killpg(ready["pgid"], signal.SIGTERM)
        wait_for(lambda: _counts(out)["TERM"] >= 1, what="the SIGTERM")
        front = _front_end_of(shell.pid)
        os.kill(front, signal.SIGTERM)  # aimed at gputop-track: forwarded
        wait_for(lambda: gone(ready["pid"]), what="the command to end")
        assert _counts(out)["TERM"] == 2
        pty.write("exit\n")
        shell.wait(timeout=30)
    finally:
        if shell.poll() is None:
            shell.kill()


def test_ctrl_z_stops_the_job_and_fg_continues_it(tmp_path: Path) -> None:
    command, out = _counter(tmp_path, quiet=1.0)
    pty, shell, ready = _run_in_foreground(
        tmp_path, [*TRACK, "--headless", "--no-save", "--interval", "0.1", "--", *command], out
    )
    try:
        wait_for(lambda: _group_members(ready["pgid"]) == {ready["pid"]}, what="the front end to leave the job")
        front = _front_end_of(shell.pid)
        pty.write("\x1a")  # Ctrl-Z
        wait_for(lambda: b"Stopped" in pty.data, what="the shell to see its job stopped")
        assert _state(ready["pid"]) == "T" and _state(front) == "T"
        pty.write("fg\n")
        wait_for(
            lambda: _state(ready["pid"]) not in ("T", None) and _state(front) not in ("T", None),
            what=f"fg ({_state(ready['pid'])}, {_state(front)}, {bytes(pty.data[-200:])!r})",
        )
        os.kill(ready["pid"], signal.SIGINT)
        wait_for(lambda: gone(front), what="gputop-track to end")
        pty.write("echo rc=$?\n")
        wait_for(lambda: re.search(rb"rc=\d+", pty.data), what="the exit code")
        assert b"rc=0" in pty.data
        pty.write("exit\n")
        shell.wait(timeout=30)
    finally:
        if shell.poll() is None:
            shell.kill()


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()[0].decode()


def _front_end_of(shell_pid: int) -> int:
    """The shell's child: gputop-track's front end."""
    with open(f"/proc/{shell_pid}/task/{shell_pid}/children") as f:
        (child,) = f.read().split()
    return int(child)


# ---------------------------------------------------------------------------------------------- early Ctrl-C


def _start_up_seconds() -> float:
    """How long the interpreter takes to load our entry point now (the slowest of 3: the machine may be busy)."""
    took = []
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run([PY, "-c", "import gputop_tracker._entry"], check=True, timeout=60)
        took.append(time.monotonic() - t0)
    return max(took)


def _mapped(pid: int, name: str) -> bool:
    """A shared object whose file name contains `name` is mapped into `pid` (it is being imported)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any(name in line for line in f)
    except OSError:
        return False


def _command_running(pid: int, name: str) -> bool:
    """The tracked command `name` runs under `pid` (our code is past its start-up)."""
    try:
        return any(c.name() == name for c in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return False


def _sigint_as(disposition: signal.Handlers, blocked: bool = False) -> Callable[[], None]:
    """A preexec_fn: the started program gets SIGINT with `disposition` (whatever pytest's own is), and blocked
    across the exec when `blocked` (as `env --block-signal=INT` starts it)."""

    def setup() -> None:
        signal.signal(signal.SIGINT, disposition)
        how = signal.SIG_BLOCK if blocked else signal.SIG_UNBLOCK
        signal.pthread_sigmask(how, (signal.SIGINT,))

    return setup


def _interrupt(
    when: Callable[[subprocess.Popen[str]], str], python_flags: tuple[str, ...] = (), blocked: bool = False
) -> tuple[int, str]:
    """`gputop-track --headless -- sleep 5`, a SIGINT to its group once `when` returns (what it read of stderr);
    (exit code, stderr) after checking what must hold whenever the signal lands: no traceback from our code,
    no "sampler crashed". `blocked`: SIGINT blocked across the exec, as a careful starter does."""
    proc = subprocess.Popen(
        [PY, *python_flags, "-m", "gputop_tracker", "--headless", "--no-save", "--", "sleep", "5"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_sigint_as(signal.SIG_DFL, blocked),
    )
    try:
        early = when(proc)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        err = early + err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    first = ("__main__.py", "__init__.py", "_version.py", "_entry.py")  # import lines: Python starting
    ours = [ln for ln in err.splitlines() if "/gputop_tracker/" in ln and not any(f in ln for f in first)]
    assert not ours and "sampler crashed" not in err, err
    return proc.returncode, err


def _after(seconds: float) -> Callable[[subprocess.Popen[str]], str]:
    return lambda _proc: time.sleep(seconds) or ""


def _once(cond: Callable[[int], bool], what: str) -> Callable[[subprocess.Popen[str]], str]:
    """As soon as `cond(pid)` holds (polled without a pause, to land within a millisecond or so of it)."""

    def when(proc: subprocess.Popen[str]) -> str:
        deadline = time.monotonic() + 60
        while not cond(proc.pid):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
        return ""

    return when


def _imported(module: str) -> Callable[[subprocess.Popen[str]], str]:
    """Once `python -X importtime` says `module` is imported (read from its stderr as it comes)."""

    def when(proc: subprocess.Popen[str]) -> str:
        assert proc.stderr is not None
        seen = []
        while line := proc.stderr.readline():
            seen.append(line)
            if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == module:
                return "".join(seen)
        raise AssertionError(f"{module} never imported:\n{''.join(seen)}")

    return when


def test_ctrl_c_while_starting_up_prints_no_traceback(tmp_path: Path) -> None:
    """A SIGINT at any moment of start-up: no traceback from our code, no "sampler crashed", exit 130 once
    our code runs (before that, the interpreter's own start-up ends as any Python program would)."""
    # at delays spread over ~3 start-ups measured now: the interpreter's start-up, ours, the command's launch
    step = _start_up_seconds() / 8
    for i in range(24):
        code, err = _interrupt(_after(step * i))
        if "Remainder of file ignored" in err:  # site.py took the SIGINT while reading a .pth and went on:
            continue  # the interpreter's start-up, before any of our code; the run then goes on normally
        assert code in (130, -signal.SIGINT, 1), err
        assert code != 130 or "Traceback" not in err, err
    # and at moments where our code certainly runs, whatever the machine's speed: exit 130, no traceback.
    moments = [
        # while the CLI's own modules load (the entry point's handler, nothing else, is in place)
        lambda: _interrupt(_imported("gputop_tracker.console"), ("-X", "importtime")),
        # the sampler forked, the front end loading pydantic with the relayed signals blocked
        lambda: _interrupt(_once(lambda pid: _mapped(pid, "_pydantic_core"), "pydantic to load")),
        # the command runs
        lambda: _interrupt(_once(lambda pid: _command_running(pid, "sleep"), "the command")),
    ]
    for moment in moments:
        for _ in range(3):
            code, err = moment()
            assert code == 130 and "Traceback" not in err, err


def test_ctrl_c_in_the_first_25_ms_with_the_signal_blocked_by_the_starter_ends_quietly_with_130() -> None:
    """Python's own start-up (before any of our code: its streams, `site`, `.pth` files) turns a SIGINT into
    "Fatal Python error: init_import_site" and a traceback; no Python program can prevent that itself. A starter
    that blocks SIGINT across the exec (`env --block-signal=INT`) closes that window: our first instruction takes
    the signals over and unblocks them, and a SIGINT pending since then ends the run at once, quietly, with 130,
    before the command starts. It used to start the command anyway, interrupt it and print the whole report."""
    for i in range(30):
        ms = 1 + i * 24 / 29  # 1 to 25 ms after the start
        code, err = _interrupt(_after(ms / 1000), blocked=True)
        assert "Traceback" not in err and "Fatal Python error" not in err, err
        assert code == 130, err
        # stopped before the command, one line at most; or, had the command already run, its report
        assert len(err.splitlines()) <= 1 or "Processes" in err, err


def _to_group(proc: subprocess.Popen[str], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # ended already: the assertions on its exit say why
        pass


def test_an_inherited_ignored_sigint_stays_ignored_at_start_up_and_later(tmp_path: Path) -> None:
    """SIGINT ignored by whoever started us (a script's `cmd &`): a SIGINT at start-up was lost, but one a moment
    later stopped the run (sigwaitinfo takes a blocked signal even when ignored) and the command got a default
    SIGINT. Now it stays ignored throughout, for us and for the command (as without the tool), and the run ends
    with the command."""
    go = tmp_path / "go"
    command = (
        "import os, signal, sys, time\n"
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "sys.exit(3)\n"
    )
    proc = subprocess.Popen(
        [*TRACK, "--headless", "--no-save", "--interval", "0.1", "--", PY, "-c", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_sigint_as(signal.SIG_IGN),
    )
    try:
        for ms in (1, 3, 6, 10, 15, 25, 50, 100):  # while it starts up (to it and its whole group)
            time.sleep(ms / 1000)
            _to_group(proc, signal.SIGINT)
        assert proc.stdout is not None
        seen = proc.stdout.readline()  # the command runs
        for _ in range(3):  # and later, to us alone and to the group
            proc.send_signal(signal.SIGINT)
            _to_group(proc, signal.SIGINT)
            time.sleep(0.1)
        go.touch()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert seen.strip() == "True", seen  # SIGINT ignored in the command too
    assert proc.returncode == 3, err
    assert "exited with code 3" in err and "Traceback" not in err, err


def test_an_interrupt_wrapped_by_class_creation_is_still_an_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGINT inside a dataclass's __set_name__ reaches the entry point as a RuntimeError caused by a
    KeyboardInterrupt (seen in CI): it ends quietly with 130; any other error still propagates."""
    import types

    from gputop_tracker import _entry

    def raising(exc: BaseException) -> types.ModuleType:
        mod = types.ModuleType("gputop_tracker.cli.entry")

        def main() -> int:
            raise exc

        mod.main = main  # type: ignore[attr-defined]
        return mod

    wrapped = RuntimeError("Error calling __set_name__ on 'Field' instance 'argv'")
    wrapped.__cause__ = KeyboardInterrupt()
    monkeypatch.setitem(sys.modules, "gputop_tracker.cli.entry", raising(wrapped))
    assert _entry.main() == _entry.EXIT_INTERRUPTED
    monkeypatch.setitem(sys.modules, "gputop_tracker.cli.entry", raising(RuntimeError("a real bug")))
    with pytest.raises(RuntimeError, match="a real bug"):
        _entry.main()


USR_COUNTER = r"""
import json, os, signal, sys, time
out = sys.argv[1]
got = []
def on(sig, _frame):
    got.append(signal.Signals(sig).name)
    with open(out + ".tmp", "w") as f:
        json.dump(got, f)
    os.replace(out + ".tmp", out)
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGUSR2, on)
with open(out + ".ready", "w") as f:
    f.write(str(os.getpid()))
deadline = time.monotonic() + 30
while time.monotonic() < deadline and len(got) < 2:
    time.sleep(0.02)
time.sleep(0.3)
sys.exit(7)
"""


def test_sigusr1_and_sigusr2_are_passed_to_the_command_and_tracking_goes_on(tmp_path: Path) -> None:
    """SLURM's --signal=USR1@T or `scancel --signal=USR1` (a checkpoint request) reaches gputop-track too: it
    used to kill it (exit 138, no report; the command ran on, its exit code lost). Now both are passed on, and
    the run ends with the command: its exit code, the report written."""
    out, report = tmp_path / "usr.json", tmp_path / "r.txt"
    proc = subprocess.Popen(
        [*TRACK, "--headless", "--interval", "0.1", "-o", str(report), "--", PY, "-c", USR_COUNTER, str(out)],
        env={**os.environ, "GPUTOP_TRACKER_STORE": str(tmp_path / "store")},
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: Path(f"{out}.ready").exists(), what="the command to start")
    proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: out.exists(), what="SIGUSR1 to reach the command")
    proc.send_signal(signal.SIGUSR2)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err
    assert sorted(json.loads(out.read_text())) == ["SIGUSR1", "SIGUSR2"]
    assert "exited with code 7" in report.read_text(), err


def test_sigint_to_a_batch_jobs_group_ends_a_shell_script_waiting_for_a_child(tmp_path: Path) -> None:
    """`kill -INT -PGID` of a batch job (or a pipe's): without gputop-track the script and the child it waits
    for both get it, and the script ends. The command has a process group of its own, and the SIGINT was
    passed to the script alone: bash, seeing its child finish unharmed, ran on (here for 30 s more)."""
    marker = tmp_path / "ran-on"
    script = f"sleep 30; touch {shlex.quote(str(marker))}"
    job = subprocess.Popen(
        [*TRACK, "--headless", "--no-save", "--", "bash", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a batch job's own group, as a scheduler or `setsid` gives it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not ignored as in a background `&`
    )
    try:
        wait_for(
            lambda: any(p.name() == "sleep" for p in psutil.Process(job.pid).children(recursive=True)),
            what="the script's child",
        )
        os.killpg(job.pid, signal.SIGINT)
        _, err = job.communicate(timeout=15)
    finally:
        if job.poll() is None:
            for p in psutil.Process(job.pid).children(recursive=True):
                p.kill()
            job.kill()
            job.wait()
    assert job.returncode == 130, err
    assert not marker.exists()
