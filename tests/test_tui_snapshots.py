"""Screen snapshots of the live view with deterministic fake data (pytest-textual-snapshot).

Update after an intended change of the look: pytest tests/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fakesource import FakeSource

from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.live.output_pane import OutputPane

SIZES = [(80, 24), (120, 40), (160, 50)]


def make(finished: bool = False) -> LiveApp:
    src = FakeSource(20, finished=finished, exit_code=0)
    return LiveApp(src, interval=1.0, command=["python3", "train.py", "--epochs", "3"], store_dir=Path(src.store))


def settled(app: LiveApp, *keys: str) -> Any:
    async def run_before(pilot: Any) -> None:
        src = app.source
        assert isinstance(src, FakeSource)
        for _ in range(3000):  # every scripted message drawn, however loaded the machine
            if app.n_messages >= src.n_scripted:
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_live_running(snap_compare: Any, size: tuple[int, int]) -> None:
    app = make()
    assert snap_compare(app, terminal_size=size, run_before=settled(app))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_final_summary(snap_compare: Any, size: tuple[int, int]) -> None:
    app = make(finished=True)
    assert snap_compare(app, terminal_size=size, run_before=settled(app))


def test_flat_sorted_by_cpu(snap_compare: Any) -> None:
    app = make()
    assert snap_compare(app, terminal_size=(160, 50), run_before=settled(app, "t", "s"))


def test_quit_dialog(snap_compare: Any) -> None:
    app = make()
    assert snap_compare(app, terminal_size=(80, 24), run_before=settled(app, "q"))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_process_details(snap_compare: Any, size: tuple[int, int]) -> None:
    app = make()
    assert snap_compare(app, terminal_size=size, run_before=settled(app, "enter"))


def test_quit_dialog_attached(snap_compare: Any) -> None:
    src = FakeSource(20)
    app = LiveApp(src, interval=1.0, command=[], mode="attach", store_dir=Path(src.store))
    assert snap_compare(app, terminal_size=(80, 24), run_before=settled(app, "q"))


def test_signal_dialog_subtree(snap_compare: Any) -> None:
    app = make()
    assert snap_compare(app, terminal_size=(120, 40), run_before=settled(app, "k", "a"))


def test_kill_dialog(snap_compare: Any) -> None:
    app = make()

    async def run_before(pilot: Any) -> None:
        await settled(app, "q", "s")(pilot)
        app.control.ask_kill()
        await pilot.pause()

    src = app.source
    assert isinstance(src, FakeSource)
    src.ignores_sigterm = True
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@pytest.mark.parametrize("sizes", [[(120, 40), (80, 24)], [(80, 24), (200, 60)], [(200, 60), (120, 40)]], ids=str)
def test_after_resize(snap_compare: Any, sizes: list[tuple[int, int]]) -> None:
    """Resized in any order, every panel stays readable (no wrapped GPU lines, no scrollbars in the side)."""
    app = make()

    async def run_before(pilot: Any) -> None:
        await settled(app)(pilot)
        for size in sizes:
            await pilot.resize_terminal(*size)
            await pilot.pause()

    assert snap_compare(app, terminal_size=sizes[0], run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_output_zoomed_with_progress_bar(snap_compare: Any, size: tuple[int, int]) -> None:
    src = FakeSource(20, output=["epoch 1", "\x1b[32mok\x1b[0m colours kept"])
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))

    async def run_before(pilot: Any) -> None:
        await settled(app)(pilot)
        out = app.query_one("#output", OutputPane)
        for i in range(0, 101, 25):
            out.write(f"\r{i:3d}%|{'█' * (i // 10):<10}| {i}/100")
        await pilot.press("o")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
