"""The live view's output pane while a job prints: it follows whenever its end is on screen, says when it does not,
draws what came between two frames at once, and Tab reaches it (Pilot, the fake source)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakesource import TREE, FakeSource

from gputop_tracker.tui.live import output_pane
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.live.messages import OutputText
from gputop_tracker.tui.live.output_pane import SCROLLED_BACK, OutputPane
from gputop_tracker.tui.widgets.proctable import ProcessTable


def make_app() -> LiveApp:
    src = FakeSource(2, output=[])
    return LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))


def last_shown(out: OutputPane) -> str:
    """The last line on screen in the pane."""
    bottom = min(round(out.scroll_y) + out.scrollable_content_region.height, len(out.lines)) - 1
    return out.lines[bottom]


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
async def test_end_follows_again_while_workers_print(size: tuple[int, int]) -> None:
    """Three rounds of scrolling back and End while lines come: each End shows the newest line and the lines that
    come after it (an End that animated ended where the end had been, and the pane never followed again)."""
    app = make_app()
    async with app.run_test(size=size) as pilot:
        out = app.query_one("#output", OutputPane)
        n = 0

        async def print_lines(k: int) -> None:  # four workers' lines, as they come between two frames
            nonlocal n
            for _ in range(k):
                out.write("".join(f"[rank {r}] step {n} loss 0.5\n" for r in range(4)))
                n += 1
                await pilot.pause()

        await print_lines(30)
        assert out.following and last_shown(out) == f"[rank 3] step {n - 1} loss 0.5"
        await pilot.click("#output")
        for keys in (["up"], ["pageup", "pageup"], ["home"]):
            await pilot.press(*keys)
            assert not out.following
            await print_lines(3)
            assert out.unseen == 12 and not last_shown(out).endswith(f"step {n - 1} loss 0.5")
            assert str(out.border_title) == f"output · {SCROLLED_BACK}, 12 new lines"
            await pilot.press("end")
            await print_lines(3)  # at once, while an animated scroll would still be under way
            await pilot.pause()
            assert out.following and out.unseen == 0 and str(out.border_title) == "output"
            assert last_shown(out) == f"[rank 3] step {n - 1} loss 0.5"


async def test_scrolling_down_to_the_end_follows_again() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        out = app.query_one("#output", OutputPane)
        out.write("".join(f"line {i}\n" for i in range(100)))
        await pilot.click("#output")
        await pilot.press("pageup")
        out.write("line 100\n")
        assert not out.following and out.unseen == 1
        assert str(out.border_title) == f"output · {SCROLLED_BACK}, 1 new line"
        for _ in range(20):
            await pilot.press("down")
        assert out.following
        out.write("line 101\n")
        await pilot.pause()
        assert last_shown(out) == "line 101"


async def test_output_between_two_frames_is_drawn_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """20 batches from the reader within a frame: one draw for the first (the pane was quiet), one for the rest
    when the frame ends (it drew each of them: 5-10 % of a core for a job that prints all the time)."""
    monkeypatch.setattr(output_pane, "FRAME", 3600.0)  # no frame ends by itself in this test: it ends it
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        out = app.query_one("#output", OutputPane)
        draws: list[str] = []
        write = out.write
        monkeypatch.setattr(out, "write", lambda text: (draws.append(text), write(text)))
        for i in range(20):
            app.post_message(OutputText(f"line {i}\n"))
        await pilot.pause()
        assert len(draws) == 1 and out.lines == ["line 0"]
        assert out._frame is not None  # the rest waits for the frame's end
        out._frame.stop()
        out.flush()  # what the frame's timer calls
        assert len(draws) == 2 and out.lines == [f"line {i}" for i in range(20)]
        out._drawn -= 3600.0  # a quiet frame later
        app.post_message(OutputText("after a quiet frame\n"))
        await pilot.pause()
        assert len(draws) == 3 and out.lines[-1] == "after a quiet frame"


async def test_new_lines_lay_the_screen_out_only_when_the_scroll_bar_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual lays the whole screen out on each change of a widget's virtual size: a third of the view's cost
    when each batch of output grew the pane's. Only the scroll bar's coming changes the layout."""
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        out = app.query_one("#output", OutputPane)
        layouts = []
        refresh = out.refresh
        monkeypatch.setattr(out, "refresh", lambda *a, **k: (layouts.append(k.get("layout")), refresh(*a, **k))[1])
        out.write("".join(f"line {i}\n" for i in range(3)))
        await pilot.pause()
        out.write("".join(f"line {i}\n" for i in range(3, 40)))  # the scroll bar comes
        await pilot.pause()
        laid_out = layouts.count(True)
        for i in range(40, 60):
            out.write(f"line {i}\n")
            await pilot.pause()
        assert layouts.count(True) == laid_out, "laid out again for a line"
        assert out.vertical_scrollbar.window_virtual_size == 60 and out.max_scroll_y == 60 - out.size.height
        assert last_shown(out) == "line 59"


