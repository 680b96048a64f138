"""The sampler process or the front end killed with SIGKILL: the command is never orphaned, the session says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import sigint_default, wait_for

PY = sys.executable

WAITS_FOR_GO = """
import os, sys, time
go = sys.argv[1]
open(go + ".ready", "w").close()
while not os.path.exists(go):
    time.sleep(0.02)
sys.exit(7)
"""


def _session(store: Path) -> dict:
    (f,) = store.glob("*.json")
    return json.loads(f.read_text())


def _checkpointed(store: Path) -> bool:
    files = list(store.glob("*.json"))
    return bool(files) and _session(store)["summary"]["n_samples"] >= 1


def _kill_the_sampler(store: Path) -> dict:
    """Once the run has checkpointed, SIGKILL to its sampler; returns the session's meta as it was before, once the
    session is marked interrupted."""
    wait_for(lambda: _checkpointed(store), what="the first checkpoint")
    meta = _session(store)["meta"]
    os.kill(meta["engine_pid"], signal.SIGKILL)
    wait_for(lambda: _session(store)["meta"]["status"] == "interrupted", what="the session marked interrupted")
    return meta


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return b") Z" not in f.read()
    except OSError:
        return False


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    go = tmp_path / "go"
    proc = subprocess.Popen(
        [PY, "-m", "gputop_tracker", "--headless", "--interval", "0.1", "--", PY, "-c", WAITS_FOR_GO, str(go)],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for(Path(str(go) + ".ready").exists, what="the command to start")
    return proc, go


def test_sampler_killed_front_end_waits_for_the_command_and_marks_the_session(tmp_path: Path, store: Path) -> None:
    proc, go = _start(tmp_path)
    try:
        meta = _kill_the_sampler(store)
        command = meta["pid"]
        assert proc.poll() is None, "the front end went on waiting for the command"
        assert _alive(command)
        go.touch()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 7, err  # the command's own exit code
    lines = [line for line in err.splitlines() if line.startswith("gputop-track:")]
    assert len(lines) == 1 and "sampler process was killed by SIGKILL" in lines[0], err
    assert f"PID {command}" in lines[0] and "interrupted" in lines[0]
    assert "Traceback" not in err
    assert not _alive(command)
    session = _session(store)
    assert session["meta"]["status"] == "interrupted" and session["meta"]["exit_code"] == 7
    assert session["summary"]["exit_code"] == 7 and session["summary"]["n_samples"] >= 1  # the checkpoint's figures
    assert any("sampler process was killed by SIGKILL" in n for n in session["summary"]["notes"])
    listed = subprocess.run(
        [PY, "-m", "gputop_tracker", "sessions", "list", "-f", "json"], capture_output=True, text=True, timeout=60
    )
    assert json.loads(listed.stdout)[0]["status"] == "interrupted"
    shown = subprocess.run(
        [PY, "-m", "gputop_tracker", "sessions", "show", meta["id"]], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and "sampler process was killed" in shown.stdout + shown.stderr


def test_signals_reach_the_command_after_the_sampler_died(tmp_path: Path, store: Path) -> None:
    proc, _go = _start(tmp_path)
    try:
        _kill_the_sampler(store)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert _session(store)["summary"]["exit_signal"] == signal.SIGTERM


def test_front_end_killed_is_recorded_in_the_session(tmp_path: Path, store: Path) -> None:
    proc, go = _start(tmp_path)
    wait_for(lambda: _checkpointed(store), what="the first checkpoint")
    front = proc.pid
    proc.kill()
    proc.wait()
    go.touch()
    proc.communicate(timeout=30)  # its stderr is the command's too: closed once the command ended
    wait_for(lambda: _session(store)["meta"]["status"] == "finished", what="the sampler to finish alone")
    summary = _session(store)["summary"]
    assert summary["exit_code"] == 7
    assert any(f"front end (PID {front}) died" in n for n in summary["notes"]), summary["notes"]


def test_a_front_end_dead_before_the_sampler_looked_is_still_noted() -> None:
    """The sampler took its front end's pid from getppid() once it had loaded: a front end killed before then
    was never noted (getppid() already named the reaper). The pid now comes from the front end itself."""
    from gputop_tracker.core.sampling.endwatch import EndWatch

    gone = subprocess.Popen([PY, "-c", "pass"])
    gone.wait()
    notes: list[str] = []
    watch = EndWatch(wait_descendants=False, api=False, front_end=gone.pid)
    watch.check_front_end(notes.append, time.time())
    assert len(notes) == 1 and f"(PID {gone.pid}) died" in notes[0]
    watch.check_front_end(notes.append, time.time())
    assert len(notes) == 1  # once
    mine = EndWatch(wait_descendants=False, api=False, front_end=os.getppid())
    mine.check_front_end(notes.append, time.time())
    assert len(notes) == 1  # alive and still our parent: nothing to say


def test_the_front_end_names_itself_to_the_sampler() -> None:
    from gputop_tracker.core.model.config import EngineConfig
    from gputop_tracker.core.sampling import channel

    cfg = EngineConfig(mode="attach", pid=os.getpid(), save=False, interval=0.1)
    handle = channel.start_spawned(cfg)
    try:
        assert cfg.front_end == os.getpid()
    finally:
        handle.signal(signal.SIGTERM)
        handle.close()
        handle.wait()


def test_a_signal_sent_while_the_sampler_dies_still_reaches_the_command(tmp_path: Path, store: Path) -> None:
    """SIGKILL to the sampler and SIGTERM to us back to back: the sampler, killed but not yet a zombie, takes the
    TERM and passes it nowhere; we must see that it never relayed it and send it to the command ourselves."""
    for attempt in range(5):
        run = tmp_path / str(attempt)
        run.mkdir()
        for f in store.glob("*.json"):
            f.unlink()
        proc, _go = _start(run)
        try:
            wait_for(lambda: _checkpointed(store), what="the first checkpoint")
            sampler = _session(store)["meta"]["engine_pid"]
            os.kill(sampler, signal.SIGKILL)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 128 + signal.SIGTERM, (attempt, err)
        assert "sampler process was killed by SIGKILL" in err, err
        assert not list(store.glob("*.json")) or _session(store)["summary"]["exit_signal"] == signal.SIGTERM


def test_after_the_sampler_died_a_sigint_still_ends_a_shell_script_waiting_for_a_child(
    tmp_path: Path, store: Path
) -> None:
    """Once the front end passes signals on itself, they go to the command's process group as the sampler's did:
    sent to the script alone, bash saw its child finish unharmed and ran on."""
    marker = tmp_path / "ran-on"
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "gputop_tracker",
            "--headless",
            "--interval",
            "0.1",
            "--",
            "bash",
            "-c",
            f"sleep 60; touch {marker}",
        ],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    try:
        _kill_the_sampler(store)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert not marker.exists()
