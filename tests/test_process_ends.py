"""Every process seen gets one end (fork storms); descendants still running at the end are named, or waited
for with --wait-descendants (a real double-forked daemon)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

from tests.helpers import track

PY = sys.executable
TRACK = [PY, "-m", "gputop_tracker"]

STORM = """
import os, sys, time
n, mode = int(sys.argv[1]), sys.argv[2]
pids = []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        if mode == "orphans" and os.fork() == 0:  # a grandchild that outlives its parent a little
            time.sleep(0.002 * (i % 5))
        else:
            time.sleep(0.001 * (i % 7))
        os._exit(i % 3)
    pids.append(pid)
for p in pids:
    os.waitpid(p, 0)
"""

DAEMON = """
import os, sys, time
go = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the daemon: double-forked away from the command, its stdio on /dev/null
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open(go + ".daemon", "w") as f:
            f.write(str(os.getpid()))
        while not os.path.exists(go):
            time.sleep(0.02)
        os._exit(0)
    os._exit(0)
while not os.path.exists(go + ".daemon"):
    time.sleep(0.01)
"""


def _report(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "r.json"
    proc = track("--headless", "-f", "json", "-o", str(out), "--interval", "0.05", *args, timeout=120)
    assert out.exists(), proc.stderr
    return proc, json.loads(out.read_text())


@pytest.mark.parametrize("mode", ["children", "orphans"])
def test_fork_storm_every_process_started_gets_exactly_one_end(tmp_path: Path, mode: str) -> None:
    proc, report = _report(tmp_path, "--", PY, "-c", STORM, "300", mode)
    assert proc.returncode == 0, proc.stderr
    started = collections.Counter(e["pid"] for e in report["events"] if e["type"] == "process_started")
    ended = collections.Counter(e["pid"] for e in report["events"] if e["type"] == "process_exited")
    assert len(started) >= 50, "the storm was seen"
    assert all(n == 1 for n in started.values())
    assert set(started) - set(ended) == set(), "started but never ended"
    assert {pid: n for pid, n in ended.items() if n != 1} == {}, "ended twice"


def _daemon_pid(go: Path) -> int:
    path = Path(str(go) + ".daemon")
    wait_for(lambda: path.exists() and path.read_text(), what="the daemon")
    return int(path.read_text())


def test_daemon_still_running_is_named_in_the_report(tmp_path: Path) -> None:
    go = tmp_path / "go"
    try:
        proc, report = _report(tmp_path, "--", PY, "-c", DAEMON, str(go))
        daemon = _daemon_pid(go)
        assert proc.returncode == 0, proc.stderr
        notes = [n for n in report["notes"] if "still running when tracking stopped" in n]
        assert len(notes) == 1 and f"PID {daemon} " in notes[0] and "--wait-descendants" in notes[0], report["notes"]
        assert f"PID {daemon} `{PY} -c" in notes[0]  # its command line
        text = track("sessions", "show", report["session_id"])
        assert f"PID {daemon}" in text.stdout + text.stderr
    finally:
        go.touch()


def test_wait_descendants_tracks_the_daemon_to_its_end(tmp_path: Path) -> None:
    go = tmp_path / "go"
    out = tmp_path / "r.json"
    cmd = [PY, "-c", DAEMON, str(go)]
    proc = subprocess.Popen(
        [*TRACK, "--headless", "-f", "json", "-o", str(out), "--interval", "0.05", "--wait-descendants", "--", *cmd],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        daemon = _daemon_pid(go)
        wait_for(lambda: _parent_of(daemon) != _command_pid(proc.pid), what="the command to exit")
        time.sleep(0.3)  # several intervals after the command exited: we must still be tracking
        assert proc.poll() is None, "tracking went on while the daemon runs"
        go.touch()
        _, err = proc.communicate(timeout=60)
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    report = json.loads(out.read_text())
    ends = [e for e in report["events"] if e["type"] == "process_exited" and e["pid"] == daemon]
    assert len(ends) == 1
    assert not any("still running" in n for n in report["notes"]), report["notes"]
    assert any("--wait-descendants: the command exited" in n for n in report["notes"]), report["notes"]


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return int(data[data.rindex(b")") + 2 :].split()[1])


def _command_pid(front: int) -> int:
    """The command: a child of the sampler, itself the front end's child."""
    try:
        with open(f"/proc/{front}/task/{front}/children") as f:
            sampler = int(f.read().split()[0])
        with open(f"/proc/{sampler}/task/{sampler}/children") as f:
            return int(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return -1


def test_wait_descendants_is_an_api_option() -> None:
    from gputop_tracker import Tracker

    assert Tracker(wait_descendants=True)._cfg.wait_descendants
    assert "--wait-descendants" in track("--help").stdout
