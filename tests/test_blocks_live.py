"""The live view's header names the code blocks running now (from the streamed block events)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.widgets import Static

from gputop_tracker.core.channel import EventMessage
from gputop_tracker.core.models import Event
from gputop_tracker.tui.fake import MAIN_PID, FakeSource
from gputop_tracker.tui.live_app import LiveApp
from gputop_tracker.tui.live_blocks import OpenBlocks


def _event(kind: str, name: str, pid: int = MAIN_PID) -> Event:
    return Event(time=1.0, type=kind, message=f"block {name!r}", pid=pid, name=name)


def test_open_blocks_nest_and_end_innermost_first() -> None:
    ob = OpenBlocks()
    assert ob.text() == ""
    assert ob.feed(_event("block_start", "epoch"))
    assert ob.feed(_event("block_start", "step"))
    assert ob.feed(_event("block_start", "step", pid=7))
    assert ob.text() == "block epoch ▸ step ▸ step"
    assert ob.feed(_event("block_end", "step"))
    assert ob.running == [(MAIN_PID, "epoch"), (7, "step")]
    assert not ob.feed(_event("block_end", "unknown"))
    assert not ob.feed(Event(time=1.0, type="peak", message="x"))
    for i in range(4):
        ob.feed(_event("block_start", f"b{i}"))
    assert ob.text().startswith("block (+3) ")


async def test_header_shows_the_running_blocks() -> None:
    src = FakeSource(2)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))

    def header() -> str:
        return str(app.query_one("#header", Static).content)

    async def until(cond: object) -> None:
        for _ in range(400):
            if cond():  # type: ignore[operator]
                return
            await asyncio.sleep(0.01)
        raise AssertionError(header())

    async with app.run_test(size=(160, 50)) as pilot:
        await until(lambda: app.n_messages >= src.n_scripted)
        src.push(EventMessage(_event("block_start", "load data")))
        await until(lambda: "block load data" in header())
        src.push(EventMessage(_event("block_end", "load data")))
        await until(lambda: "block " not in header())
        await pilot.pause()


async def test_history_detail_has_a_blocks_tab(tmp_path: Path, store: Path) -> None:
    import sys

    from helpers import track
    from textual.app import App
    from textual.widgets import TabbedContent

    from gputop_tracker.core import store as stores
    from gputop_tracker.tui.history import SessionDetailScreen

    script = tmp_path / "s.py"
    script.write_text("from gputop_tracker import block\nwith block('phase one'):\n    x = bytearray(10**7)\n")
    proc = track("--headless", "--", sys.executable, str(script))
    assert proc.returncode == 0, proc.stderr
    (entry,) = stores.list_entries(store)
    screen = SessionDetailScreen(entry, store)

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(screen)

    app = Host()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        tabs = screen.query_one(TabbedContent)
        tabs.active = "blocks"
        await pilot.pause()
        text = str(screen.query_one("#blocks-text", Static).content)
        assert "phase one" in text and "peak RAM" in text and "exact" in text


def test_history_compare_rows_have_the_blocks() -> None:
    from gputop_tracker.core.history import compare_rows
    from gputop_tracker.core.models import BlockDuration, BlockSummary, ResourceUsage

    def usage(*blocks: tuple[str, int, float]) -> ResourceUsage:
        return ResourceUsage(
            blocks=[
                BlockSummary(name=n, calls=c, peak_ram=ram, duration=BlockDuration(total=1.0)) for n, c, ram in blocks
            ]
        )

    rows = {r[0]: r for r in compare_rows(usage(("load", 1, 2e8)), usage(("load", 1, 1e8), ("new", 2, 5e7)))}
    assert rows["block load: peak RAM"][5] == "B"  # lower is better
    assert rows["block load: calls"][5] == "same"
    assert rows["block new: calls"][1] == "-" and rows["block new: calls"][3] == "-"
