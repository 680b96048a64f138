"""The live view's code blocks: the header names the blocks running now; the blocks table (key b)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from fakesource import MAIN_PID, FakeSource, make_live_blocks
from textual.widgets import Static

from gputop_tracker.core.model.models import Event
from gputop_tracker.core.sampling import channel, sampler
from gputop_tracker.core.sampling.channel import BlocksMessage, EventMessage
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.live.blocks import BLOCK_COLUMNS, OpenBlocks
from gputop_tracker.tui.widgets.proctable import ProcessTable


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

    from gputop_tracker.core.store import sessions as stores
    from gputop_tracker.tui.history.screens.detail import SessionDetailScreen

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
    from gputop_tracker.core.model.models import BlockDuration, BlockSummary, ResourceUsage
    from gputop_tracker.core.report.listing import compare_rows

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


# --------------------------------------------------------------------------- the blocks table (key b)


def _blocks_app(n: int = 20) -> tuple[FakeSource, LiveApp]:
    src = FakeSource(n, blocks=True)
    return src, LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))


async def _settle(app: LiveApp, src: FakeSource, pilot: object) -> None:
    for _ in range(3000):
        if app.n_messages >= src.n_scripted:
            break
        await asyncio.sleep(0.01)
    await pilot.pause()  # type: ignore[attr-defined]


async def test_b_shows_the_blocks_table_in_place_of_the_processes_on_a_small_terminal() -> None:
    src, app = _blocks_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(app, src, pilot)
        procs, blocks = app.query_one("#procs", ProcessTable), app.query_one("#blocks", ProcessTable)
        assert procs.display and not blocks.display  # hidden until asked for at this size
        assert "b: blocks" in str(app.query_one("#header", Static).content)
        await pilot.press("b")
        await pilot.pause()
        assert blocks.display and not procs.display and blocks.has_focus
        names = [blocks.get_cell(k, "b_name") for k in blocks.ordered_keys]
        assert names == ["load data", "train epoch", "train step", "save checkpoint"]
        epoch, step = blocks.ordered_keys[1], blocks.ordered_keys[2]
        assert blocks.get_cell(epoch, "b_open") == "yes 16s"  # open since 3 s, the last sample at 19 s
        assert blocks.get_cell(epoch, "b_marks") == "4"
        assert blocks.get_cell(step, "b_calls") == "192" and blocks.get_cell(step, "b_total") == "15.96 s"
        assert "4 blocks · 2 open · 4 marks" in str(blocks.border_subtitle)
        src.push(EventMessage(_event("block_end", "train epoch")))
        lb = make_live_blocks(21)
        assert lb is not None
        lb.blocks[1] = lb.blocks[1].model_copy(update={"open": 0, "calls": 1, "duration_total": 18.0})
        src.push(BlocksMessage(lb))
        src.push_sample(21)
        for _ in range(400):  # drawn with the sample that follows
            if blocks.get_cell(epoch, "b_calls") == "1":
                break
            await asyncio.sleep(0.01)
        assert blocks.get_cell(epoch, "b_open") == "" and blocks.get_cell(epoch, "b_total") == "18.00 s"
        await pilot.press("b")
        await pilot.pause()
        assert procs.display and not blocks.display and procs.has_focus


async def test_a_large_terminal_shows_the_blocks_under_the_processes_and_b_hides_them() -> None:
    src, app = _blocks_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await _settle(app, src, pilot)
        procs, blocks = app.query_one("#procs", ProcessTable), app.query_one("#blocks-wide", ProcessTable)
        assert procs.display and blocks.display and not app.query_one("#blocks").display
        assert blocks.row_count == 4 and [c[0] for c in BLOCK_COLUMNS] == blocks.columns  # every column
        assert blocks.region.y > procs.region.y and blocks.region.height == 4 + 3 and blocks.region.width == 160
        await pilot.press("b")
        await pilot.pause()
        assert procs.display and not blocks.display


async def test_a_run_without_blocks_shows_no_table_and_the_key_is_remappable() -> None:
    src = FakeSource(5)
    app = LiveApp(src, interval=1.0, command=["x"], store_dir=Path(src.store))
    async with app.run_test(size=(160, 50)) as pilot:
        await _settle(app, src, pilot)
        blocks = app.query_one("#blocks-wide", ProcessTable)
        assert not blocks.display and "b: blocks" not in str(app.query_one("#header", Static).content)
        app.set_keymap({"blocks": "x"})
        await pilot.press("x")
        await pilot.pause()
        assert blocks.display and blocks.row_count == 0
        assert "none yet" in str(blocks.border_subtitle)
    from gputop_tracker.tui.live.help_text import HELP

    assert "[b]b[/b]        the code blocks table" in HELP  # the key is in `?`


def test_the_sampler_streams_the_blocks_table_only_when_blocks_changed(tmp_path: Path) -> None:
    """A real run: `blocks` messages (validated) name the blocks, at most every LIVE_PERIOD; none without blocks."""
    script = tmp_path / "blocks.py"
    script.write_text(
        "import time\nfrom gputop_tracker import block, mark\n"
        "with block('first'):\n    mark('m')\n    time.sleep(0.3)\n"
        "for _ in range(20):\n    with block('step'):\n        time.sleep(0.01)\n"
        "time.sleep(2.0)\n"  # the table is sent again within LIVE_PERIOD of the last change
    )

    def messages(argv: list[str]) -> list[channel.Message]:
        cfg = sampler.EngineConfig(mode="launch", argv=argv, interval=0.1, store=str(tmp_path), stream_samples=True)
        handle = channel.start_spawned(cfg)
        try:
            return list(handle.messages())
        finally:
            handle.close()
            handle.wait()

    msgs = messages([sys.executable, str(script)])
    tables = [m.blocks for m in msgs if isinstance(m, BlocksMessage)]
    assert tables, [type(m).__name__ for m in msgs]
    last = {b.name: b for b in tables[-1].blocks}
    assert last["first"].calls == 1 and last["first"].marks == 1 and last["step"].calls == 20
    assert all(b.open == 0 for b in tables[-1].blocks)
    n_samples = sum(isinstance(m, channel.SampleMessage) for m in msgs)
    assert len(tables) < n_samples  # not one per sample: only when blocks changed (and at most every 0.5 s)
    assert not [m for m in messages(["sleep", "0.5"]) if isinstance(m, BlocksMessage)]


async def test_the_final_report_gives_the_table_its_last_figures() -> None:
    from fakesource import make_summary

    from gputop_tracker.core.model.models import BlockDuration, BlockSummary
    from gputop_tracker.core.sampling.channel import Summary

    src, app = _blocks_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(app, src, pilot)
        await pilot.press("b")
        final = make_summary(src.samples)
        final.blocks = [
            BlockSummary(name="load data", calls=1, duration=BlockDuration(total=2.87, mean=2.87), peak_ram=2e9),
            BlockSummary(name="train epoch", calls=3, duration=BlockDuration(total=60.0, mean=20.0), marks=3),
        ]
        src.push(Summary(final))
        blocks = app.query_one("#blocks", ProcessTable)
        for _ in range(400):
            if blocks.row_count == 2:
                break
            await asyncio.sleep(0.01)
        epoch = blocks.ordered_keys[1]
        assert blocks.get_cell(epoch, "b_calls") == "3" and blocks.get_cell(epoch, "b_open") == ""
        assert blocks.get_cell(epoch, "b_total") == "1:00" and blocks.get_cell(epoch, "b_marks") == "3"
        assert "0 open" in str(blocks.border_subtitle)


async def test_the_blocks_table_takes_at_most_six_rows_and_highlights_the_running_block() -> None:
    """A block name per epoch took 16 rows at 160x50 and pushed the processes to 7 rows and the side panels below
    the fold: at most MAX_ROWS rows (the rest scroll), the running block highlighted and kept in view."""
    from gputop_tracker.core.model.models import LiveBlock, LiveBlocks
    from gputop_tracker.tui.live.blocks import CURRENT_STYLE, MAX_ROWS

    src, app = _blocks_app(3)
    t0 = 1_700_000_000.0
    epochs = [LiveBlock(name=f"epoch {i}", calls=1, duration_total=10.0, peak_ram=10**9) for i in range(15)]
    epochs.append(LiveBlock(name="epoch 15", open=1, open_since=t0 + 150, peak_ram=10**9))
    epochs.insert(0, LiveBlock(name="train", open=1, open_since=t0, peak_ram=10**9))
    src.push(BlocksMessage(LiveBlocks(blocks=epochs, names=len(epochs), open_runs=2)))
    src.push_sample(4)
    async with app.run_test(size=(160, 50)) as pilot:
        await _settle(app, src, pilot)
        await pilot.pause()
        procs, blocks = app.query_one("#procs", ProcessTable), app.query_one("#blocks-wide", ProcessTable)
        assert blocks.display and blocks.row_count == 17
        assert blocks.region.height == MAX_ROWS + 3  # header and borders
        assert procs.region.height >= 20  # the processes keep their room
        side = app.query_one("#side")
        assert side.region.bottom <= blocks.region.y  # the side panels end above the blocks table
        current = blocks.ordered_keys[-1]
        name_col = blocks.columns.index("b_name")
        assert blocks._cells[current][name_col] == ("epoch 15", CURRENT_STYLE)
        assert blocks._cells[blocks.ordered_keys[0]][name_col] == ("train", "bold")  # open, not the current one
        top = round(blocks.scroll_y)
        assert top <= 16 < top + MAX_ROWS  # scrolled to the running block


async def test_pause_freezes_the_headers_block_name_with_the_table() -> None:
    src = FakeSource(2)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))

    def header() -> str:
        return str(app.query_one("#header", Static).content)

    async with app.run_test(size=(160, 50)) as pilot:
        await _settle(app, src, pilot)
        src.push(EventMessage(_event("block_start", "epoch 1")))
        await _settle(app, src, pilot)
        assert "block epoch 1" in header()
        await pilot.press("p")
        src.push(EventMessage(_event("block_end", "epoch 1")))
        src.push(EventMessage(_event("block_start", "epoch 2")))
        await _settle(app, src, pilot)
        assert "block epoch 1" in header() and "epoch 2" not in header() and "PAUSED" in header()
        await pilot.press("p")
        await pilot.pause()
        assert "block epoch 2" in header() and "epoch 1" not in header()
