"""End to end in a real terminal (tmux), as a daily htop user drives it: the output pane while workers print."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_tui_e2e import keys, screen, stop_tree_and_exit, tmux_run, wait_file, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]

PRINTERS = (  # 4 workers, each printing 5 lines a second with the time it printed them
    "import subprocess, sys, time\n"
    "if len(sys.argv) > 1:\n"
    "    n = 0\n"
    "    while True:\n"
    "        print(f'[rank {sys.argv[1]}] step {n} at {time.time():.2f}', flush=True)\n"
    "        n += 1\n"
    "        time.sleep(0.2)\n"
    "ps = [subprocess.Popen([sys.executable, __file__, str(r)]) for r in range(4)]\n"
    "time.sleep(300)\n"
)
AT = re.compile(r"\[rank \d\] step \d+ at (\d+\.\d+)")


def newest_shown(session: str) -> float:
    return max((float(t) for t in AT.findall(screen(session))), default=0.0)


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
def test_scroll_back_and_end_while_four_workers_print(tmp_path: Path, size: tuple[int, int]) -> None:
    """Three rounds of scrolling back, then End: scrolled back, the pane says so with the count of new lines; each
    End shows lines printed after it within 3 s (End used to jump once and then never follow again). The three ways
    back at the full size; at the small one, a page (the layout is what differs there: 9 s, not 27)."""
    script = tmp_path / "printers.py"
    script.write_text(PRINTERS)
    track = [sys.executable, "-m", "gputop_tracker", "--", sys.executable, str(script)]
    with tmux_run(tmp_path, track, size=size) as (session, rc_file):
        wait_for(session, r"processes 5\b", 30)
        wait_for(session, r"\[rank \d\] step [1-9]\d", 20)  # some lines to scroll back over
        keys(session, "Tab")  # the first Tab reaches the output pane
        for back in (["Up"], ["PageUp"], ["Up", "Up", "Up"]) if size[0] >= 160 else (["PageUp"],):
            keys(session, *back)
            wait_for(session, r"scrolled back — End to follow, \d+ new lines?", 5)
            time.sleep(1.0)
            frozen = newest_shown(session)
            time.sleep(1.5)
            assert newest_shown(session) == frozen, "scrolled back, the text stays put"
            pressed = time.time()
            keys(session, "End")
            deadline = time.monotonic() + 3.0
            while newest_shown(session) <= pressed and time.monotonic() < deadline:
                time.sleep(0.1)
            assert newest_shown(session) > pressed, screen(session)
            assert "scrolled back" not in screen(session)
            follow = time.time()  # and it goes on following: what is printed shows within 3 s
            time.sleep(3.5)
            assert newest_shown(session) > follow + 0.5, screen(session)
        stop_tree_and_exit(session, rc_file)


HOLDS_60_MB = "import time\nheld = bytearray(60_000_000)\nheld[::4096] = b'x' * len(held[::4096])\ntime.sleep(300)\n"


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
def test_an_alert_stays_in_the_header_and_the_list_after_its_pop_up(tmp_path: Path, size: tuple[int, int]) -> None:
    """A real RAM alert: after its pop-up has closed (5 s), the header still names it with its figure and limit,
    and `a` lists it (it read `CRITICAL` alone, and no key listed the alerts)."""
    script = tmp_path / "holds.py"
    script.write_text(HOLDS_60_MB)
    track = [sys.executable, "-m", "gputop_tracker", "--mem-limit", "100M", "--warn-at", "20", "--critical-at", "40"]
    with tmux_run(tmp_path, [*track, "--", sys.executable, str(script)], size=size) as (session, rc_file):
        wait_for(session, r"CRITICAL RAM \d+% of 100 MB", 30)
        time.sleep(7.0)  # the pop-up closes
        wait_for(session, r"CRITICAL RAM \d+% of 100 MB", 1)
        keys(session, "a")
        wait_for(session, r"Alerts \(\d\), newest first", 10)
        wait_for(session, r"\d\d:\d\d:\d\d  \+0:00:\d\d  CRITICAL  RAM \d+% of 100 MB", 5)
        keys(session, "Escape")
        time.sleep(0.5)
        assert "a: alerts" not in screen(session)  # read
        stop_tree_and_exit(session, rc_file)


ROW = r"(\d[\dm.]*s|\d+m)\s+running"  # the running session's row: its duration


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(?:(\d+)m)?(\d+(?:\.\d+)?)s|(\d+)m", text)
    assert m, text
    return float(m.group(1) or 0) * 60 + float(m.group(2) or 0) + float(m.group(3) or 0) * 60


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
def test_history_lists_the_running_session_with_fresh_figures(tmp_path: Path, size: tuple[int, int]) -> None:
    """h while the command runs: its row's duration follows the run (it read the first checkpoint's 0.068s)."""
    track = [sys.executable, "-m", "gputop_tracker", "--", "sleep", "120"]
    with tmux_run(tmp_path, track, size=size) as (session, rc_file):
        wait_for(session, r"elapsed 0:00:0[4-9]", 30)
        keys(session, "h")
        wait_for(session, r"sessions in\b", 15)
        first = _seconds(wait_for(session, ROW, 5).group(1))
        assert first >= 3.0, screen(session)
        time.sleep(6.0)
        later = _seconds(wait_for(session, ROW, 5).group(1))
        assert later >= first + 4.0, screen(session)
        keys(session, "q")  # back to the live view
        wait_for(session, r"● running", 10)
        stop_tree_and_exit(session, rc_file)


WORKERS = (  # three workers whose command lines differ only at their end
    "import subprocess, sys, time\n"
    "if len(sys.argv) > 1:\n"
    "    time.sleep(300)\n"
    "for r in range(3):\n"
    "    subprocess.Popen([sys.executable, __file__, '--config', 'configs/a-long-experiment-name.yaml',"
    " '--role', 'trainer', '--rank', str(r)])\n"
    "print('started', flush=True)\n"
    "time.sleep(300)\n"
)


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
def test_space_tags_k_names_each_whole_command_and_enter_sends_nothing(tmp_path: Path, size: tuple[int, int]) -> None:
    script = tmp_path / "workers.py"
    script.write_text(WORKERS)
    track = [sys.executable, "-m", "gputop_tracker", "--", sys.executable, str(script)]
    with tmux_run(tmp_path, track, size=size) as (session, rc_file):
        wait_for(session, r"processes 4\b", 30)
        if size[0] >= 160:
            wait_for(session, r"MEM %\s+TIME\+", 5)  # htop's columns where there is room
        keys(session, "T")  # by CPU time
        wait_for(session, r"TIME\+ ▼|sorted by TIME\+", 5)
        keys(session, "s", "s", "t")  # then command, then PID; flat: the workers are the last three rows
        wait_for(session, r"PID ▲", 5)
        keys(session, "End", "Up", "Space", "Space")  # tag the last two (Space moves down)
        keys(session, "k")
        text = wait_for(session, r"Send a signal to the 2 tagged processes\?", 10).string
        # the dialog's lines: from its left edge to its right one (or a pop-up's over it)
        inside = [m.group(1) for line in text.splitlines() if (m := re.search(r"█([^█▌]*)", line))]
        flat = " ".join(line.strip() for line in inside)
        for rank in (1, 2):  # each whole command line, wrapped: its end tells the workers apart
            assert re.search(rf"--role\s+trainer\s+--rank\s+{rank}\b", flat), text
        keys(session, "Enter")  # no default
        time.sleep(1.0)
        assert "tagged processes?" in screen(session)
        keys(session, "t")
        for rank in (1, 2):  # the two tagged workers ended (their parent has not reaped them), the third runs on
            wait_for(session, rf"zombie .*--rank {rank}", 15)
        assert re.search(r" run .*--rank 0", screen(session)), screen(session)
        stop_tree_and_exit(session, rc_file)


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
def test_attached_output_note_command_as_typed_and_detach_names_the_pid(tmp_path: Path, size: tuple[int, int]) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None and sleep.startswith("/")
    target = subprocess.Popen([sleep, "120"])  # its command line starts with the full path
    try:
        track = [sys.executable, "-m", "gputop_tracker", "--attach", str(target.pid)]
        with tmux_run(tmp_path, track, size=size) as (session, rc_file):
            wait_for(session, rf"PID {target.pid}\s+● running", 30)
            wait_for(session, r"output: not captured", 5)
            wait_for(session, r"its output is not captured here", 5)
            wait_for(session, rf"attached to {target.pid}: sleep 120", 5)
            keys(session, "h")
            wait_for(session, r"sessions in\b", 15)
            wait_for(session, r"\s sleep 120\s", 5)
            assert sleep not in screen(session)
            keys(session, "q")
            wait_for(session, r"● running", 10)
            keys(session, "q")
            wait_for(session, r"Detach", 10)
            keys(session, "d")
            assert wait_file(rc_file, 30) == "0"
            wait_for(session, rf"detached: PID {target.pid} keeps running, untouched", 10)
            assert target.poll() is None
    finally:
        target.kill()
        target.wait()


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
def test_history_follows_another_runs_session_while_it_runs(tmp_path: Path, size: tuple[int, int]) -> None:
    """`gputop-track --history` in a real terminal while another gputop-track runs headless: the other run's row
    follows it every few seconds (its file is rewritten only once a minute), and the other run leaves no file
    of the list's asking behind."""
    store = tmp_path / "store"
    env = {**os.environ, "GPUTOP_TRACKER_STORE": str(store)}
    started = time.monotonic()
    other = subprocess.Popen(
        [sys.executable, "-m", "gputop_tracker", "--headless", "--", "sleep", "60"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not any(store.glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        with tmux_run(tmp_path, [sys.executable, "-m", "gputop_tracker", "--history"], size=size) as (session, _):

            def shown() -> tuple[float, float]:  # (the run's age now, the duration its row shows)
                return time.monotonic() - started, _seconds(wait_for(session, ROW, 5).group(1))

            age, first = shown()
            while first < 2.0 and age < 12:  # the first checkpoint's figure (the run's first sample) until then
                time.sleep(0.25)
                age, first = shown()
            assert first >= 2.0, screen(session)
            time.sleep(4.0)
            age, later = shown()
            assert later >= first + 1.0, screen(session)  # it moved on (the list reads every 2 s)
            assert age - later <= 5.0, (age, later, screen(session))  # and is at most 5 s old
            keys(session, "q")
    finally:
        other.terminate()  # the run stops its tree, saves its session and takes its dot files away
        other.wait(timeout=60)
    assert other.returncode == 128 + signal.SIGTERM
    assert not [p.name for p in store.iterdir() if p.name.startswith(".")]
