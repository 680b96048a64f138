"""The history screen: Pilot tests of every action and snapshots of list, detail and compare.

Stores are generated (tests/test_history_sessions.py): fixed timestamps, seeded figures, three unreadable
files. Times are shown in UTC here, and the store path is relative, so snapshots do not depend on the host.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from test_history_sessions import fill_store, make_session
from textual.app import App
from textual.geometry import Region
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import DataTable, Input, Label, Static

from gputop_tracker.core.model.models import Session
from gputop_tracker.core.report import render as report
from gputop_tracker.core.report.listing import COLUMNS, Row, compare_rows, filter_rows
from gputop_tracker.core.store import sessions as store
from gputop_tracker.core.store.session_files import timeline_csv
from gputop_tracker.tui.history.app import HistoryApp
from gputop_tracker.tui.history.screens.compare import CompareScreen
from gputop_tracker.tui.history.screens.confirm import ConfirmScreen
from gputop_tracker.tui.history.screens.detail import SessionDetailScreen
from gputop_tracker.tui.history.screens.export import ExportScreen
from gputop_tracker.tui.history.screens.sessions import HistoryScreen
from gputop_tracker.tui.widgets.charts import Series, TimeChart, nice_ceiling, short_time

SIZES = [(80, 24), (160, 50)]


@pytest.fixture(autouse=True)
def _utc(utc: None) -> None:
    """Times on screen in UTC: the snapshots do not depend on the machine's zone."""


@pytest.fixture
def store_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Eight sessions (the newest still running on another host) and three unreadable files, as ./store."""
    monkeypatch.chdir(tmp_path)
    fill_store(tmp_path / "store", 8)
    return Path("store")


@asynccontextmanager
async def _ready_history(
    store_dir: Path, size: tuple[int, int]
) -> AsyncIterator[tuple[HistoryApp, Pilot[None], HistoryScreen]]:
    """The history of `store_dir` run under Pilot at `size` (columns, rows), its session list loaded (_ready).
    Yields the app, its pilot and the list's screen."""
    app = HistoryApp(store_dir)
    async with app.run_test(size=size) as pilot:
        yield app, pilot, await _ready(pilot)


class _Host(App[None]):
    """Another app, empty, that opens the history as a screen of its own."""


@asynccontextmanager
async def _history_pushed_from_another_app(store_dir: Path) -> AsyncIterator[tuple[_Host, Pilot[None], Screen[Any]]]:
    """_Host run under Pilot (100×30) with the history of `store_dir` pushed over its own screen, which is
    yielded third after the app and its pilot."""
    app = _Host()
    async with app.run_test(size=(100, 30)) as pilot:
        base = app.screen
        await app.push_screen(HistoryScreen(store_dir))
        yield app, pilot, base


async def _ready(pilot: Pilot[None]) -> HistoryScreen:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, HistoryScreen)
    assert screen.loaded
    return screen


