"""The history opened from the live view keeps running sessions' figures fresh while it is on show."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fakesource import SESSION_ID, FakeSource
from test_history_sessions import make_session
from textual.widgets import DataTable

from gputop_tracker.core.store import sessions as store
from gputop_tracker.tui.history.screens import sessions as history
from gputop_tracker.tui.history.screens.sessions import HistoryScreen
from gputop_tracker.tui.live.app import LiveApp


def running_file(store_dir: Path, sid: str, duration: float) -> Path:
    """A running session as its first checkpoint wrote it (right after its first sample)."""
    session = make_session(1, duration=duration, running=True, host="another-host")
    session["meta"]["id"] = sid
    session["summary"]["compute_time"]["time"] = duration
    return store.save_session(store_dir, session)


async def test_running_sessions_refresh_from_the_running_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live view's own session from its running summary, another running one from its file as rewritten;
    a session that was listed as `0.068s` 50 s into its run."""
    monkeypatch.setattr(history, "RUNNING_REFRESH", 0.1)
    store_dir = tmp_path / "store"
    running_file(store_dir, SESSION_ID, 0.068)
    other = running_file(store_dir, "20250101-130000-another-host-77-beef", 0.5)
    src = FakeSource(3, store=str(store_dir))
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=store_dir)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(300):
            if app.n_messages >= src.n_scripted:
                break
            await asyncio.sleep(0.01)
        await pilot.press("h")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        table = screen.query_one("#history-table", DataTable)
        await pilot.pause(0.3)
        shown = str(table.get_cell(SESSION_ID, "duration"))
        assert shown != "0.068s" and app.progress is not None
        assert shown == history.list_duration(app.progress.compute_time.time)
        assert str(table.get_cell(other.stem, "duration")) == "0.500s"
        for _ in range(20):  # 20 s more of the run
            src.push_sample()
        running_file(store_dir, other.stem, 45.0)  # its sampler checkpointed meanwhile
        for _ in range(300):
            if app.n_messages >= src.n_scripted:
                break
            await asyncio.sleep(0.01)
        await pilot.pause(0.3)
        progress = app.progress
        assert progress is not None and progress.compute_time.time > 20
        assert str(table.get_cell(SESSION_ID, "duration")) == history.list_duration(progress.compute_time.time)
        assert str(table.get_cell(other.stem, "duration")) == "45s"


def test_compare_calls_two_different_failures_different() -> None:
    """Exit codes 143 and 129 were called "same" (both not 0)."""
    from fakesource import FakeSource, make_summary

    from gputop_tracker.core.report.listing import compare_rows

    base = make_summary(FakeSource(2).samples)

    def verdict(a: int, b: int) -> str:
        rows = compare_rows(base.model_copy(update={"exit_code": a}), base.model_copy(update={"exit_code": b}))
        return next(row[5] for row in rows if row[0] == "exit code")

    assert verdict(143, 129) == "" and verdict(143, 143) == "same" and verdict(0, 0) == "same"
    assert verdict(0, 1) == "A" and verdict(1, 0) == "B"


def test_the_blocks_gpu_utilization_is_per_gpu_and_labelled() -> None:
    """The Blocks tab read `99.7%`: an unlabelled sum over 2 GPUs."""
    from gputop_tracker.core.model.models import BlockSummary
    from gputop_tracker.core.report import render

    block = BlockSummary.model_validate({"name": "train", "calls": 1, "mean_gpu_utilization": 99.7})
    two = render.blocks_text([block], n_gpus=2)
    assert "GPU util" in two[1] and "49.9%×2" in two[2]
    assert "99.7%" in render.blocks_text([block], n_gpus=1)[2]


async def test_another_processes_running_session_refreshes_from_the_figures_its_sampler_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another gputop-track's running session on this host: the list asks its sampler (the watch file) and shows
    the figures it writes, not the minute-old checkpoint; once it writes newer ones, the row follows."""
    import os
    import socket

    from gputop_tracker.core.model import paths

    monkeypatch.setattr(history, "RUNNING_REFRESH", 0.1)
    store_dir = tmp_path / "store"
    running_file(store_dir, SESSION_ID, 0.068)

    def other_session(duration: float) -> dict:
        session = make_session(2, duration=duration, running=True, host=socket.gethostname())
        session["meta"]["id"] = "20250101-130000-here-77-beef"
        session["meta"]["engine_pid"] = os.getpid()  # a live sampler: this process
        session["summary"]["compute_time"]["time"] = duration
        return session

    other = store.save_session(store_dir, other_session(0.5))  # its first checkpoint
    src = FakeSource(3, store=str(store_dir))
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=store_dir)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("h")
        await pilot.pause()
        table = app.screen.query_one("#history-table", DataTable)
        watch = paths.watch_file(store_dir, other.stem)
        for _ in range(100):
            if watch.exists():
                break
            await pilot.pause(0.05)
        assert watch.exists()  # asked
        fresh = other_session(30.0)
        fresh.pop("timeline")
        store.write_running(paths.running_file(store_dir, other.stem), fresh)  # its sampler answers
        for _ in range(100):
            if str(table.get_cell(other.stem, "duration")) == "30s":
                break
            await pilot.pause(0.05)
        assert str(table.get_cell(other.stem, "duration")) == "30s"
        fresh["summary"]["compute_time"]["time"] = 34.0
        store.write_running(paths.running_file(store_dir, other.stem), fresh)  # 2 s later, newer
        for _ in range(100):
            if str(table.get_cell(other.stem, "duration")) == "34s":
                break
            await pilot.pause(0.05)
        assert str(table.get_cell(other.stem, "duration")) == "34s"
        store.save_session(store_dir, other_session(50.0))  # a checkpoint newer than those figures: it wins
        for _ in range(100):
            if str(table.get_cell(other.stem, "duration")) == "50s":
                break
            await pilot.pause(0.05)
        assert str(table.get_cell(other.stem, "duration")) == "50s"
