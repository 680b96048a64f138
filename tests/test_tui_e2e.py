"""End to end: the real `gputop-track -- CMD` in a terminal (tmux), read from the screen like a user would."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]

WORKLOAD = (  # holds 200 MB until the test has read it off the screen and creates the file argv[1]
    "import os, sys, time\n"
    "held = b'x' * 200_000_000\n"
    "print('workload pid', os.getpid(), flush=True)\n"
    "deadline = time.monotonic() + 120\n"
    "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
    "raise SystemExit(3)\n"
)
MEM = re.compile(r"(\d+(?:\.\d+)?) (kB|MB|GB)\b")
FACTOR = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


def screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def wait_for(session: str, pattern: str, timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = screen(session)
        m = re.search(pattern, text, re.MULTILINE)
        if m:
            return m
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not on screen after {timeout} s:\n{text}")


def test_live_view_tracks_a_real_command(tmp_path: Path) -> None:
    store = tmp_path / "store"
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    rc_file = tmp_path / "rc"
    go = tmp_path / "go"
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", sys.executable, str(script), str(go)]
    shell = (
        f"unset COLUMNS LINES; GPUTOP_TRACKER_STORE={shlex.quote(str(store))} {shlex.join(track)}; "
        f"echo $? > {shlex.quote(str(rc_file))}"
    )
    session = new_tmux_session(tmp_path, shell, (160, 50))
    try:
        pid = int(wait_for(session, r"PID (\d+)\s+● running", 20).group(1))
        # the workload's own line in the output pane names the same process
        assert int(wait_for(session, r"workload pid (\d+)", 10).group(1)) == pid
        row = wait_for(session, rf"^│\s+{pid}\s.*\spython3?\S*\s.*$", 10).group(0)
        deadline = time.monotonic() + 10
        rss = 0.0
        while time.monotonic() < deadline:  # the RSS cell: first size on the row
            row = wait_for(session, rf"^│\s+{pid}\s.*\spython3?\S*\s.*$", 5).group(0)
            m = MEM.search(row)
            rss = float(m.group(1)) * FACTOR[m.group(2)] if m else 0.0
            if rss >= 190e6:
                break
            time.sleep(0.2)
        assert 190e6 <= rss <= 260e6, row
        go.touch()
        wait_for(session, r"exited with code 3", 30)
        keys(session, "q")
        deadline = time.monotonic() + 15
        while not rc_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert rc_file.read_text().strip() == "3"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    sessions = list(store.glob("*.json"))
    assert len(sessions) == 1
    saved = json.loads(sessions[0].read_text())
    assert saved["meta"]["pid"] == pid and saved["meta"]["exit_code"] == 3
    assert saved["summary"]["max_ram"]["main"]["total_rss"] >= 190e6
    log = sessions[0].with_name(sessions[0].stem + ".output.log")
    assert f"workload pid {pid}" in log.read_text()
    assert log.stat().st_mode & 0o777 == 0o600  # the job's own output (tokens, passwords): the user's alone


WORKERS = (
    "import multiprocessing as mp, time\n"
    "def work(i):\n"
    "    held = bytearray(20_000_000 * (i + 1))\n"
    "    time.sleep(300)\n"
    "if __name__ == '__main__':\n"
    "    ps = [mp.Process(target=work, args=(i,)) for i in range(6)]\n"
    "    for p in ps:\n"
    "        p.start()\n"
    "    print('workers', *[p.pid for p in ps], flush=True)\n"
    "    time.sleep(300)\n"
)


def start_in_tmux(tmp_path: Path, track: list[str], size: tuple[int, int] = (160, 50)) -> tuple[str, Path]:
    """`track` in a tmux session; the exit code goes to a file and the pane stays open to read the report."""
    rc_file = tmp_path / "rc"
    store = tmp_path / "store"
    shell = (  # COLUMNS/LINES in the environment would override the terminal's real size in Textual
        f"unset COLUMNS LINES; GPUTOP_TRACKER_STORE={shlex.quote(str(store))} {shlex.join(track)}; "
        f"echo $? > {shlex.quote(str(rc_file))}; sleep 60"
    )
    return new_tmux_session(tmp_path, shell, size), rc_file


def new_tmux_session(tmp_path: Path, shell: str, size: tuple[int, int], prefix: str = "gputop-e2e") -> str:
    """A detached tmux session running `shell` at `size`; its name. Unique even beside a session an earlier run
    left (the tmux server outlives runs, and a worker's PID comes again); tried again when refused (two workers
    starting the first tmux server at once: one of them may be)."""
    for attempt in range(3):  # a new name each time: a refused attempt may have made its session all the same
        session = f"{prefix}-{os.getpid()}-{tmp_path.name[-12:]}-{uuid.uuid4().hex[:6]}"
        new = ["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), shell]
        made = subprocess.run(new, capture_output=True, text=True)
        if made.returncode == 0:
            break
        time.sleep(0.2 * (attempt + 1))
    else:
        raise AssertionError(f"tmux new-session failed: {made.stderr.strip()}")
    # a tmux server already running may keep its own default size: ask for ours
    subprocess.run(["tmux", "resize-window", "-t", session, "-x", str(size[0]), "-y", str(size[1])], check=False)
    return session


@contextmanager
def tmux_run(tmp_path: Path, track: list[str], size: tuple[int, int] = (160, 50)) -> Iterator[tuple[str, Path]]:
    """start_in_tmux, its tmux session killed on the way out; yields the session's name and the exit-code file."""
    session, rc_file = start_in_tmux(tmp_path, track, size=size)
    try:
        yield session, rc_file
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def keys(session: str, *names: str) -> None:
    """Types `names` (tmux key names) into the session."""
    subprocess.run(["tmux", "send-keys", "-t", session, *names], check=True)


