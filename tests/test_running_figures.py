"""A running session's figures for a history list in another process: written while asked, fresh within a few
seconds, nothing written while no one asks, nothing left after the run."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from helpers import wait_for

from gputop_tracker.core.model import paths
from gputop_tracker.core.sampling.saving import FRESH, PERIOD, RunningFigures
from gputop_tracker.core.store import sessions


def _figures(tmp_path: Path, save: bool = True) -> RunningFigures:
    cfg = SimpleNamespace(save=save, slurm=None)
    return RunningFigures(cfg, tmp_path, "20260101-120000-h-1-abcd", 1.0)  # type: ignore[arg-type]


def test_asked_only_while_a_fresh_request_stands_and_looked_at_most_every_period(tmp_path: Path) -> None:
    f = _figures(tmp_path)
    assert not f.asked(100.0, 1000.0)  # no request
    f.watch.touch()
    assert not f.asked(100.0 + PERIOD / 2, time.time())  # not looked at again before PERIOD
    assert f.asked(100.0 + PERIOD, time.time())
    assert not f.asked(100.0 + PERIOD * 1.5, time.time())
    old = time.time() - FRESH - 5
    os.utime(f.watch, (old, old))  # the list went away without a word
    assert not f.asked(100.0 + PERIOD * 3, time.time())
    assert not _figures(tmp_path, save=False).asked(1e9, time.time())  # --no-save: nothing to look at


def test_close_takes_both_files_away(tmp_path: Path) -> None:
    f = _figures(tmp_path)
    f.watch.touch()
    f.out.write_text("{}")
    f.close()
    assert not f.watch.exists() and not f.out.exists()
    f.close()  # twice: nothing to do, no error


GROW = """
import time
held = []
for i in range(12):
    held.append(bytearray(16 << 20))  # 16 MiB more every 0.5 s
    time.sleep(0.5)
"""


def test_a_running_session_of_another_process_is_fresh_within_seconds(store: Path) -> None:
    """The real tool, headless, a job that grows for 6 s: while asked, the figures follow the run (a checkpoint
    comes only once a minute); not asked, nothing is written; after the run, nothing is left."""
    job = subprocess.Popen(
        [sys.executable, "-m", "gputop_tracker", "--headless", "--interval", "0.5", "--", sys.executable, "-c", GROW],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: any(store.glob("*.json")), 30, "the first checkpoint")
        (path,) = store.glob("*.json")
        first = sessions.load(path, timeline=False).session  # the checkpoint after the first sample
        assert first is not None and first.summary is not None and first.meta.status == "running"
        time.sleep(1.5)
        assert not paths.running_file(store, path.stem).exists()  # no one asked: nothing written
        seen: list[tuple[float, float, float]] = []  # (when read, the run's wall time, its peak) in the figures
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.5 and job.poll() is None:
            sessions.ask_running(path)
            entry = sessions.load_running(path)
            if entry is not None and entry.session is not None and entry.session.summary is not None:
                usage = entry.session.summary
                seen.append((time.monotonic() - t0, usage.compute_time.time, usage.max_ram.combined.total_rss))
            time.sleep(0.5)
        assert seen, "no figures written while asked"
        assert seen[0][0] <= 3.0, seen  # within a look (PERIOD) and a write
        assert seen[-1][1] > seen[0][1] + 1.0, seen  # the wall time follows the run
        assert seen[-1][2] > seen[0][2], seen  # and so does the peak of a growing job
        assert all(b[1] >= a[1] for a, b in itertools.pairwise(seen)), seen
        assert seen[-1][1] > first.summary.compute_time.time + 2.0  # the file still holds that checkpoint
    finally:
        job.wait(timeout=60)
    assert job.returncode == 0
    leftovers = [p.name for p in store.iterdir() if p.name.startswith(".")]
    assert not leftovers, leftovers


def test_a_list_that_looks_after_the_run_ended_leaves_no_request_behind(store: Path) -> None:
    """The list's row was built while the run ran; at its next look the run has ended (its sampler took both dot
    files away): nothing is asked any more, and a request made just before the end goes too."""
    from test_history_sessions import make_session

    from gputop_tracker.tui.history.screens.sessions import _running_entry

    session = make_session(1, running=False)
    path = sessions.save_session(store, session)
    entry = sessions.load(path, timeline=False)
    watch = paths.watch_file(store, path.stem)
    watch.touch()  # asked a moment before the end
    fresh = _running_entry(entry, None)
    assert fresh.session is not None and fresh.session.meta.status == "finished"
    assert not watch.exists() and not paths.running_file(store, path.stem).exists()