def _ids(screen: HistoryScreen) -> list[str]:
    table = screen.query_one("#history-table", DataTable)
    return [str(table.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(table.row_count)]


def _plain(widget: Static) -> str:
    content = widget.render()
    return content.plain if isinstance(content, Text) else str(content)


# --------------------------------------------------------------------------- list


async def test_list_newest_first_with_running_and_unreadable(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (_app, _pilot, screen):
        ids = _ids(screen)
        assert len(ids) == 11
        readable = ids[:8]
        assert readable == sorted(readable, key=lambda i: i[:15], reverse=True)
        rows = {r.id: r for r in screen.rows}
        assert rows[ids[0]].running and rows[ids[0]].exit == "running"
        bad = [rows[i] for i in ids[8:]]
        assert all(r.error for r in bad)
        assert {r.error.split(" (")[0] for r in bad if r.error} >= {
            "corrupt or truncated JSON",
            "written by a newer gputop-tracker",
        }
        table = screen.query_one("#history-table", DataTable)
        cell = table.get_cell(ids[8], "command")
        assert str(cell).startswith("unreadable: ")
        status = _plain(screen.query_one("#history-status", Static))
        assert "11 sessions in store" in status and "1 running" in status and "3 unreadable" in status


async def test_empty_or_missing_store(tmp_path: Path) -> None:
    app = HistoryApp(tmp_path / "nothing-here")
    async with app.run_test() as pilot:
        screen = await _ready(pilot)
        assert _ids(screen) == []
        await pilot.press("enter", "space", "c", "e", "d", "s")
        assert isinstance(app.screen, HistoryScreen)


async def test_filter_by_command_host_and_date(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (_app, pilot, screen):
        await pilot.press("slash")
        assert screen.query_one("#history-filter", Input).has_focus
        await pilot.press(*"eval")
        await pilot.pause()
        shown = [r for r in screen.rows if r.id in _ids(screen)]
        assert shown and all("eval" in r.command for r in shown)
        await pilot.press("enter")
        assert screen.query_one("#history-table", DataTable).has_focus
        assert "match the filter" in _plain(screen.query_one("#history-status", Static))

        flt = screen.query_one("#history-filter", Input)
        flt.value = "laptop 2025-01-01"
        await pilot.pause()
        assert {r.host for r in screen.shown} == {"laptop"}
        flt.value = "unreadable"
        await pilot.pause()
        assert len(screen.shown) == 3
        await pilot.press("escape")  # table focused: the first escape clears the filter
        await pilot.pause()
        assert flt.value == "" and len(_ids(screen)) == 11


def test_filter_rows_needs_every_word() -> None:
    rows = [Row.of(store.Entry("x", Path("x"), None, "boom"))]
    assert filter_rows(rows, "") == rows
    assert filter_rows(rows, "unreadable boom") == rows
    assert filter_rows(rows, "unreadable other") == []


async def test_sort_by_each_column_and_reverse(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(160, 40)) as (_app, pilot, screen):
        by_id = {r.id: r for r in screen.rows}
        screen.sort_by("ram", True)
        await pilot.pause()
        peaks = [by_id[i].peak_ram for i in _ids(screen)[:8]]
        assert peaks == sorted(peaks, reverse=True)  # type: ignore[type-var]
        assert all(by_id[i].error for i in _ids(screen)[8:])  # unreadable stay last
        await pilot.press("r")
        peaks = [by_id[i].peak_ram for i in _ids(screen)[:8]]
        assert peaks == sorted(peaks)  # type: ignore[type-var]
        await pilot.press("s")  # next column: GPU memory, largest first
        assert screen.sort_key == "gpu" and screen.sort_reverse
        gpu = [by_id[i].peak_gpu or -1.0 for i in _ids(screen)[:8]]
        assert gpu == sorted(gpu, reverse=True)
        await pilot.click("#history-table", offset=(30, 0))  # the header of the command column
        await pilot.pause()
        assert screen.sort_key == "command" and not screen.sort_reverse
        commands = [by_id[i].command.lower() for i in _ids(screen)[:8]]
        assert commands == sorted(commands)
        for key in ("start", "duration", "exit", "cpu", "gpu_util", "host"):
            screen.sort_by(key, False)
            await pilot.pause()
            assert len(_ids(screen)) == 11


# --------------------------------------------------------------------------- detail


async def _enter_on(pilot: Pilot[None], screen: HistoryScreen, row: Row) -> None:
    """The cursor moved to `row` of the session list, then Enter."""
    table = screen.query_one("#history-table", DataTable)
    table.move_cursor(row=table.get_row_index(row.id))
    await pilot.press("enter")
    await pilot.pause()


async def _open_detail(pilot: Pilot[None], screen: HistoryScreen, row: Row) -> tuple[SessionDetailScreen, Session]:
    """Enter on `row`: its detail screen, asserted shown, and its session as saved, asserted to have a summary."""
    await _enter_on(pilot, screen, row)
    detail = pilot.app.screen
    assert isinstance(detail, SessionDetailScreen)
    session = store.load(row.entry.path).session
    assert session is not None and session.summary is not None
    return detail, session


async def test_open_detail_with_charts_summary_and_processes(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(160, 50)) as (app, pilot, screen):
        gpu_row = next(r for r in screen.shown if r.peak_gpu)
        detail, session = await _open_detail(pilot, screen, gpu_row)
        charts = {c.id: c for c in detail.query(TimeChart)}
        assert set(charts) == {"chart-ram", "chart-cpu", "chart-gpu-memory", "chart-gpu-util"}
        ram = charts["chart-ram"].render().plain
        assert "GB┤" in ram and "0s" in ram and "combined" in ram and "descendants" in ram
        assert "%┤" in charts["chart-gpu-util"].render().plain
        await pilot.press("2")
        await pilot.pause()
        text = detail.query_one(".history-report", Static)
        assert _plain(text).strip() == report.to_text(session.summary, max_processes=50).strip()
        await pilot.press("3")
        await pilot.pause()
        procs = detail.query_one("#processes-table", DataTable)
        assert procs.row_count == len(session.summary.processes)
        biggest = max(session.summary.processes, key=lambda p: p.peak_rss)
        assert str(procs.coordinate_to_cell_key((0, 0)).row_key.value) == str(biggest.pid)
        await pilot.press("escape")
        assert app.screen is screen


async def test_open_unreadable_notifies_and_does_not_crash(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (app, pilot, screen):
        await pilot.press("ctrl+end", "enter", "space", "e")
        await pilot.pause()
        assert app.screen is screen
        assert screen.marked == []
        messages = [n.message for n in app._notifications]
        assert any("unreadable" in m for m in messages)


def test_detail_of_unreadable_entry_shows_reason(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text("{")
    detail = SessionDetailScreen(store.load(p))
    assert detail.entry.session is None and detail.entry.error


async def test_chart_axes_units_time_and_empty_chart() -> None:
    class Charts(App[None]):
        CSS = "TimeChart { width: 50; height: 8; }"

        def compose(self):  # type: ignore[no-untyped-def]
            yield TimeChart("RAM", [0.0, 60.0, 120.0], [Series("combined", [1e9, 3.2e9, 2e9], "green")], id="ram")
            yield TimeChart("CPU", [0.0, 30.0], [Series("tree", [50.0, None], "blue")], unit="percent", y_top=100)
            yield TimeChart("none", [], [Series("x", [], "red")], id="empty")

    app = Charts()
    async with app.run_test(size=(60, 30)) as pilot:
        await pilot.pause()
        ram = app.query_one("#ram", TimeChart).render().plain.splitlines()
        assert ram[0].startswith("RAM  ━ combined")
        assert ram[1].lstrip().startswith("5 GB┤") and ram[-3].lstrip().startswith("0┤")  # a nice top, zero below
        assert ram[-2].strip().startswith("└─")
        assert ram[-1].split() == ["0s", "1m", "2m"]
        assert any(ch not in " ⠀" for line in ram[1:-2] for ch in line[5:])  # something is drawn
        cpu = app.query(TimeChart)[1].render().plain.splitlines()
        assert cpu[1].startswith("100%┤") and cpu[-1].split() == ["0s", "15s", "30s"]
        assert "no samples recorded" in app.query_one("#empty", TimeChart).render().plain
    assert nice_ceiling(3.1) == 5 and nice_ceiling(2.4) == 2.5 and nice_ceiling(100) == 100
    assert nice_ceiling(0) == 1
    assert [short_time(s) for s in (0, 42, 300, 750, 3900)] == ["0s", "42s", "5m", "12m30s", "1h05m"]


# --------------------------------------------------------------------------- compare


async def test_mark_two_and_compare(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(160, 50)) as (app, pilot, screen):
        await pilot.press("down", "space", "space")  # marks rows 2 and 3; the cursor moves down after each
        assert len(screen.marked) == 2
        table = screen.query_one("#history-table", DataTable)
        assert str(table.get_cell(screen.marked[0], "mark")) == "✓"
        await pilot.press("c")
        await pilot.pause()
        cmp = app.screen
        assert isinstance(cmp, CompareScreen)
        a, b = cmp.a.session, cmp.b.session
        assert a is not None and b is not None and a.summary and b.summary
        assert a.meta.start_time <= b.meta.start_time  # A is the earlier run
        ct = cmp.query_one("#compare-table", DataTable)
        rows = {str(ct.coordinate_to_cell_key((i, 0)).row_key.value): i for i in range(ct.row_count)}
        peak = ct.get_row_at(rows["peak RAM (combined)"])
        better = "B" if b.summary.max_ram.combined.total_rss < a.summary.max_ram.combined.total_rss else "A"
        assert str(peak[5]) == better
        assert str(peak[3]).startswith("+" if better == "A" else "−")
        assert cmp.query_one("#compare-combined_total", TimeChart)
        await pilot.press("x")  # swap A and B
        await pilot.pause()
        assert cmp.a.session is b
        await pilot.press("escape")
        assert app.screen is screen


async def test_compare_needs_two_marks_and_third_mark_replaces_oldest(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (app, pilot, screen):
        await pilot.press("c")
        assert app.screen is screen
        assert any("mark two" in n.message for n in app._notifications)
        first = _ids(screen)[0]
        await pilot.press("space", "space", "space")
        assert len(screen.marked) == 2 and first not in screen.marked
        await pilot.press("up", "space")  # unmark
        assert len(screen.marked) == 1
        await pilot.press("c")  # one mark + the cursor row
        await pilot.pause()
        assert isinstance(app.screen, CompareScreen)


def test_compare_rows_differences_and_verdicts() -> None:
    from gputop_tracker.core.model.models import ResourceUsage

    a = ResourceUsage.model_validate(make_session(1, peak_ram=4e9, duration=100, n_gpus=1)["summary"])
    b = ResourceUsage.model_validate(make_session(2, peak_ram=3e9, duration=200, n_gpus=0)["summary"])
    rows = {r[0]: r for r in compare_rows(a, b)}
    assert rows["peak RAM (combined)"][1:] == ("4.00 GB", "3.00 GB", "−1.00 GB", "−25%", "B")
    assert rows["wall time"][3:] == ("+1m 40.0s", "+100%", "A")
    assert rows["peak GPU memory"][2:] == ("-", "-", "", "")  # B had no GPU: nothing to compare
    assert rows["exit code"][5] == "same"


# --------------------------------------------------------------------------- export and delete


async def test_export_json_and_csv_to_typed_path(store_dir: Path, tmp_path: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (app, pilot, screen):
        row = screen.shown[1]
        await pilot.press("down", "e")
        await pilot.pause()
        assert isinstance(app.screen, ExportScreen)
        path_input = app.screen.query_one("#export-path", Input)
        assert path_input.value.endswith(f"{row.id}.json")
        path_input.value = str(tmp_path / "out" / "run.json")
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen
        data = json.loads((tmp_path / "out" / "run.json").read_text())
        assert data["meta"]["id"] == row.id and data["timeline"]["rows"]

        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#export-path", Input).value = str(tmp_path / "run.csv")
        await pilot.click("#export-ok")
        await pilot.pause()
        full = store.load(row.entry.path).session
        assert full is not None
        text = (tmp_path / "run.csv").read_bytes().decode()
        assert text == timeline_csv(full)
        header = next(csv.reader(io.StringIO(text)))
        assert header[:3] == ["time", "elapsed", "combined_total"]


async def test_export_to_bad_path_shows_error_and_cancel(store_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    async with _ready_history(store_dir, size=(120, 30)) as (app, pilot, screen):
        await pilot.press("e")
        await pilot.pause()
        dialog = app.screen
        dialog.query_one("#export-path", Input).value = str(tmp_path / "a-file" / "x.json")
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog
        assert "cannot export" in str(dialog.query_one("#export-error", Label).render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen


async def test_delete_asks_first(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (app, pilot, screen):
        row = screen.shown[2]
        await pilot.press("down", "down", "d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert app.screen is screen and row.entry.path.exists()
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("enter")  # the focused button is Cancel
        await pilot.pause()
        assert row.entry.path.exists()
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert not row.entry.path.exists()
        assert row.id not in _ids(screen) and len(_ids(screen)) == 10


async def test_delete_running_refused_and_unreadable_allowed(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (app, pilot, screen):
        running = screen.shown[0]
        assert running.running
        await pilot.press("d")
        await pilot.pause()
        assert app.screen is screen and running.entry.path.exists()
        bad = screen.shown[-1]
        await pilot.press("ctrl+end", "d")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert not bad.entry.path.exists()


async def test_reload_picks_up_new_sessions(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (_app, pilot, screen):
        store.save_session(store_dir, make_session(50))
        await pilot.press("f5")
        await _ready(pilot)
        assert len(_ids(screen)) == 12


async def test_pushed_from_another_app_escape_returns(store_dir: Path) -> None:
    async with _history_pushed_from_another_app(store_dir) as (app, pilot, base):
        screen = await _ready(pilot)
        assert len(_ids(screen)) == 11
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is base


# --------------------------------------------------------------------------- snapshots


def _press_after_load(*keys: str):  # type: ignore[no-untyped-def]
    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        for k in keys:
            await pilot.press(k)
            await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_list(snap_compare, store_dir: Path, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(HistoryApp(store_dir), terminal_size=size, run_before=_press_after_load("down", "space"))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_detail(snap_compare, store_dir: Path, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    # the fifth row has two GPUs: every chart is drawn, with one line per GPU
    keys = ("down", "down", "down", "down", "enter")
    assert snap_compare(HistoryApp(store_dir), terminal_size=size, run_before=_press_after_load(*keys))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_compare(snap_compare, store_dir: Path, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    # the same training script at batch 64 and 128 (the two oldest sessions)
    keys = ("ctrl+end", "up", "up", "up", "up", "space", "space", "c")
    assert snap_compare(HistoryApp(store_dir), terminal_size=size, run_before=_press_after_load(*keys))


async def test_large_store_is_read_in_a_worker(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop_tracker.tui.history.screens import sessions as history

    monkeypatch.setattr(history, "SYNC_LOAD_MAX", 5)  # 11 files: past the limit
    async with _ready_history(store_dir, size=(120, 30)) as (_app, _pilot, screen):
        assert len(_ids(screen)) == 11 and screen.load_seconds > 0


def test_cli_entry_point_runs_the_history_app(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop_tracker.tui import app as tui_app

    seen: list[Path] = []

    def fake_run(self: HistoryApp) -> None:
        seen.append(self.store_dir)

    monkeypatch.setattr(HistoryApp, "run", fake_run)
    assert tui_app.run_history(store_dir) == 0
    assert seen == [store_dir]


async def test_detail_headline_and_output_tab(store_dir: Path) -> None:
    from gputop_tracker.tui.history.parts import headline
    from gputop_tracker.tui.live.output_pane import OutputPane

    async with _ready_history(store_dir, size=(160, 50)) as (app, pilot, screen):
        row = next(r for r in screen.shown if r.peak_gpu and r.error is None)
        row.entry.path.with_name(f"{row.id}.output.log").write_text(
            "Traceback (most recent call last):\n  10%|#\r 100%|##########|\nRuntimeError: \x1b[31mboom\x1b[0m\n"
        )
        detail, session = await _open_detail(pilot, screen, row)
        line = _plain(detail.query_one(".history-headline", Static))
        assert line == headline(session).plain
        wall = session.summary.compute_time.time
        assert f"{wall:.3f} s" in line and "peak RAM " in line and "peak GPU " in line
        assert f"CPU {session.summary.cpu_time.total:.3f} s" in line
        assert line.startswith("exit ") or line.startswith("killed") or line.startswith("running")
        await pilot.press("4")
        await pilot.pause()
        out = detail.query_one("#history-output", OutputPane)
        assert out.lines == ["Traceback (most recent call last):", " 100%|##########|", "RuntimeError: boom"]
        await pilot.press("escape")
        await pilot.pause()
        # a session without a saved output says so
        other = next(r for r in screen.shown if r.error is None and r.id != row.id)
        await _enter_on(pilot, screen, other)
        assert "no output saved" in app.screen.query_one("#history-output", OutputPane).lines[0]


async def test_start_times_have_seconds(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(160, 50)) as (_app, _pilot, screen):
        table = screen.query_one("#history-table", DataTable)
        start = str(table.get_cell_at((0, 1)))
        assert len(start.split(":")) == 3, start


async def test_q_in_history_opened_from_another_app_goes_back(store_dir: Path) -> None:
    async with _history_pushed_from_another_app(store_dir) as (app, pilot, base):
        await _ready(pilot)
        await pilot.press("q")
        await pilot.pause()
        assert app.screen is base and app.is_running


def test_a_short_run_reads_its_duration_in_the_list_not_0s() -> None:
    """A 0.023 s run showed as `0s` in the history list (its detail said 0.023 s)."""
    from gputop_tracker.tui.history.parts import list_duration

    assert list_duration(0.023) == "0.023s" and list_duration(0.0004) == "0.000s"
    assert list_duration(2.5) == "2.5s" and list_duration(754) == "12m34s"


# --------------------------------------------------------------------------- simulated GPUs, per-GPU means, keys


def _simulated_session(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    s = make_session(5, n_gpus=2, duration=310, command=["python3", "demo.py"])
    for g in s["summary"]["gpus"]:
        g["simulated"] = True
    s["summary"]["gpu_utilization"]["gpu_percentages"]["mean_sum_percent"] = 146.0
    s["summary"]["blocks"] = [{"name": "epoch", "calls": 2, "duration": {"total": 10.0}, "peak_ram": 1e9}]
    store.save_session(tmp_path / "store", s)
    return tmp_path / "store", s


async def test_simulated_gpus_are_labelled_and_utilization_is_per_gpu(tmp_path: Path) -> None:
    """A demo's simulated GPUs are said so in the list, the headline and the charts; the mean utilization of
    two GPUs is per GPU with ×2, never their sum (146 %) unlabelled."""
    store_dir, _ = _simulated_session(tmp_path)
    row = Row.of(store.list_entries(store_dir)[0])
    assert row.simulated and row.n_gpus == 2 and row.gpu_util == 73.0
    assert filter_rows([row], "simulated") == [row]
    async with _ready_history(store_dir, size=(160, 40)) as (app, pilot, screen):
        table = screen.query_one("#history-table", DataTable)
        cells = [str(c) for c in table.get_row_at(0)]
        assert "[sim] python3 demo.py" in cells and "73%×2" in cells, cells
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert "SIMULATED" in _plain(detail.query_one(".history-headline", Static))
        titles = [c.title for c in detail.query(TimeChart)]
        assert "GPU memory (tree, simulated)" in titles and "GPU utilization (per GPU, simulated)" in titles
        await pilot.press("5")  # the Blocks tab by keyboard
        await pilot.pause()
        from textual.widgets import TabbedContent

        assert detail.query_one(TabbedContent).active == "blocks"
        await pilot.press("1")
        await pilot.pause()
        assert detail.query_one(TabbedContent).active == "charts"


async def test_history_columns_are_fitted_again_on_resize(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (_app, pilot, screen):
        table = screen.query_one("#history-table", DataTable)
        before = table.columns["command"].width
        await pilot.resize_terminal(150, 30)
        await pilot.pause()
        await pilot.pause()
        assert table.columns["command"].width > before


async def test_home_and_end_move_the_cursor_in_the_list(store_dir: Path) -> None:
    async with _ready_history(store_dir, size=(120, 30)) as (_app, pilot, screen):
        table = screen.query_one("#history-table", DataTable)
        await pilot.press("down", "down", "down", "home")
        await pilot.pause()
        assert table.cursor_row == 0
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_row == table.row_count - 1


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 30)])
async def test_the_list_tells_sessions_apart_on_an_ordinary_terminal(tmp_path: Path, size: tuple[int, int]) -> None:
    """Fifty `python3 -c x=bytearray(N)` runs at 80 columns: every command read "python3 -c x=by…" (the
    command got 16 cells, at 120 columns too), and the table scrolled sideways for the columns past the edge.
    The least needed columns (host, GPU util, mean CPU; the GPU's peak when no session has one) make room."""
    for i in range(5):
        command = ["python3", "-c", f"x = bytearray({i + 1} * 1000000)"]
        store.save_session(tmp_path, make_session(i, n_gpus=0, command=command))
    app = HistoryApp(tmp_path)
    async with app.run_test(size=size) as pilot:
        screen = await _ready(pilot)
        table = screen.query_one("#history-table", DataTable)
        assert table.virtual_size.width <= table.size.width, "the list scrolls sideways"
        strips = table.render_lines(Region(0, 0, table.size.width, table.size.height))
        shown = "\n".join("".join(seg.text for seg in strip) for strip in strips)
        for i in range(5):
            assert f"python3 -c x = bytearray({i + 1}" in shown, shown
        assert {"start", "command", "duration", "exit", "ram"} <= {str(key.value) for key in table.columns}
        await pilot.resize_terminal(200, size[1])  # wide enough again: every column is back
        await pilot.pause()
        assert [str(key.value) for key in table.columns] == [column.key for column in COLUMNS]


@pytest.mark.parametrize("size", [(80, 24), (60, 20)])
async def test_compare_opens_at_its_top_on_a_short_terminal(store_dir: Path, size: tuple[int, int]) -> None:
    """At 80x24 the compare screen opened scrolled down: A's command line, the one that says which run A is,
    was above the screen's edge."""
    app = HistoryApp(store_dir)
    async with app.run_test(size=size) as pilot:
        await _ready(pilot)
        await pilot.press("down", "space", "space", "c")
        await pilot.pause()
        await pilot.pause()
        cmp = app.screen
        assert isinstance(cmp, CompareScreen)
        heads = cmp.query(".history-title").results()
        assert all(cmp.region.contains_region(h.region) for h in heads), [h.region for h in heads]
        assert cmp.scroll_y == 0
        await pilot.press("x")  # swapped, it opens at its top again
        await pilot.pause()
        await pilot.pause()
        assert cmp.scroll_y == 0


@pytest.mark.parametrize("size", [(80, 24), (60, 20), (160, 40)])
async def test_a_long_command_leaves_the_start_and_the_id_in_the_title(tmp_path: Path, size: tuple[int, int]) -> None:
    """A command of 30 long arguments filled the detail's two title lines: its start, host and id were cut off
    with no sign that anything was."""
    command = ["python3", "train_forever.py", *(f"--flag{i}={'v' * 20}" for i in range(30))]
    session = make_session(1, command=command)
    store.save_session(tmp_path, session)
    app = HistoryApp(tmp_path)
    async with app.run_test(size=size) as pilot:
        await _ready(pilot)
        await pilot.press("enter")
        await pilot.pause()
        await pilot.pause()
        assert isinstance(app.screen, SessionDetailScreen)
        title = app.screen.query_one(".history-title")
        strips = title.render_lines(Region(0, 0, title.region.width, title.region.height))  # padding included
        shown = "".join("".join(seg.text for seg in strip) for strip in strips)
        assert session["meta"]["id"] in shown and "train_forever.py --flag0=" in shown and "…" in shown, shown


@pytest.mark.parametrize("key", ["d", "e"])
async def test_the_delete_and_export_dialogs_wrap_on_a_narrow_terminal(store_dir: Path, key: str) -> None:
    """At 60x15 the delete dialog cut its lines at its edge, "this cannot be undone" included, and the export
    dialog its help ("Path (ending in .csv: timeline as CSV; otherwise")."""
    app = HistoryApp(store_dir)
    async with app.run_test(size=(60, 20)) as pilot:
        await _ready(pilot)
        await pilot.press("down", "down", key)
        await pilot.pause()
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen if key == "d" else ExportScreen)
        dialog = app.screen.query_one(".history-dialog")
        for label in dialog.query(Label).results():
            assert label.region.right <= dialog.content_region.right, (str(label.render()), label.region)
        if key == "d":
            shown = "".join(str(label.render()) for label in dialog.query(Label).results())
            assert "cannot be undone" in shown
        await pilot.press("escape")
