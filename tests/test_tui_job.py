"""In the views: the live view's job panel (fractions of the request, live), the history's line of
a job session, and the history list grouped by SLURM job (array tasks, nodes). Pilot tests and snapshots;
fake data only (tests/fakesource.py, generated sessions)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakesource import FakeSource, fake_job
from job_sessions import fill_job_store
from rich.text import Text
from test_tui_snapshots import settled
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from gputop_tracker.tui.history.app import HistoryApp
from gputop_tracker.tui.history.screens.detail import SessionDetailScreen
from gputop_tracker.tui.history.screens.sessions import HistoryScreen
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.widgets.job_panel import JobPanel

SIZES = [(80, 24), (120, 40), (160, 50)]
GIB = 2**30
MB = 10**6


def _plain(widget: Static) -> str:
    content = widget.render()
    return content.plain if isinstance(content, Text) else str(content)


def live(job: dict[str, Any] | None, *, finished: bool = False, n: int = 20) -> LiveApp:
    src = FakeSource(n, finished=finished, job=job)
    return LiveApp(src, interval=1.0, command=["python3", "train.py", "--epochs", "3"], store_dir=Path(src.store))


async def _drawn(app: LiveApp, pilot: Pilot[None]) -> None:
    src = app.source
    assert isinstance(src, FakeSource)
    for _ in range(3000):
        if app.n_messages >= src.n_scripted:
            break
        await asyncio.sleep(0.01)
    await pilot.pause()


# --------------------------------------------------------------------------- live view


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_live_job(snap_compare: Any, size: tuple[int, int]) -> None:
    app = live(fake_job())
    assert snap_compare(app, terminal_size=size, run_before=settled(app))


def test_snapshot_final_job_cgroup_limit(snap_compare: Any) -> None:
    """The job's cgroup allows less than SLURM's --mem: memory is a fraction of the cgroup's limit. Tall
    enough for the whole side column: where it scrolls, its scroll bar drew a row apart on a loaded machine."""
    app = live(fake_job(cgroup_mem_bytes=4 * GIB), finished=True)
    assert snap_compare(app, terminal_size=(160, 56), run_before=settled(app))


async def test_no_request_no_panel() -> None:
    app = live(None)
    async with app.run_test(size=(160, 50)) as pilot:
        await _drawn(app, pilot)
        assert app.progress is not None and app.progress.slurm is None
        assert not app.query_one("#job", JobPanel).display


async def test_panel_follows_the_running_summary() -> None:
    """Each running summary redraws the bars: the time used of the 2 h limit grows with every sample."""
    app = live(fake_job(time_limit_s=60), n=10)
    async with app.run_test(size=(160, 50)) as pilot:
        await _drawn(app, pilot)
        panel = app.query_one("#job", JobPanel)
        assert panel.display and panel.border_title == "job 4242 on gpu-node-07"
        first = _plain(panel)
        assert "memory" in first and "of 8 CPUs" in first and "0:00:09/0:01:00" in first and "15%" in first
        src = app.source
        assert isinstance(src, FakeSource)
        for _ in range(21):
            src.push_sample()
        await _drawn(app, pilot)
        later = _plain(panel)
        assert "0:00:30/0:01:00" in later and " 50% " in later
        assert app.progress is not None and app.progress.efficiency is not None
        assert app.progress.efficiency.time == pytest.approx(0.5)


async def test_narrow_panel_is_one_line() -> None:
    app = live(fake_job())
    async with app.run_test(size=(80, 24)) as pilot:
        await _drawn(app, pilot)
        line = _plain(app.query_one("#job", JobPanel))
        assert "\n" not in line and line.startswith("job 4242") and "mem" in line and "util" in line
        assert len(line) <= 78


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_an_array_task_is_named_as_squeue_names_it(size: tuple[int, int]) -> None:
    """Task 3 of array 77 runs as job 4242: both the panel's title (wide) and its one line (narrow) say 77_3."""
    job = {**fake_job(), "array_job_id": "77", "array_task_id": "3"}
    app = live(job)
    async with app.run_test(size=size) as pilot:
        await _drawn(app, pilot)
        panel = app.query_one("#job", JobPanel)
        shown = f"{panel.border_title or ''}\n{_plain(panel)}"
        assert "job 77_3" in shown and "4242" not in shown


