"""End to end: the real `gputop-track -- CMD` in a terminal (tmux), read from the screen like a user would."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]

WORKLOAD = (
    "import os, time\n"
    "held = b'x' * 200_000_000\n"
    "print('workload pid', os.getpid(), flush=True)\n"
    "time.sleep(4)\n"
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
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", sys.executable, str(script)]
    shell = f"GPUTOP_TRACKER_STORE={shlex.quote(str(store))} {shlex.join(track)}; echo $? > {shlex.quote(str(rc_file))}"
    session = f"gputop-e2e-{tmp_path.name[-12:]}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", shell], check=True)
    try:
        pid = int(wait_for(session, r"PID (\d+)\s+● running", 20).group(1))
        # the workload's own line in the output pane names the same process
        assert int(wait_for(session, r"workload pid (\d+)", 10).group(1)) == pid
        row = wait_for(session, rf"^│\s+{pid}\s+python3?\S*\s.*$", 10).group(0)
        deadline = time.monotonic() + 10
        rss = 0.0
        while time.monotonic() < deadline:  # the RSS cell: first size on the row
            row = wait_for(session, rf"^│\s+{pid}\s+python3?\S*\s.*$", 5).group(0)
            m = MEM.search(row)
            rss = float(m.group(1)) * FACTOR[m.group(2)] if m else 0.0
            if rss >= 190e6:
                break
            time.sleep(0.2)
        assert 190e6 <= rss <= 260e6, row
        wait_for(session, r"exited with code 3", 20)
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
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
