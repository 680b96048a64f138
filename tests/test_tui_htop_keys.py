"""htop's habits in the live view: P/M/T sort, MEM % and TIME+ columns, Space tags processes and k signals the
tagged ones; the signal dialog names each by its whole command and has no default (Pilot, the fake source)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fakesource import MAIN_PID, TREE, FakeSource, make_sample
from test_tui import make_app
from textual.widgets import Label

from gputop_tracker.core.sampling.channel import SampleMessage
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.live.process_rows import TAGGED, time_plus
from gputop_tracker.tui.live.screens.signal_dialog import SignalScreen
from gputop_tracker.tui.widgets.proctable import ProcessTable

LONG = ["/usr/bin/python3", "/home/me/project/src/worker.py", "--config", "configs/large.yaml", "--role", "trainer"]


async def settle(app: LiveApp, pilot: object, n: int) -> None:
    for _ in range(500):
        if app.n_messages >= n:
            break
        await asyncio.sleep(0.01)
    await pilot.pause()  # type: ignore[attr-defined]


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    ps = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(3)]
    yield ps
    for p in ps:
        p.kill()
        p.wait()


def with_sleepers(sleepers: list[subprocess.Popen[bytes]], n: int = 3) -> FakeSource:
    tree = [*TREE, *((p.pid, MAIN_PID, "python3", 10, 1) for p in sleepers)]
    src = FakeSource(0, tree=tree)
    for i in range(n):
        msg = SampleMessage(make_sample(i, tree=tree))
        for p in msg.sample.processes:
            if p.pid in {s.pid for s in sleepers}:
                p.cmdline = [*LONG, "--rank", str(p.pid)]
        src.push(msg)
    return src


def test_time_plus_is_htops() -> None:
    assert time_plus(83.456) == "1:23.46" and time_plus(0.0) == "0:00.00" and time_plus(7509) == "2h05:09"


async def test_p_m_t_sort_and_the_mem_and_time_columns() -> None:
    src = FakeSource(4)
    app = make_app(src)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot, src.n_scripted)
        await pilot.press("t")  # flat: the sort orders every row
        s = src.samples[-1]
        table = app.query_one("#procs", ProcessTable)
        main = next(p for p in s.processes if p.pid == MAIN_PID)
        assert table.get_cell(MAIN_PID, "mem") == f"{100 * main.rss / s.host.memory_total:.1f}"
        assert table.get_cell(MAIN_PID, "time") == time_plus(main.cpu_seconds)
        for key, sort, value in (
            ("P", "cpu", lambda p: p.cpu_percent),
            ("M", "mem", lambda p: p.rss),
            ("T", "time", lambda p: p.cpu_seconds),
        ):
            await pilot.press(key)
            await pilot.pause()
            assert app.sort_key == sort and not app.sort_reverse
            by_pid = {p.pid: value(p) for p in s.processes}
            assert [by_pid[k] for k in table.ordered_keys] == sorted(by_pid.values(), reverse=True)
            assert "▼" in table.column_label(sort)
        await pilot.press("T")  # again: the other way
        assert app.sort_key == "time" and app.sort_reverse


async def test_space_tags_and_k_signals_the_tagged(sleepers: list[subprocess.Popen[bytes]]) -> None:
    src = with_sleepers(sleepers)
    app = make_app(src)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(app, pilot, src.n_scripted)
        table = app.query_one("#procs", ProcessTable)
        table.focus()
        table.move_cursor(table.ordered_keys.index(sleepers[0].pid))
        await pilot.press("space")  # tags it, the cursor goes down to the next: tagged too
        await pilot.press("space")
        await pilot.pause()
        tagged = {sleepers[0].pid, sleepers[1].pid}
        assert app.view_keys.tagged == tagged and table.cursor_key == sleepers[2].pid
        assert table._cells[sleepers[0].pid][0][1] == TAGGED  # the row shows it
        await pilot.press("k")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SignalScreen) and {t[0] for t in screen.targets} == tagged
        shown = " ".join(str(label.content) for label in screen.query(".signal-command").results(Label))
        assert f"{' '.join(LONG)} --rank {sleepers[1].pid}" in shown  # every command, whole
        await pilot.press("t")
        await pilot.pause()
        assert app.view_keys.tagged == set()  # sent: the tags go
        app.exit()
    assert sleepers[0].wait(timeout=5) == -signal.SIGTERM and sleepers[1].wait(timeout=5) == -signal.SIGTERM
    assert sleepers[2].poll() is None


async def test_the_signal_dialog_shows_the_whole_command_and_enter_sends_nothing(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    src = with_sleepers(sleepers[:1])
    app = make_app(src)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot, src.n_scripted)
        table = app.query_one("#procs", ProcessTable)
        table.move_cursor(table.ordered_keys.index(sleepers[0].pid))
        await pilot.press("k")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SignalScreen)
        label = screen.query_one("#signal-command", Label)
        whole = f"{' '.join(LONG)} --rank {sleepers[0].pid}"
        assert str(label.content) == whole  # it was cut at 70 characters: `worker.py --rol…`
        assert label.size.height >= 2 and label.size.width <= 80  # wrapped inside the dialog
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen and sleepers[0].poll() is None  # no destructive default
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is not screen
    assert sleepers[0].poll() is None


def test_a_lower_bound_of_nothing_is_not_shown_as_one() -> None:
    """`≥0 B` said nothing: a zombie holds no memory (0 B), a live process's is not read yet (-)."""
    from gputop_tracker.tui.live.process_rows import memory_cell

    p = make_sample(2).processes[1].model_copy(update={"mem_bound": True})
    assert memory_cell(p, 261_789_000) == "≥261 MB"
    assert memory_cell(p, 0) == "-"
    assert memory_cell(p.model_copy(update={"rss": 0}), 0) == "0 B"
    assert memory_cell(p.model_copy(update={"mem_bound": False}), 0) == "0 B"


def test_python_c_without_args_keeps_the_start_of_its_code() -> None:
    """`python -c CODE` in a short column read as the tail of the code (the middle of a statement)."""
    from gputop_tracker.tui.live.process_rows import command_text

    code = "import time; x = [i * i for i in range(10)]; time.sleep(100)"
    assert command_text("python3", ("python3", "-c", code), 30) == "python3 -c import time; x = […"
    assert command_text("python3", ("python3", "-c", code, "shard-7"), 20) == "python3 -c … shard-7"  # its ARGS