def stop_tree_and_exit(session: str, rc_file: Path) -> None:
    """q, then s in the quit dialog: the tree is stopped by SIGTERM; asserts the front end exits 128 + 15."""
    keys(session, "q")
    wait_for(session, r"Stop tree", 10)
    keys(session, "s")
    assert wait_file(rc_file, 30) == str(128 + 15)


def wait_file(path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} not written after {timeout} s")
        time.sleep(0.1)
    return path.read_text().strip()


def alive(pid: int) -> bool:
    out = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(out) and not out.startswith("Z")


def test_stop_from_the_live_view_leaves_no_worker(tmp_path: Path) -> None:
    script = tmp_path / "workers.py"
    script.write_text(WORKERS)
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", sys.executable, str(script)]
    with tmux_run(tmp_path, track) as (session, rc_file):
        wait_for(session, r"processes 7\b", 30)
        workers = [int(p) for p in wait_for(session, r"workers((?: \d+){6})", 10).group(1).split()]
        # a RAM chart with its unit and a time axis, during the run
        wait_for(session, r"RAM \(tree\)", 10)
        wait_for(session, r"\d (MB|GB)┤", 10)
        wait_for(session, r"└─{10,}.*\n\s+0s\s", 10)
        stop_tree_and_exit(session, rc_file)
        report = wait_for(session, r"stopped from the live view: SIGTERM to (\d+) processes.*none survived", 10)
        assert int(report.group(1)) >= 7
        assert [p for p in workers if alive(p)] == []


def test_attach_quit_enter_then_d_leaves_the_process_running(tmp_path: Path) -> None:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--attach", str(target.pid)]
        with tmux_run(tmp_path, track) as (session, rc_file):
            wait_for(session, rf"PID {target.pid}\s+● running", 30)
            keys(session, "q")
            wait_for(session, r"Detach", 10)
            keys(session, "Enter")  # chooses nothing
            time.sleep(1.0)
            assert not rc_file.exists() and "Detach" in screen(session)
            keys(session, "d")
            assert wait_file(rc_file, 30) == "0"
            assert target.poll() is None, "the attached process was only watched: it must still run"
    finally:
        target.kill()
        target.wait()