async def test_tab_reaches_the_output_first_and_its_border_shows_it() -> None:
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one("#procs", ProcessTable)
        out = app.query_one("#output", OutputPane)
        assert table.has_focus
        unfocused, focused = out.styles.border_top[1], table.styles.border_top[1]
        await pilot.press("tab")
        assert out.has_focus
        assert out.styles.border_top[1] != unfocused and out.styles.border_top[1] == focused  # as the table's
        assert table.styles.border_top[1] != focused
        await pilot.press("tab")
        assert table.has_focus
        await pilot.press("f")  # in the prompt, Tab is the prompt's
        await pilot.press("tab")
        assert not out.has_focus


def test_the_output_gets_the_rows_the_table_does_not_need() -> None:
    from gputop_tracker.tui.live.layout import fit_heights, with_spare_rows

    heights = fit_heights(50, False, 11)
    assert heights[1] == 8
    few = with_spare_rows(50, heights, 11, 5, False)  # 5 processes: the table keeps 8 rows and 3 of chrome
    assert few == 8 + (50 - 3 - heights[0] - 8) - 11
    assert with_spare_rows(50, heights, 11, 40, False) == 8  # a full table keeps all its room
    assert with_spare_rows(50, heights, 25, 5, False) == 8 + (50 - 3 - heights[0] - 8) - 25  # the side panels'
    assert with_spare_rows(50, heights, 40, 5, False) == 8  # they need more than there is: nothing to give
    assert with_spare_rows(50, heights, 11, 0, False) == 8  # no row yet: nothing moves
    assert with_spare_rows(50, heights, 11, 5, False) == with_spare_rows(50, heights, 11, 6, False)  # a step


@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
async def test_with_few_processes_the_table_gives_its_empty_rows_to_the_output(size: tuple[int, int]) -> None:
    """8 processes at 160x50 (3 at 80x24): the table showed ~20 empty rows while the output pane had 6."""
    src = FakeSource(3, tree=None if size[0] >= 160 else TREE[:3])
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=size) as pilot:
        for _ in range(300):
            if app.n_messages >= src.n_scripted:
                break
            await pilot.pause(0.01)
        await pilot.pause()
        table, out = app.query_one("#procs", ProcessTable), app.query_one("#output", OutputPane)
        empty = table.scrollable_content_region.height - 1 - table.row_count  # less the labels' row
        main = app.query_one("#main").region.height
        if size == (160, 50):  # beside the side panels: the table is as tall as they are, or its rows need
            assert out.region.height > 8 and main == max(app._side_need(False), table.row_count + 1 + 3 + 3)
        else:  # stacked: the table keeps a step of free rows at most
            assert 0 <= empty <= 4, (empty, out.region.height)


def test_the_same_thumb_is_the_same_scroll_bar() -> None:
    """The pane sets its scroll bar's figures without a repaint when `thumb` is the same before and after: Textual's
    renderer must then draw the very same bar (a Textual that works the thumb out otherwise fails here)."""
    from math import ceil

    from textual.scrollbar import ScrollBarRender

    for size in (3, 12, 20):
        drawn: dict[tuple[int, ...], object] = {}
        for virtual in range(1, 60):
            for window in (size, size - 1):
                for eighths in range(0, max(virtual - window, 0) * 8 + 1, 5):
                    position = eighths / 8
                    shown = ceil(window) if window < virtual else 0  # as ScrollBar._render_bar hands them over
                    bar = ScrollBarRender.render_bar(size, ceil(virtual), shown, position).segments
                    key = output_pane.thumb(size, virtual, window, position)
                    assert drawn.setdefault(key, bar) == bar, (size, virtual, window, position)