# --------------------------------------------------------------------------- history


@pytest.fixture(autouse=True)
def _utc(utc: None) -> None:
    """Times on screen in UTC: the snapshots do not depend on the machine's zone."""


@pytest.fixture
def job_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three plain sessions, five tasks of array 77 (peaks 100–500 MB, task 4 failed) and two nodes of job 88."""
    monkeypatch.chdir(tmp_path)
    fill_job_store(tmp_path / "store")
    return Path("store")


async def _ready(pilot: Pilot[None]) -> HistoryScreen:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, HistoryScreen) and screen.loaded
    return screen


def _ids(screen: HistoryScreen) -> list[str]:
    table = screen.query_one("#history-table", DataTable)
    return [str(table.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(table.row_count)]


def _cursor_to(screen: HistoryScreen, row_id: str) -> None:
    table = screen.query_one("#history-table", DataTable)
    table.move_cursor(row=table.get_row_index(row_id))


async def test_jobs_grouped_with_n_and_max(job_store: Path) -> None:
    app = HistoryApp(job_store)
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await _ready(pilot)
        ids = _ids(screen)
        assert len(ids) == 3 + 2 and "job:77" in ids and "job:88" in ids
        rows = {r.id: r for r in screen.shown}
        array, nodes = rows["job:77"], rows["job:88"]
        assert array.peak_ram == 500 * MB and array.exit == "1 fail" and len(array.members or []) == 5
        assert nodes.peak_ram == 2 * GIB and nodes.host == "2 nodes" and nodes.exit == "0"
        table = screen.query_one("#history-table", DataTable)
        assert str(table.get_cell("job:77", "command")).startswith("▶ job 77 · 5 tasks · python sweep")
        assert str(table.get_cell("job:88", "command")).startswith("▶ job 88 · 2 nodes · python sweep")
        assert "2 jobs grouped" in _plain(screen.query_one("#history-status", Static))
        # ⏎ opens the group: its sessions follow it, each named by its task; ⏎ again closes it
        _cursor_to(screen, "job:77")
        await pilot.press("enter")
        await pilot.pause()
        ids = _ids(screen)
        at = ids.index("job:77")
        members = ids[at + 1 : at + 6]
        assert all(str(table.get_cell(m, "command")).startswith("  └ task ") for m in members)
        assert str(table.get_cell("job:77", "command")).startswith("▼ job 77")
        assert app.screen is screen  # a group row opens in place, not a detail screen
        # a session of the job opens its detail
        _cursor_to(screen, members[0])
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SessionDetailScreen)
        await pilot.press("escape")
        await pilot.pause()
        _cursor_to(screen, "job:77")
        await pilot.press("enter")
        await pilot.pause()
        assert len(_ids(screen)) == 5


async def test_ungroup_filter_by_job_and_group_rows_refuse_session_actions(job_store: Path) -> None:
    app = HistoryApp(job_store)
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await _ready(pilot)
        await pilot.press("g")  # every session on its own
        await pilot.pause()
        assert len(_ids(screen)) == 10 and not any(i.startswith("job:") for i in _ids(screen))
        await pilot.press("g")
        await pilot.pause()
        _cursor_to(screen, "job:88")
        await pilot.press("j")  # only job 88's sessions, opened
        await pilot.pause()
        assert screen.query_one("#history-filter", Input).value == "job:88"
        ids = _ids(screen)
        assert ids[0] == "job:88" and len(ids) == 3
        await pilot.press("j")  # again: every session
        await pilot.pause()
        assert screen.query_one("#history-filter", Input).value == "" and len(_ids(screen)) == 5
        _cursor_to(screen, "job:77")
        for key in ("space", "e", "d"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen is screen and not screen.marked
        assert len(list(job_store.glob("*.json"))) == 10  # nothing deleted
        # deleting one task of the array: the job's row now sums up four
        await pilot.press("enter")
        await pilot.pause()
        task5 = _ids(screen)[_ids(screen).index("job:77") + 1]
        _cursor_to(screen, task5)
        await pilot.press("d", "y")
        await pilot.pause()
        rows = {r.id: r for r in screen.shown}
        assert task5 not in rows and len(rows["job:77"].members or []) == 4
        assert rows["job:77"].peak_ram == 400 * MB


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_history_jobs(snap_compare: Any, job_store: Path, size: tuple[int, int]) -> None:
    async def run_before(pilot: Pilot[None]) -> None:
        screen = await _ready(pilot)
        _cursor_to(screen, "job:77")
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(HistoryApp(job_store), terminal_size=size, run_before=run_before)


async def test_detail_of_a_job_session_says_how_much_of_the_request(job_store: Path) -> None:
    app = HistoryApp(job_store)
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await _ready(pilot)
        _cursor_to(screen, "job:88")
        await pilot.press("enter", "down", "enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, SessionDetailScreen)
        line = _plain(detail.query_one("#history-job", Static))
        assert line.startswith("job 88 on gpu-node-0") and "(node " in line and "of 2)" in line
        assert "asked mem 4.29 GB, 2 CPUs, 1 GPU, time 1:00:00" in line and "memory " in line
        # a session outside a job has no such line
        await pilot.press("escape", "g")
        await pilot.pause()
        plain = next(r for r in screen.shown if not r.job)
        _cursor_to(screen, plain.id)
        await pilot.press("enter")
        await pilot.pause()
        assert not app.screen.query("#history-job")


# --------------------------------------------------------------------------- the real thing


def _tmux(socket: str, *args: str) -> subprocess.CompletedProcess[str]:
    """tmux on a server of our own: its window keeps the size we ask, whatever other sessions there are."""
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30)


def _wait_screen(socket: str, pattern: str, timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = _tmux(socket, "capture-pane", "-p", "-t", "job").stdout
        m = re.search(pattern, text, re.MULTILINE)
        if m:
            return m
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not on screen after {timeout} s:\n{text}")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_real_live_view_shows_the_request_used(tmp_path: Path) -> None:
    """`gputop-track --request … -- CMD` in a terminal: the job panel's memory bar is the real tree's peak of
    the 1 GiB asked (200 MB held: ~19 %) and its time bar moves on while the command runs."""
    script = tmp_path / "hold.py"
    go = tmp_path / "go"  # held until the test has read the screen, not for a fixed time
    script.write_text(
        "import os, sys, time\nheld = b'x' * 200_000_000\ndeadline = time.monotonic() + 120\n"
        "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n    time.sleep(0.05)\n"
    )
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--request", "mem=1G,cpus=1,time=1m"]
    # COLUMNS/LINES (80x24 in tmux's environment here) would override the terminal's real size in Textual
    store_env = f"GPUTOP_TRACKER_STORE={shlex.quote(str(tmp_path / 'store'))}"
    command = shlex.join([*track, "--", sys.executable, str(script), str(go)])
    shell = f"unset COLUMNS LINES; {store_env} {command}; sleep 30"
    sock = f"gputop-job-{os.getpid()}"
    assert _tmux(sock, "new-session", "-d", "-s", "job", "-x", "160", "-y", "50", shell).returncode == 0
    try:
        _wait_screen(sock, r"request \(--request\)", 20)
        deadline = time.monotonic() + 20
        pct = 0
        while time.monotonic() < deadline:  # the peak climbs to the 200 MB held
            pct = int(_wait_screen(sock, r"memory\s+\S+\s+(\d+)% \S+ \S+/1\.07 GB", 10).group(1))
            if pct >= 18:
                break
            time.sleep(0.2)
        assert 18 <= pct <= 25
        clock = r"time\s+\S+\s+\d+% 0:00:(\d\d)/0:01:00"
        first = later = _wait_screen(sock, clock, 10).group(1)
        deadline = time.monotonic() + 10
        while later == first and time.monotonic() < deadline:
            time.sleep(0.3)
            later = _wait_screen(sock, clock, 10).group(1)
        assert int(later) > int(first)
        go.touch()
        _wait_screen(sock, r"exited with code 0", 30)
    finally:
        go.touch()
        _tmux(sock, "kill-server")
