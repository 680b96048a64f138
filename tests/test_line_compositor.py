"""The live view's compositor draws a partial update from the changed lines of each widget only; what it sends
the terminal must be exactly what Textual's own compositor sends for the same changes, whatever the view does
(new samples, sorting, the tree, the cursor, pause, the output pane zoomed, a resize, a dialog over it)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from fakesource import TREE, FakeSource, make_sample
from rich.console import Console
from textual._compositor import Compositor
from textual.screen import Screen

from gputop_tracker.core.sampling.channel import SampleMessage
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.live.line_compositor import LineCompositor, use_line_compositor


def terminal_text(sequences: str) -> str:
    """What an update writes, less a cursor move with nothing written after it (Textual's compositor moves to a
    cut past the screen's edge when a widget there overlaps the changed box: nothing is drawn there)."""
    return re.sub(r"\x1b\[\d+;\d+H(?=\x1b\[\d+;\d+H|\n|$)", "", sequences)


def test_the_live_view_screen_gets_it_and_no_other() -> None:
    assert type(use_line_compositor(Screen())._compositor) is LineCompositor

    class Other(Compositor):  # a compositor not Textual's own: left as it is
        pass

    screen = Screen()
    screen._compositor = Other()
    assert type(use_line_compositor(screen)._compositor) is Other


def test_a_textual_it_was_not_compared_with_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    import gputop_tracker.tui.live.line_compositor as module

    monkeypatch.setattr(module, "textual_version", "9.0.0")
    assert type(use_line_compositor(Screen())._compositor) is Compositor


async def test_partial_updates_equal_textuals(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(force_terminal=True, color_system="truecolor", width=200, legacy_windows=False)
    ours_only = LineCompositor.render_partial_update
    compared: list[int] = []

    def both(self: LineCompositor) -> object:
        regions = set(self._dirty_regions)
        ours = ours_only(self)
        self._dirty_regions.update(regions)
        theirs = Compositor.render_partial_update(self)  # renders every widget over the changed box
        assert (ours is None) == (theirs is None)
        if ours is not None and theirs is not None:
            assert terminal_text(ours.render_segments(console)) == terminal_text(theirs.render_segments(console))
            compared.append(len(regions))
        return ours

    monkeypatch.setattr(LineCompositor, "render_partial_update", both)
    src = FakeSource(6, blocks=True)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(160, 50)) as pilot:

        async def samples(n: int) -> None:
            for _ in range(n):
                src.push(SampleMessage(make_sample(len(src.samples), tree=TREE)))
                for _ in range(200):
                    if app.n_messages >= src.n_scripted:
                        break
                    await asyncio.sleep(0.01)
                await pilot.pause()

        await samples(3)
        assert type(app.screen._compositor) is LineCompositor
        for keys in (["s"], ["down", "down"], ["t"], ["r"], ["p"], ["p"], ["o"], ["o"], ["b"], ["question_mark"]):
            await pilot.press(*keys)
            await samples(2)
            if keys == ["question_mark"]:
                await pilot.press("escape")
        await pilot.resize_terminal(120, 40)
        await samples(3)
    assert len(compared) >= 20  # frames whose partial update was compared
    assert any(n > 1 for n in compared)  # some with changes in several places at once