RANKS = (
    "import subprocess, sys, time\n"
    "if len(sys.argv) > 1:\n"
    "    time.sleep(300)\n"
    "ps = [subprocess.Popen([sys.executable, __file__, '--rank', str(r)]) for r in (0, 1)]\n"
    "for i in range(0, 101, 5):\n"
    "    print(f'\\rtraining {i:3d}%|' + '#' * (i // 10) + ' ' * (10 - i // 10) + '|', end='', flush=True)\n"
    "    time.sleep(0.05)\n"
    "print(flush=True)\n"
    "print('\\x1b[32mdone\\x1b[0m', flush=True)\n"
    "time.sleep(300)\n"
)


def test_workers_told_apart_and_progress_bar_on_one_line(tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", sys.executable, str(script)]
    with tmux_run(tmp_path, track, size=(80, 24)) as (session, rc_file):  # even at 80 columns
        wait_for(session, r"processes 3\b", 30)
        wait_for(session, r"ranks\.py --rank 0", 10)  # the command column tells the two workers apart
        wait_for(session, r"ranks\.py --rank 1", 10)
        wait_for(session, r"RAM \(tree\)", 10)  # and the compact chart is there
        wait_for(session, r"\bdone\b", 15)
        text = screen(session)
        bars = [line for line in text.splitlines() if re.search(r"training +\d+%\|", line)]
        assert len(bars) == 1 and "100%|##########|" in bars[0], text
        stop_tree_and_exit(session, rc_file)


WAITS_FOR_GO = (
    "import os, sys, time\ngo = sys.argv[1]\nwhile not os.path.exists(go):\n    time.sleep(0.02)\nsys.exit(7)\n"
)


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return int(data[data.rindex(b")") + 2 :].split()[1])


def _session_file(store: Path) -> dict:
    files = list(store.glob("*.json"))
    return json.loads(files[0].read_text()) if files else {}


def _checkpoint(store: Path, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            session = _session_file(store)
            if session and session["summary"]["n_samples"] >= 1:
                return session
        except (OSError, ValueError, KeyError, TypeError):
            pass  # being replaced
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint in {store} after {timeout} s")


@pytest.mark.parametrize("ending", ["command exits", "ctrl-c"])
def test_sampler_killed_under_the_live_view_the_job_is_not_orphaned(tmp_path: Path, ending: str) -> None:
    """SIGKILL to the sampler process while the live view runs: the view says so, the command runs on as the
    front end's child (never orphaned), and after q the terminal waits for it; its exit code is ours, the
    session is marked interrupted. A Ctrl-C while waiting goes to the command, never leaving it untracked."""
    go = tmp_path / "go"
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", sys.executable, "-c", WAITS_FOR_GO]
    session, rc_file = start_in_tmux(tmp_path, [*track, str(go)], size=(120, 40))
    store = tmp_path / "store"
    command = 0
    try:
        wait_for(session, r"● running", 30)
        # a lone Escape (which the terminal driver must time out, not wait on) closes the quit dialog
        keys(session, "q")
        wait_for(session, r"Stop tree", 10)
        keys(session, "Escape")
        deadline = time.monotonic() + 10
        while "Stop tree" in screen(session) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "Stop tree" not in screen(session)
        meta = _checkpoint(store, 30)["meta"]
        command, sampler = meta["pid"], meta["engine_pid"]
        front = _ppid(sampler)
        os.kill(sampler, signal.SIGKILL)
        wait_for(session, r"● sampler stopped unexpectedly", 15)
        wait_for(session, r"the sampler process stopped", 10)
        assert alive(command) and _ppid(command) == front  # reparented to the front end: not orphaned
        keys(session, "q")
        waiting = wait_for(session, r"sampler process was killed by SIGKILL: waiting for the command \(PID (\d+)\)", 15)
        assert int(waiting.group(1)) == command and alive(command) and _ppid(command) == front
        wait_for(session, r"Ctrl-C, SIGTERM or a hang-up now go to the command", 5)
        if ending == "command exits":
            go.touch()
            assert wait_file(rc_file, 30) == "7"  # the command's own exit code
        else:
            keys(session, "C-c")
            assert wait_file(rc_file, 30) == str(128 + signal.SIGINT)  # it got the SIGINT, and we waited for it
        assert not alive(command)
        saved = _session_file(store)
        assert saved["meta"]["status"] == "interrupted"
        assert saved["meta"]["exit_code"] == int(rc_file.read_text())
        assert any("sampler process was killed by SIGKILL" in n for n in saved["summary"]["notes"])
        assert "Traceback" not in screen(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if command and alive(command):
            os.kill(command, signal.SIGKILL)


TRAPS_USR1 = (  # writes the file argv[2] on SIGUSR1, exits 4 once argv[1] exists
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, lambda *a: open(sys.argv[2], 'a').write('usr1\\n'))\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.02)\n"
    "sys.exit(4)\n"
)


def test_sigusr1_to_the_live_view_reaches_the_command_and_the_view_goes_on(tmp_path: Path) -> None:
    """SLURM's --signal=USR1@T (a checkpoint request) killed the live view by its default action: the terminal
    left in raw mode, the command running on without its signal. It is the command's; the view goes on."""
    go, got = tmp_path / "go", tmp_path / "got"
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", sys.executable, "-c", TRAPS_USR1]
    with tmux_run(tmp_path, [*track, str(go), str(got)], size=(120, 40)) as (session, rc_file):
        wait_for(session, r"● running", 30)
        meta = _checkpoint(tmp_path / "store", 30)["meta"]
        front = _ppid(meta["engine_pid"])
        os.kill(front, signal.SIGUSR1)
        assert wait_file(got, 30) == "usr1"
        time.sleep(0.5)
        assert alive(front) and "● running" in screen(session)
        go.touch()
        wait_for(session, r"exited with code 4", 30)
        keys(session, "q")
        assert wait_file(rc_file, 30) == "4"


FAMILY = (  # workers that differ only in trailing arguments, one of them reached by python execv-ing python
    "import os, subprocess, sys, time\n"
    "if sys.argv[1:2] == ['--exec']:\n"
    "    time.sleep(0.5)\n"
    "    os.execv(sys.executable, [sys.executable, __file__, '--role', 'evaluator'])\n"
    "if sys.argv[1:2] == ['--role']:\n"
    "    time.sleep(300)\n"
    "ps = [subprocess.Popen([sys.executable, __file__, '--role', 'trainer']),\n"
    "      subprocess.Popen([sys.executable, __file__, '--exec']),\n"
    "      subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', 'shard-7'])]\n"
    "for i in range(400):\n"
    "    print(f'step {i} loss {1 / (i + 1):.4f}', flush=True)\n"
    "print('workers', *[p.pid for p in ps], flush=True)\n"
    "time.sleep(300)\n"
)


def test_daily_driver_at_120x40(tmp_path: Path) -> None:
    """The issue's tmux checks at 120x40: workers told apart by their trailing arguments (also one that became
    a worker by exec), q then Enter leaves the job running, the history screen's k opens no signal dialog,
    and n / N walk the output's matches."""
    script = tmp_path / "family.py"
    script.write_text(FAMILY)
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", sys.executable, str(script)]
    with tmux_run(tmp_path, track, size=(120, 40)) as (session, rc_file):
        wait_for(session, r"processes 4\b", 30)
        workers = [int(p) for p in wait_for(session, r"workers((?: \d+){3})", 15).group(1).split()]
        # the line keeps its end where the column is short: what differs stays in view
        wait_for(session, r"\.py --role trainer", 10)
        wait_for(session, r"\.py --role evaluator", 10)  # the exec'd one: its new command line
        wait_for(session, r"\bshard-7\b", 10)  # python -c CODE ARGS: the ARGS
        assert "--exec" not in screen(session)
        # q then Enter (a habit): nothing is chosen, the job runs on
        keys(session, "q")
        wait_for(session, r"Stop tree", 10)
        keys(session, "Enter")
        time.sleep(1.0)
        assert "Stop tree" in screen(session) and all(alive(p) for p in workers) and not rc_file.exists()
        keys(session, "Escape")
        deadline = time.monotonic() + 10
        while "Stop tree" in screen(session) and time.monotonic() < deadline:
            time.sleep(0.1)
        # find, then N / n between the matches
        keys(session, "f")
        wait_for(session, r"find in the output", 10)
        keys(session, "loss 0.0025", "Enter")
        last = wait_for(session, r"“loss 0\.0025”: \d+ found, line (\d+) of (\d+)", 10)
        assert last.group(1) == last.group(2)  # the newest match first
        keys(session, "N")
        wait_for(session, rf"line {int(last.group(1)) - 1} of {last.group(2)}", 10)  # N: the one above
        # the history screen takes only its own keys: k there opens no signal dialog
        keys(session, "Escape")
        time.sleep(0.5)  # apart: Escape then h at once is read as Alt+h
        keys(session, "h")
        wait_for(session, r"sessions in ", 15)
        keys(session, "k")
        time.sleep(1.0)
        text = screen(session)
        assert "Send a signal" not in text and "Signal" not in text.splitlines()[-1], text
        assert all(alive(p) for p in workers)
        keys(session, "q")  # back to the live view
        wait_for(session, r"PID \d+\s+● running", 10)
        stop_tree_and_exit(session, rc_file)


def test_detach_says_the_command_runs_on_and_where_its_output_goes(tmp_path: Path) -> None:
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", "sleep", "120"]
    session, rc_file = start_in_tmux(tmp_path, track, size=(120, 40))
    pid = 0
    try:
        pid = int(wait_for(session, r"PID (\d+)\s+● running", 30).group(1))
        keys(session, "q")
        wait_for(session, r"Detach", 10)
        keys(session, "d")
        assert wait_file(rc_file, 30) == "0"
        deadline = time.monotonic() + 10
        joined = ""  # the terminal after the view: wrapped lines joined
        while time.monotonic() < deadline and "output.log" not in joined:
            joined = subprocess.run(
                ["tmux", "capture-pane", "-p", "-J", "-t", session], capture_output=True, text=True
            ).stdout
            time.sleep(0.2)
        line = re.search(rf"detached: PID {pid} keeps running; its output goes on to (\S+)", joined)
        assert line is not None and line.group(1).endswith(".output.log") and Path(line.group(1)).exists(), joined
        assert alive(pid)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


EPOCHS = (  # a block name per epoch: 16 names, the last one still open
    "import time\n"
    "from gputop_tracker import block\n"
    "for i in range(15):\n"
    "    with block(f'epoch {i}'):\n"
    "        time.sleep(0.02)\n"
    "with block('epoch 15'):\n"
    "    print('in the last epoch', flush=True)\n"
    "    time.sleep(300)\n"
)


def _block_rows(text: str) -> list[str]:
    """The epoch rows shown between the blocks table's top border and its subtitle."""
    lines = text.splitlines()
    top = next((i for i, line in enumerate(lines) if "code blocks" in line), None)
    if top is None:
        return []
    bottom = next((i for i in range(top + 1, len(lines)) if "16 blocks" in lines[i]), len(lines))
    return [line for line in lines[top + 2 : bottom] if re.search(r"epoch \d+", line)]


def test_blocks_table_keeps_to_six_rows_at_160x50(tmp_path: Path) -> None:
    """A block name per epoch took 16 rows and pushed the process table and the side panels away: the table
    under the processes shows at most 6 rows (the rest scroll), the running epoch among them."""
    script = tmp_path / "epochs.py"
    script.write_text(EPOCHS)
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", sys.executable, str(script)]
    with tmux_run(tmp_path, track, size=(160, 50)) as (session, rc_file):
        wait_for(session, r"in the last epoch", 30)
        wait_for(session, r"16 blocks · 1 open", 15)
        # the table scrolls once laid out at its new height (the frame after the rows came): poll, not one capture
        deadline = time.monotonic() + 15
        while True:
            text = screen(session)
            rows = _block_rows(text)
            if any("epoch 15" in r for r in rows) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(rows) == 6 and any("epoch 15" in r for r in rows), text  # the running one in view
        assert "run so far" in text and "processes" in text  # side panels and the process table keep their room
        stop_tree_and_exit(session, rc_file)
