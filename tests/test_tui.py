"""Behaviour of the live view, driven by the fake source (Pilot)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fakesource import MAIN_PID, TREE, FakeSource, make_sample, make_summary
from pydantic import ValidationError
from textual.binding import Binding
from textual.widgets import Footer, Static

from gputop_tracker.core.model.units import human_bytes, human_seconds
from gputop_tracker.core.sampling import channel, sampler
from gputop_tracker.core.sampling.channel import STOP_SIGNAL, Failed, Progress, SampleMessage
from gputop_tracker.core.summary.livestats import SampleHistory
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.live.control import RunControl, subtree_pids
from gputop_tracker.tui.live.keys import BINDINGS, ViewKeys
from gputop_tracker.tui.live.run import clean_output
from gputop_tracker.tui.live.screens.kill_dialog import KillScreen
from gputop_tracker.tui.live.screens.quit_dialog import QuitScreen
from gputop_tracker.tui.live.screens.signal_dialog import SignalScreen
from gputop_tracker.tui.screens.help import HelpScreen
from gputop_tracker.tui.widgets.panels import short_bytes
from gputop_tracker.tui.widgets.proctable import ProcessTable


def make_app(src: FakeSource) -> LiveApp:
    return LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))


async def settle(app: LiveApp, pilot: object, n: int) -> None:
    for _ in range(400):
        if app.n_messages >= n:
            break
        await asyncio.sleep(0.01)
    assert app.n_messages >= n, f"view took {app.n_messages} of {n} messages"
    await pilot.pause()  # type: ignore[attr-defined]


@asynccontextmanager
async def settled_view(src: FakeSource, size: tuple[int, int] = (120, 40)) -> AsyncIterator[tuple[LiveApp, Any]]:
    """The live view of `src` run under Pilot at `size` (columns, rows), once it has taken every message `src`
    scripted so far. Yields the app and its pilot."""
    app = make_app(src)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot, src.n_scripted)
        yield app, pilot


@asynccontextmanager
async def history_from_live_view(store: Path) -> AsyncIterator[tuple[LiveApp, Any]]:
    """A live view (120×40) of a two-sample FakeSource saving to `store`, settled; `h` pressed, and waited on until
    the history's session list has loaded (in a worker), which is asserted shown. Yields the app and its pilot."""
    from gputop_tracker.tui.history.screens.sessions import HistoryScreen

    src = FakeSource(2, store=str(store))
    async with settled_view(src) as (app, pilot):
        await pilot.press("h")
        for _ in range(300):
            if isinstance(app.screen, HistoryScreen) and app.screen.loaded:
                break
            await asyncio.sleep(0.01)
        assert isinstance(app.screen, HistoryScreen)
        yield app, pilot


def row_keys(app: LiveApp) -> list[int]:
    return app.query_one("#procs", ProcessTable).ordered_keys


def cell(app: LiveApp, pid: int, col: str) -> str:
    return app.query_one("#procs", ProcessTable).get_cell(pid, col)


def header(app: LiveApp) -> str:
    return str(app.query_one("#header", Static).content)


async def test_shows_tree_gpus_and_summary() -> None:
    src = FakeSource(12)
    async with settled_view(src, size=(160, 50)) as (app, _):
        assert row_keys(app) == [p[0] for p in TREE]  # tree order: main, workers, sh > nvcc > cicc
        assert "└ nvcc" in cell(app, 4261, "name")
        assert len(app.query(".gpu")) == 2
        assert "running" in header(app) and "SIMULATED" in header(app)
        assert app.query_one("#gpu-0").border_subtitle == "SIMULATED"
        last = src.samples[-1]
        assert cell(app, MAIN_PID, "rss") == short_bytes(last.processes[0].rss)
        assert "loss 6.2964" in "\n".join(app.query_one("#output").lines)  # type: ignore[attr-defined]
        assert not app.has_class("narrow")


async def test_narrow_layout_at_80_columns() -> None:
    src = FakeSource(3)
    async with settled_view(src, size=(80, 24)) as (app, _):
        assert app.has_class("narrow")
        assert "shared" not in app._columns
        assert row_keys(app)[0] == MAIN_PID


async def test_rows_are_diffed_by_key_not_refilled(monkeypatch: pytest.MonkeyPatch) -> None:
    src = FakeSource(2)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        table = app.query_one("#procs", ProcessTable)

        def no_clear(*a: object, **k: object) -> None:
            raise AssertionError("table cleared on a sample")

        monkeypatch.setattr(table, "clear", no_clear)
        tree = [t for t in TREE if t[0] != 4251] + [(4270, MAIN_PID, "new_worker", 100, 2)]
        src.push(SampleMessage(make_sample(5, tree=tree)))
        await settle(app, pilot, src.n_scripted)
        keys = row_keys(app)
        assert 4251 not in keys and 4270 in keys
        assert keys[-1] == 4270  # a child of main: after the subtree of its sibling sh (4260)


async def test_pause_freezes_display_not_sampling() -> None:
    src = FakeSource(4)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        before = cell(app, MAIN_PID, "cpu")
        await pilot.press("p")
        assert app.paused and "PAUSED" in header(app)
        src.push_sample(7)
        await settle(app, pilot, src.n_scripted)
        assert cell(app, MAIN_PID, "cpu") == before  # display frozen
        assert app.progress is not None and app.progress.n_samples == 5  # the run summary still counts it
        await pilot.press("p")
        await pilot.pause()
        assert not app.paused and "PAUSED" not in header(app)
        assert cell(app, MAIN_PID, "cpu") == f"{src.samples[-1].processes[0].cpu_percent:.1f}"


async def test_sort_cycles_columns() -> None:
    src = FakeSource(6)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        await pilot.press("t")  # flat: the sort orders every row
        assert not app.tree_view
        await pilot.press("s")
        assert app.sort_key == "cpu"
        await pilot.pause()
        cpus = [p.cpu_percent for p in src.samples[-1].processes]
        by_pid = {p.pid: p.cpu_percent for p in src.samples[-1].processes}
        assert [by_pid[k] for k in row_keys(app)] == sorted(cpus, reverse=True)
        assert "▼" in app.query_one("#procs", ProcessTable).column_label("cpu")
        await pilot.press("s")
        assert app.sort_key == "rss"
        await pilot.pause()
        rss = {p.pid: p.rss for p in src.samples[-1].processes}
        assert [rss[k] for k in row_keys(app)] == sorted(rss.values(), reverse=True)
        for _ in range(6):  # private, GPU, threads, TIME+, command, PID
            await pilot.press("s")
        assert app.sort_key == "pid"


async def test_tree_and_flat_views() -> None:
    src = FakeSource(3)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        assert cell(app, 4262, "name").strip().startswith("└ cicc")
        await pilot.press("t")
        await pilot.pause()
        assert cell(app, 4262, "name") == "cicc"
        assert row_keys(app) == sorted(p[0] for p in TREE)
        await pilot.press("t")
        await pilot.pause()
        assert "└" in cell(app, 4262, "name")


@pytest.mark.parametrize(("key", "choice"), [("s", "stop"), ("d", "detach"), ("escape", "cancel")])
async def test_quit_while_running_asks(key: str, choice: str) -> None:
    src = FakeSource(3)
    async with settled_view(src) as (app, pilot):
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        await pilot.press(key)
        await pilot.pause()
        if choice == "cancel":
            assert not isinstance(app.screen, QuitScreen)
            assert app.control.running and src.signals == [] and not src.stopped
            app.exit()
        else:
            for _ in range(200):
                if app._exit:
                    break
                await asyncio.sleep(0.01)
    if choice == "stop":
        assert src.tree_signals == [signal.SIGTERM] and src.signals == []  # the tree, through the sampler
        assert app.return_code == 128 + signal.SIGTERM
    elif choice == "detach":
        assert src.stopped and src.signals == []
        assert app.final is not None and app.final.status == "detached"
        assert app.return_code == 0


async def test_quit_dialog_buttons_work_with_the_mouse() -> None:
    src = FakeSource(3)
    async with settled_view(src) as (app, pilot):
        await pilot.press("q")
        await pilot.pause()
        await pilot.click("#detach")
        for _ in range(200):
            if app._exit:
                break
            await asyncio.sleep(0.01)
    assert src.stopped and app.return_code == 0


async def test_after_exit_stays_open_then_quits_with_the_exit_code() -> None:
    src = FakeSource(5, finished=True, exit_code=3)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        await pilot.pause(0.1)
        assert not app.control.running
        assert "exited with code 3" in header(app)
        summary = str(app.query_one("#summary", Static).content)
        assert "saved: " in summary and "20250301-120000-demo-4242-beef.json" in summary
        assert app.query_one("#procs", ProcessTable).border_title == "processes: peaks over the run"
        assert cell(app, MAIN_PID, "rss") == short_bytes(src.samples[-1].processes[0].peak_rss)
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, QuitScreen)
    assert app.return_code == 3


async def test_failure_is_shown_and_returned() -> None:
    src = FakeSource(0)
    src.push(Failed(127, "nosuchcmd: command not found"))
    app = make_app(src)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot, 2)
        assert "command not found" in header(app)
        await pilot.press("q")
    assert app.return_code == 127


@pytest.fixture
def sleeper() -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()


@pytest.mark.parametrize("confirm", [True, False])
async def test_signal_selected_process_with_confirmation(sleeper: subprocess.Popen[bytes], confirm: bool) -> None:
    tree = [*TREE, (sleeper.pid, MAIN_PID, "sleeper", 10, 1)]
    src = FakeSource(3, tree=tree)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        table = app.query_one("#procs", ProcessTable)
        table.focus()
        table.move_cursor(row_keys(app).index(sleeper.pid))
        await pilot.pause()
        assert app.selected_pid() == sleeper.pid
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, SignalScreen) and app.screen.pid == sleeper.pid
        assert app.screen.n_descendants == 0
        await pilot.press("t" if confirm else "escape")
        await pilot.pause()
        assert not isinstance(app.screen, SignalScreen)
        app.exit()
    if confirm:
        assert sleeper.wait(timeout=5) == -signal.SIGTERM
    else:
        assert sleeper.poll() is None
    assert src.signals == []  # the sampler was not involved


async def test_signal_refuses_pids_outside_the_tree() -> None:
    src = FakeSource(2)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        src.push(SampleMessage(make_sample(3, tree=[])))  # everything exited
        await settle(app, pilot, src.n_scripted)
        await pilot.press("k")
        await pilot.pause()
        assert not isinstance(app.screen, SignalScreen)


async def test_help_and_history_keys() -> None:
    src = FakeSource(2)
    async with settled_view(src) as (app, pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("h")  # the history view, or a notice when it is not there
        await pilot.pause()
        assert app.is_running


def test_bindings_have_ids_for_remapping() -> None:
    ids = {b.id for b in LiveApp.BINDINGS if hasattr(b, "id")}  # type: ignore[union-attr]
    assert {"quit", "pause", "sort", "tree", "signal", "history", "help"} <= ids


async def test_run_so_far_shows_the_samplers_running_summary() -> None:
    src = FakeSource(6)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        usage = make_summary(src.samples)  # the figures the final report prints
        text = str(app.query_one("#summary", Static).content)
        assert f"peak RAM    {human_bytes(usage.max_ram.combined.total_rss)} (tree)" in text
        assert f"CPU time    {human_seconds(usage.cpu_time.total)}" in text
        assert f"{usage.n_processes} processes" in text
        # per GPU, never a sum above 100 %
        assert "per GPU ×2" in text
        for figure in re.findall(r"GPU util.*?(\d+)%.*?(\d+)%", text)[0]:
            assert int(figure) <= 100
        assert "saved:" not in text
        # the panel shows what the sampler sent, not figures of its own
        odd = usage.model_copy(update={"peak_threads": 987654, "processes": []})
        src.push(Progress(odd))
        src.push(SampleMessage(make_sample(7)), progress=False)
        await settle(app, pilot, src.n_scripted)
        assert "threads     987654 peak" in str(app.query_one("#summary", Static).content)


def test_progress_message_is_decoded_and_validated() -> None:
    usage = make_summary([make_sample(i) for i in range(3)])
    line = json.dumps({"kind": "progress", "summary": usage.model_dump(mode="json")}).encode()
    msg = channel.decode(line)
    assert isinstance(msg, Progress) and msg.usage == usage
    with pytest.raises(ValidationError):
        channel.decode(json.dumps({"kind": "progress", "summary": {"max_ram": "lots"}}).encode())
    # as the sampler writes them (msgpipe: compact JSON), validated straight from the text
    compact = {"separators": (",", ":")}
    line = json.dumps({"kind": "progress", "summary": usage.model_dump(mode="json")}, **compact).encode()
    msg = channel.decode(line)
    assert isinstance(msg, Progress) and msg.usage == usage
    sample = make_sample(3)
    msg = channel.decode(json.dumps({"kind": "sample", "sample": sample.model_dump(mode="json")}, **compact).encode())
    assert isinstance(msg, SampleMessage) and msg.sample == sample
    with pytest.raises(ValidationError):
        channel.decode(json.dumps({"kind": "sample", "sample": {"time": "now"}}, **compact).encode())


def test_sampler_streams_progress_at_most_once_a_second(tmp_path: Path) -> None:
    cfg = sampler.EngineConfig(
        mode="launch", argv=["sleep", "2.6"], interval=0.25, store=str(tmp_path), stream_samples=True
    )
    handle = channel.start_spawned(cfg)
    try:
        msgs = list(handle.messages())
    finally:
        handle.close()
        handle.wait()
    kinds = [type(m).__name__ for m in msgs]
    progress = [m.usage for m in msgs if isinstance(m, Progress)]
    final = next(m.usage for m in msgs if isinstance(m, channel.Summary))
    assert kinds.count("SampleMessage") >= 8
    assert 2 <= len(progress) <= 3, kinds  # 2.6 s of samples every 0.25 s: at 0, ~1, ~2 s
    assert kinds[kinds.index("Progress") + 1] == "SampleMessage"  # sent just before a sample
    assert all(u.processes == [] and u.events == [] for u in progress)
    assert progress[-1].n_samples <= final.n_samples
    assert progress[-1].max_ram.combined.total_rss <= final.max_ram.combined.total_rss
    assert final.processes  # the final report keeps its details


def test_sample_history_keeps_the_sparkline_points() -> None:
    samples = [make_sample(i) for i in range(10)]
    h = SampleHistory()
    for s in samples:
        h.add(s)
    assert h.n_samples == 10
    assert list(h.gpus[0].util) == [s.gpus[0].utilization_gpu for s in samples]


def test_clean_output_keeps_colours_and_carriage_returns() -> None:
    assert clean_output("\x1b[31mred\x1b[0m\n") == "\x1b[31mred\x1b[0m\n"  # colours: the pane shows them
    assert clean_output("10%\r20%\r\n") == "10%\r20%\n"  # the pane rewrites the line
    assert clean_output("a\x1b[2K\x1b[1A\x1b]0;title\x07b") == "ab"  # cursor moves, erase, window title: gone


def test_stop_signal_is_detach() -> None:
    src = FakeSource(1)
    src.signal(STOP_SIGNAL)
    assert src.stopped


async def wait_exit(app: LiveApp) -> None:
    for _ in range(500):
        if app._exit:
            return
        await asyncio.sleep(0.01)


async def test_ctrl_c_opens_the_quit_dialog_and_enter_chooses_nothing() -> None:
    """A habitual q, Enter must not stop the job: the dialog has no default, Enter only says which keys choose."""
    src = FakeSource(3)
    async with settled_view(src) as (app, pilot):
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        assert app.screen.focused is None
        text = " ".join(str(w.content) for w in app.screen.query(Static))
        assert f"PID {MAIN_PID} (python3 train.py)" in text  # the target is named
        assert app.screen.query(Footer)  # its own footer, with the keys that choose
        shown = {key for key, active in app.screen.active_bindings.items() if active.binding.show}
        assert {"s", "d", "escape"} <= shown and "enter" not in shown
        await pilot.press("ctrl+c")  # again: still the one dialog
        await pilot.pause()
        assert len(app.screen_stack) == 2
        await pilot.press("enter", "enter")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen) and app.control.running and not app._exit
        assert src.tree_signals == [] and not src.stopped
        await pilot.press("s")
        await wait_exit(app)
    assert src.tree_signals == [signal.SIGTERM]
    assert app.final is not None and any("stopped from the live view" in n for n in app.final.notes)


async def test_attach_quit_enter_chooses_nothing_d_detaches() -> None:
    src = FakeSource(3)
    app = LiveApp(src, interval=1.0, command=[], mode="attach", store_dir=Path(src.store))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot, src.n_scripted)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen) and app.screen.focused is None
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen) and not src.stopped
        await pilot.press("d")
        await wait_exit(app)
    assert src.stopped and src.tree_signals == [] and src.signals == []
    assert app.return_code == 0


async def test_attach_stop_needs_the_explicit_key() -> None:
    src = FakeSource(3)
    app = LiveApp(src, interval=1.0, command=[], mode="attach", store_dir=Path(src.store))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot, src.n_scripted)
        await pilot.press("q", "s")
        await wait_exit(app)
    assert src.tree_signals == [signal.SIGTERM] and not src.stopped


async def test_stubborn_tree_asks_before_sigkill(monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop_tracker.tui.live import control as live_control

    monkeypatch.setattr(live_control, "KILL_AFTER", 0.05)
    src = FakeSource(3, ignores_sigterm=True)
    async with settled_view(src) as (app, pilot):
        await pilot.press("q", "s")
        for _ in range(300):
            if isinstance(app.screen, KillScreen):
                break
            await asyncio.sleep(0.01)
        assert isinstance(app.screen, KillScreen) and app.control.running  # no SIGKILL unasked
        assert src.tree_signals == [signal.SIGTERM]
        await pilot.press("w")  # wait longer: asked again after another grace period
        for _ in range(300):
            if isinstance(app.screen, KillScreen):
                break
            await asyncio.sleep(0.01)
        assert isinstance(app.screen, KillScreen)
        await pilot.press("k")
        await wait_exit(app)
    assert src.tree_signals == [signal.SIGTERM, signal.SIGKILL]
    assert app.return_code == 128 + signal.SIGKILL


async def test_kill_dialog_detach_leaves_the_tree() -> None:
    src = FakeSource(3, ignores_sigterm=True)
    async with settled_view(src) as (app, pilot):
        await pilot.press("q", "s")
        await pilot.pause()
        app.control.ask_kill()
        await pilot.pause()
        assert isinstance(app.screen, KillScreen)
        await pilot.press("d")
        await wait_exit(app)
    assert src.stopped and src.tree_signals == [signal.SIGTERM]


@pytest.fixture
def sleeper_tree() -> subprocess.Popen[bytes]:
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code])
    yield p
    for c in psutil_children(p.pid):
        try:
            os.kill(c, signal.SIGKILL)
        except OSError:
            pass
    p.kill()
    p.wait()


def psutil_children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


async def test_signal_dialog_offers_the_subtree(sleeper_tree: subprocess.Popen[bytes]) -> None:
    import time

    deadline = time.monotonic() + 10
    while not psutil_children(sleeper_tree.pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    (child,) = psutil_children(sleeper_tree.pid)
    tree = [*TREE, (sleeper_tree.pid, MAIN_PID, "parent", 10, 1), (child, sleeper_tree.pid, "child", 10, 1)]
    src = FakeSource(3, tree=tree)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        table = app.query_one("#procs", ProcessTable)
        table.move_cursor(row_keys(app).index(sleeper_tree.pid))
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, SignalScreen) and app.screen.n_descendants == 1
        await pilot.press("a", "t")
        await pilot.pause()
        app.exit()
    assert sleeper_tree.wait(timeout=5) == -signal.SIGTERM
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        subprocess.run(["true"])  # the child is reparented to init (or us): it is reaped there
    state = Path(f"/proc/{child}/stat").read_text().split(")")[1].split()[0] if Path(f"/proc/{child}").exists() else "X"
    assert state in ("X", "Z")


def test_every_live_key_reaches_an_action_of_the_view_and_its_parts_are_owned() -> None:
    """The keys' and the run's logic live in parts the view holds (not base classes); each binding still names an
    action on the App itself, where Textual looks for it."""
    for binding in BINDINGS:
        assert isinstance(binding, Binding)
        name = binding.action.split("(")[0]
        assert callable(getattr(LiveApp, f"action_{name}", None)), f"{binding.key}: no action_{name}"
    assert not {ViewKeys, RunControl} & set(LiveApp.__mro__)
    app = LiveApp(FakeSource(3), interval=0.5)
    assert isinstance(app.control, RunControl) and app.control.app is app
    assert isinstance(app.view_keys, ViewKeys) and app.view_keys.app is app


def test_the_parts_see_the_view_through_its_face_only() -> None:
    """keys.py and control.py reached into LiveApp 88 and 42 times (16 of them private members) and imported it
    back under TYPE_CHECKING: they see `view.LiveView` now, and no private member of it."""
    import re

    from gputop_tracker.tui.live import control, keys
    from gputop_tracker.tui.live.view import LiveView

    for module in (keys, control):
        source = Path(str(module.__file__)).read_text()
        assert "tui.live.app" not in source and "TYPE_CHECKING" not in source, module.__name__
        assert not re.findall(r"\bapp\._\w+", source), module.__name__
    assert issubclass(LiveApp, LiveView)


def test_subtree_pids_parents_first() -> None:
    procs = make_sample(1).processes
    assert subtree_pids(procs, 4260) == [4260, 4261, 4262]
    assert subtree_pids(procs, 4250) == [4250]


def test_time_ring_is_bounded_over_the_whole_run_and_keeps_peaks() -> None:
    from gputop_tracker.core.summary.livestats import TimeRing

    ring = TimeRing(capacity=16)
    for i in range(1000):
        ring.add(float(i), {"ram": 500.0 if i == 777 else float(i % 10), "late": 1.0 if i >= 500 else None})
    assert len(ring) < 16 and ring.stride >= 64
    assert ring.times[0] < 100 and ring.times[-1] >= 900  # still the whole run
    assert max(v for v in ring.series("ram") if v is not None) == 500.0  # merged, never averaged away
    assert ring.peaks["ram"] == (500.0, 777.0)
    assert ring.series("late")[0] is None and ring.series("late")[-1] == 1.0


async def test_live_charts_plot_the_run_and_keep_counting_while_paused() -> None:
    from gputop_tracker.tui.widgets.charts import TimeChart, short_time, stepped_end

    src = FakeSource(6)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        ram = app.query_one("#live-chart-ram", TimeChart)
        assert ram.display and len(ram.xs) in (5, 6) and ram.peak is not None  # redrawn every 2 s of the run
        assert [s.label for s in ram.series] == ["Σ PSS", "private"]
        text = ram.render().plain
        end = short_time(stepped_end(ram.xs[-1]))  # 4s or 5s: the axis ends on the last sample drawn
        assert "RAM (tree)" in text and "GB┤" in text and "0s" in text and end in text  # units, time axis
        assert "▲ peak" in text
        for chart_id in ("#live-chart-cpu", "#live-chart-gpu-memory", "#live-chart-gpu-util"):
            assert app.query_one(chart_id, TimeChart).display
        await pilot.press("p")
        for i in range(6, 10):
            src.push_sample(i)
        await settle(app, pilot, src.n_scripted)
        assert len(app.history.chart) == 10 and len(ram.xs) <= 6  # counted, not drawn
        await pilot.press("p")
        await pilot.pause()
        assert len(ram.xs) == 10


async def test_narrow_shows_one_compact_chart() -> None:
    from gputop_tracker.tui.widgets.charts import TimeChart

    src = FakeSource(4)
    async with settled_view(src, size=(80, 24)) as (app, _):
        shown = [c.id for c in app.query(TimeChart) if c.display and c.styles.display != "none"]
        assert shown == ["live-chart-ram"]
        assert app.query_one("#live-chart-ram").region.height == 5


async def test_a_peak_that_rose_within_the_scale_redraws_the_title_alone() -> None:
    """Between two periods a chart names a risen peak at once; where the plot's scale still holds it, only its
    title line is drawn again (a rising job redrew every chart each second); over the scale, the whole chart."""
    from textual.app import App, ComposeResult

    from gputop_tracker.tui.live.charts import LiveTimeChart, _draw
    from gputop_tracker.tui.widgets.charts import Series

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield LiveTimeChart("RAM", id="ram")

    xs = [0.0, 1.0, 2.0]
    async with One().run_test(size=(60, 12)) as pilot:
        chart = pilot.app.query_one(LiveTimeChart)
        _draw(chart, True, xs, [Series("x", [1.0e9, 1.2e9, 1.5e9], "green")], (1.5e9, 2.0))
        await pilot.pause()
        before = list(chart._strips)
        assert "▲ peak 1.5 GB" in before[0].text
        _draw(chart, False, [*xs, 3.0], [Series("x", [1.0e9, 1.2e9, 1.5e9, 1.8e9], "green")], (1.8e9, 3.0))
        after = list(chart._strips)
        assert "▲ peak 1.8 GB at 3s" in after[0].text  # at once, not at the next period
        assert after[1:] == before[1:] and all(a is b for a, b in zip(after[1:], before[1:], strict=True))
        assert chart.series[0].values[-1] == 1.5e9  # the plot waits for its period
        _draw(chart, False, [*xs, 3.0, 4.0], [Series("x", [1.0e9, 1.2e9, 1.5e9, 1.8e9, 5.0e9], "green")], (5e9, 4.0))
        assert chart.series[0].values[-1] == 5.0e9 and "▲ peak 5 GB" in chart._strips[0].text  # over the scale
        assert any("5 GB" in strip.text or "6 GB" in strip.text for strip in chart._strips[1:])  # its axis too


def test_charts_of_one_to_three_samples_draw_points_not_lines() -> None:
    from gputop_tracker.tui.widgets.charts import Series, TimeChart, short_time

    assert short_time(0.4) == "0.4s" and short_time(2.0) == "2s" and short_time(42) == "42s"
    chart = TimeChart("RAM", [0.0, 0.2], [Series("x", [1e9, 2e9], "green")], peak=(2e9, 0.2))
    plain = chart_text(chart, 40, 8)
    assert "0.2s" in plain and "0s 0s" not in plain
    dots = sum(ch != "⠀" and 0x2800 <= ord(ch) <= 0x28FF for ch in plain)
    assert dots <= 4  # two points (two cells each at most), no diagonal between them


def chart_text(chart: object, width: int, height: int) -> str:
    from unittest.mock import PropertyMock, patch

    from textual.geometry import Size

    from gputop_tracker.tui.widgets.charts import TimeChart

    assert isinstance(chart, TimeChart)
    with patch.object(TimeChart, "size", new_callable=PropertyMock, return_value=Size(width, height)):
        return chart.render().plain


def test_short_command_keeps_what_tells_processes_apart() -> None:
    from gputop_tracker.tui.live.process_rows import short_command

    p = (
        make_sample(1)
        .processes[0]
        .model_copy(
            update={"cmdline": ["/usr/bin/python3", "/home/me/projects/deep/net/train_worker.py", "--rank", "3"]}
        )
    )
    assert short_command(p) == "python3 …/train_worker.py --rank 3"
    q = p.model_copy(update={"cmdline": ["python3", "--data=/very/long/path/to/the/dataset/dir"], "name": "python3"})
    assert short_command(q) == "python3 --data=…/dir"
    renamed = p.model_copy(update={"name": "pt_data_worker", "cmdline": ["python3", "train.py"]})
    assert short_command(renamed) == "pt_data_worker: python3 train.py"
    assert short_command(p.model_copy(update={"cmdline": [], "name": "kworker"})) == "kworker"
    # no room: the directory goes, then the interpreter, then the start; the trailing arguments stay
    assert short_command(p, 32) == "python3 train_worker.py --rank 3"
    assert short_command(p, 24) == "train_worker.py --rank 3"
    assert short_command(p, 12) == "…py --rank 3"
    # python -c CODE ARGS: the ARGS tell such processes apart; without ARGS the code does
    code = ["python3", "-c", "import time\nwhile True: pass", "tag-7"]
    assert short_command(p.model_copy(update={"cmdline": code})) == "python3 -c … tag-7"
    assert short_command(p.model_copy(update={"cmdline": code}), 10) == "tag-7"
    assert short_command(p.model_copy(update={"cmdline": ["sh", "-c", "exit 3"], "name": "sh"})) == "sh -c exit 3"


def _workers_tree() -> list[tuple[int, int, str, int, int]]:
    return [*TREE[:1], (4300, MAIN_PID, "python3", 100, 1), (4301, MAIN_PID, "python3", 100, 1)]


def _with_args(s: SampleMessage | object, pid: int, args: list[str]) -> None:
    assert isinstance(s, SampleMessage)
    for p in s.sample.processes:
        if p.pid == pid:
            p.cmdline = args


async def test_command_and_state_columns_tell_workers_apart() -> None:
    src = FakeSource(0, tree=_workers_tree())
    for i in range(3):
        msg = SampleMessage(make_sample(i, tree=_workers_tree()))
        _with_args(msg, 4300, ["python3", "worker.py", "--rank", "0"])
        _with_args(msg, 4301, ["python3", "worker.py", "--rank", "1"])
        if i == 2:
            next(p for p in msg.sample.processes if p.pid == 4301).rss = 0  # exited, not reaped yet
        src.push(msg)
    async with settled_view(src) as (app, _):
        assert "command" in app.query_one("#procs", ProcessTable).column_label("name")
        assert cell(app, 4300, "name").endswith("worker.py --rank 0")
        assert cell(app, 4301, "name").endswith("worker.py --rank 1")
        assert cell(app, 4300, "state") == "run" and cell(app, 4301, "state") == "zombie"


async def test_an_exited_worker_shows_how_it_ended_then_leaves() -> None:
    from gputop_tracker.core.model.models import Event
    from gputop_tracker.core.sampling.channel import EventMessage
    from gputop_tracker.tui.live.process_info import EXITED_ROWS

    src = FakeSource(3, tree=_workers_tree())
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        src.push(EventMessage(Event(time=0, type="process_exited", pid=4301, name="python3", signal=9)))
        src.push(SampleMessage(make_sample(4, tree=_workers_tree()[:2])))
        await settle(app, pilot, src.n_scripted)
        assert cell(app, 4301, "state") == "sig 9"
        for i in range(EXITED_ROWS):
            src.push(SampleMessage(make_sample(5 + i, tree=_workers_tree()[:2])))
        await settle(app, pilot, src.n_scripted)
        assert 4301 not in row_keys(app)


async def test_run_so_far_peaks_are_never_below_a_current_figure_on_screen() -> None:
    """The sampler's running summary comes at most once a second; a sample that came after it, above its peaks,
    raises the peaks shown (summary panel and chart titles) with it."""
    from fakesource import recounted

    from gputop_tracker.tui.widgets.charts import TimeChart

    src = FakeSource(3)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        s = make_sample(3)
        s.processes[1] = s.processes[1].model_copy(
            update={"rss": 9_000_000_000, "private": 8_000_000_000, "pss": 8_500_000_000, "threads": 700}
        )
        s.tree = recounted(s).tree.model_copy(update={"cpu_percent": 3000.0})
        s.gpus[0] = s.gpus[0].model_copy(update={"utilization_gpu": 100.0})
        src.push(SampleMessage(s), progress=False)  # no running summary with it: the last one is below
        await settle(app, pilot, src.n_scripted)
        u = app.progress
        assert u is not None and u.max_ram.combined.total_rss < 9e9 and u.peak_threads < 700
        text = str(app.query_one("#summary", Static).content)
        peak = float(re.search(r"peak RAM +([\d.]+) GB", text)[1]) * 1e9  # type: ignore[index]
        private = float(re.search(r"private +([\d.]+) GB", text)[1]) * 1e9  # type: ignore[index]
        assert peak >= max(s.tree.combined_total, *(p.rss for p in s.processes)) - 0.01e9
        assert private >= s.tree.combined_private - 0.01e9
        assert f"threads     {s.tree.threads} peak" in text and "max 3000%" in text
        assert "max 100%" in text  # GPU 0's utilization now
        ram = app.query_one("#live-chart-ram", TimeChart)
        assert ram.peak is not None and ram.peak[0] >= s.tree.combined_total  # not waiting for the next period
        assert f"▲ peak {ram._exact(s.tree.combined_total)} at 3s" in ram.render().plain.split("\n")[0]


async def test_a_lower_bound_is_marked_in_the_table_its_legend_and_the_detail_pane() -> None:
    """While a process's private/shared figures are carried forward (or not read yet) they show as ≥ bounds."""
    from gputop_tracker.tui.live.process_info import BOUND_NOTE
    from gputop_tracker.tui.live.screens.process_detail import ProcessDetailScreen

    src = FakeSource(3)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        table = app.query_one("#procs", ProcessTable)
        assert "≥" not in cell(app, 4250, "private") and table.border_title == "processes"
        s = make_sample(3)
        s.processes[1] = s.processes[1].model_copy(update={"mem_bound": True, "private": 261_789_000})
        src.push(SampleMessage(s))
        await settle(app, pilot, src.n_scripted)
        assert cell(app, 4250, "private") == "≥261 MB"  # rounded down: still a lower bound
        assert cell(app, 4250, "shared").startswith("≥")
        assert "≥" not in cell(app, MAIN_PID, "private") + cell(app, 4251, "private")
        assert "≥ lower bound" in str(table.border_title)
        await pilot.press("down")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessDetailScreen)
        text = app.screen.text.plain
        assert "private    ≥261 MB now" in text and "shared     ≥" in text and BOUND_NOTE in text
        await pilot.press("escape")
        src.push_sample(4)  # read since: the kernel's figures again
        await settle(app, pilot, src.n_scripted)
        assert "≥" not in cell(app, 4250, "private")
        assert "≥ lower bound" in str(table.border_title)  # the legend stays: no title flickering on and off


async def test_enter_opens_the_process_in_full() -> None:
    from gputop_tracker.tui.live.screens.process_detail import ProcessDetailScreen

    src = FakeSource(4)
    async with settled_view(src) as (app, pilot):
        assert app.query_one("#procs", ProcessTable).border_subtitle == f"{MAIN_PID}: python3 train.py --epochs 3"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessDetailScreen)
        text = app.screen.text.plain
        for part in (
            f"PID        {MAIN_PID}",
            "PPID       1000",
            "state      run",
            "first seen at 0:00:00",
            "python3 train.py --epochs 3",
            "GPU 0:",
            "GPU 1:",
            "peak",
        ):
            assert part in text, part
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProcessDetailScreen)
        await pilot.press("down")
        await pilot.pause()
        assert app.query_one("#procs", ProcessTable).border_subtitle.startswith("4250: pt_data_worker")


def test_sm_percent_is_per_gpu() -> None:
    from gputop_tracker.tui.live.process_rows import sm_text

    p = make_sample(3).processes[0].model_copy(update={"gpu_sm_percent": 170.0})
    assert len(p.gpu_memory) == 2 and sm_text(p) == "85×2"
    assert sm_text(p.model_copy(update={"gpu_memory": {}, "gpu_sm_percent": 40.0})) == "40"


async def test_output_pane_is_terminal_like() -> None:
    from gputop_tracker.tui.live.output_pane import OutputPane

    src = FakeSource(2, output=[])
    async with settled_view(src) as (app, pilot):
        out = app.query_one("#output", OutputPane)
        out.write("start\n")
        for i in range(0, 101, 10):  # a progress bar: one line, rewritten
            out.write(f"\r{i:3d}% |{'#' * (i // 10):<10}|")
        out.write("\n\x1b[31mred error\x1b[0m\n")
        await pilot.pause()
        assert out.lines == ["start", "100% |##########|", "red error"]
        red = [s for s in out._lines[2].spans if not isinstance(s.style, str) and s.style.color is not None]
        assert red, "colours kept"
        out.write("\x1b[3")  # an escape cut between two reads
        out.write("2mgreen\x1b[0m\n")
        assert out.lines[-1] == "green"
        # follows the tail...
        out.write("".join(f"line {i}\n" for i in range(200)))
        await pilot.pause()
        assert out.scroll_y == out.max_scroll_y > 0
        # ...unless the user scrolled up
        out.scroll_to(y=3, animate=False, immediate=True)
        out.write("more\n")
        await pilot.pause()
        assert out.scroll_y == 3


async def test_output_zoom_and_find_keys() -> None:
    from gputop_tracker.tui.live.output_pane import OutputPane

    src = FakeSource(3)
    async with settled_view(src) as (app, pilot):
        out = app.query_one("#output", OutputPane)
        small = out.region.height
        await pilot.press("o")
        await pilot.pause()
        assert app.has_class("output-zoom") and out.region.height > 3 * small and out.has_focus
        await pilot.press("o")
        await pilot.pause()
        assert out.region.height == small
        await pilot.press("f", *"loss 6.5")
        await pilot.pause()
        assert out.term == "loss 6.5" and str(out.border_subtitle).startswith("“loss 6.5”: 1 found")
        await pilot.press("enter")
        await pilot.pause()
        assert out.has_focus and not app.query_one("#prompt").display
        await pilot.press("escape")
        await pilot.pause()
        assert out.term == ""


async def test_filter_reverse_and_function_keys() -> None:
    src = FakeSource(4)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        await pilot.press("slash", *"worker")
        await pilot.pause()
        assert set(row_keys(app)) == {4250, 4251, 4252, 4253}
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one("#procs", ProcessTable).has_focus and len(row_keys(app)) == 4
        await pilot.press("escape")
        await pilot.pause()
        assert len(row_keys(app)) == len(TREE)
        await pilot.press("f5")  # htop's F5: tree/flat
        await pilot.pause()
        assert not app.tree_view
        assert row_keys(app) == sorted(p[0] for p in TREE)
        await pilot.press("r")
        await pilot.pause()
        assert row_keys(app) == sorted((p[0] for p in TREE), reverse=True)
        assert app.query_one("#procs", ProcessTable).column_label("pid") == "PID ▼"
        await pilot.press("s")  # cpu, largest first; a second click on its label: smallest first
        await pilot.pause()
        assert app.query_one("#procs", ProcessTable).column_label("cpu") == "CPU ▼"  # the arrow is never cut
        app.on_process_table_header_selected(ProcessTable.HeaderSelected(app.query_one("#procs", ProcessTable), "cpu"))
        await pilot.pause()
        cpus = [float(cell(app, pid, "cpu")) for pid in row_keys(app)]
        assert cpus == sorted(cpus) and app.query_one("#procs", ProcessTable).column_label("cpu") == "CPU ▲"
        for key in ("home", "end", "pageup", "pagedown", "up", "down"):
            await pilot.press(key)
        await pilot.press("end")
        await pilot.pause()
        assert app.selected_pid() == row_keys(app)[-1]
        await pilot.press("home")
        await pilot.pause()
        assert app.selected_pid() == row_keys(app)[0]
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)


async def test_the_filter_stays_in_the_title_and_says_when_nothing_matches() -> None:
    """The next sample put "processes" back over the filter's title; a filter that matched nothing left an
    empty table with no word of why."""
    from textual.content import Content

    def shown_title(table: ProcessTable) -> str:  # as drawn (the title is kept as markup)
        return Content.from_markup(str(table.border_title)).plain

    src = FakeSource(4)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        table = app.query_one("#procs", ProcessTable)
        await pilot.press("slash", *"worker", "enter")
        await pilot.pause()
        app._update_table(app.latest)  # a sample comes
        await pilot.pause()
        assert shown_title(table) == "processes matching “worker”" and len(row_keys(app)) == 4
        app.row_filter = "[b]nomatch"  # as typed in the prompt; brackets are plain text, never markup
        await pilot.pause()
        app._update_table(app.latest)
        await pilot.pause()
        assert row_keys(app) == [] and shown_title(table) == "processes matching “[b]nomatch”: none"
        await pilot.press("escape")
        await pilot.pause()
        assert shown_title(table) == "processes" and len(row_keys(app)) == len(TREE)


async def test_sort_and_tree_redraw_while_paused() -> None:
    src = FakeSource(4)
    async with settled_view(src, size=(160, 50)) as (app, pilot):
        await pilot.press("p", "t")
        await pilot.pause()
        assert row_keys(app) == sorted(p[0] for p in TREE)  # re-ordered at once, from the frozen sample
        frozen = cell(app, MAIN_PID, "cpu")
        src.push_sample(9)
        await settle(app, pilot, src.n_scripted)
        await pilot.press("s")
        await pilot.pause()
        assert cell(app, MAIN_PID, "cpu") == frozen


def test_every_binding_has_an_id_and_is_shown_or_in_help() -> None:
    from gputop_tracker.tui.live.help_text import HELP

    for b in LiveApp.BINDINGS:
        assert isinstance(b, Binding) and b.id, b
        first = b.key.split(",")[0]
        shown = (b.key_display or first).replace("question_mark", "?").replace("slash", "/")
        assert b.show or f"[b]{shown}" in HELP or first in HELP.lower(), b


async def test_history_from_the_live_view_q_goes_back_not_to_the_quit_dialog(tmp_path: Path) -> None:
    async with history_from_live_view(tmp_path) as (app, pilot):
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, QuitScreen) and len(app.screen_stack) == 1 and app.control.running


async def test_history_screen_takes_only_its_own_keys(tmp_path: Path) -> None:
    """In the history screen `k` opened the live view's signal dialog for the row selected before (not on
    screen); the footer listed the live view's keys. There the live view's keys do nothing and are not listed."""
    src = FakeSource(2, store=str(tmp_path))
    async with settled_view(src) as (app, pilot):
        from gputop_tracker.tui.history.screens.sessions import HistoryScreen

        await pilot.press("down", "h")
        for _ in range(300):
            if isinstance(app.screen, HistoryScreen) and app.screen.loaded:
                break
            await asyncio.sleep(0.01)
        history = app.screen
        assert isinstance(history, HistoryScreen)
        for key in ("k", "f9", "p", "t", "o", "b", "f3"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen is history, key
        assert not app.paused and app.tree_view and src.signals == [] and src.tree_signals == []
        shown = {a.binding.action for a in history.active_bindings.values() if a.binding.show}
        assert not shown & {"signal", "pause", "tree", "zoom_output", "find", "history"}, shown
        await pilot.press("q")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]
        await pilot.press("k")  # on the live view again: its keys are back
        await pilot.pause()
        assert isinstance(app.screen, SignalScreen)
        assert app.screen.command  # the target's command line is on screen


@pytest.mark.parametrize(("size", "gpus", "least"), [((120, 40), 0, 24), ((160, 50), 0, 24), ((160, 50), 2, 24)])
async def test_command_column_is_last_and_takes_the_width_left(size: tuple[int, int], gpus: int, least: int) -> None:
    """As in htop: the command comes last, as wide as the figures leave it; no GPU, no GPU columns."""
    src = FakeSource(0, tree=_workers_tree(), n_gpus=gpus)
    for i in range(2):
        msg = SampleMessage(make_sample(i, tree=_workers_tree(), n_gpus=gpus))
        _with_args(msg, 4300, ["/usr/bin/python3", "/home/me/project/src/worker.py", "--role", "trainer"])
        _with_args(msg, 4301, ["/usr/bin/python3", "/home/me/project/src/worker.py", "--role", "evaluator"])
        src.push(msg)
    app = make_app(src)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot, src.n_scripted)
        table = app.query_one("#procs", ProcessTable)
        assert table.columns[-1] == "name" and table.widths["name"] >= least
        assert ("gpu" in table.columns) == bool(gpus)
        assert cell(app, 4300, "name").endswith("worker.py --role trainer")
        assert cell(app, 4301, "name").endswith(".py --role evaluator")  # the line keeps its end: what differs
        # the whole line is under the table for the selected row, and in the details
        table.move_cursor(table.ordered_keys.index(4301))
        await pilot.pause()
        assert "/home/me/project/src/worker.py --role evaluator" in str(table.border_subtitle)


async def test_output_scrolled_back_stays_put_and_n_N_walk_the_matches() -> None:
    """Past the pane's 2,000 lines old lines leave: the text scrolled back to must not move under the reader,
    and a find's match stays on screen; n / N go to the next match below / above."""
    from gputop_tracker.tui.live.output_pane import OutputPane

    src = FakeSource(2, output=[])
    async with settled_view(src) as (app, pilot):
        out = app.query_one("#output", OutputPane)
        out.write("".join(f"line {i}{' epoch' if i % 500 == 0 else ''}\n" for i in range(2000)))
        await pilot.pause()
        out.scroll_to(y=1000, animate=False, immediate=True)
        await pilot.pause()
        top = out.lines[round(out.scroll_y)]
        out.write("".join(f"new {i}\n" for i in range(300)))  # 300 old lines leave the ring
        await pilot.pause()
        assert out.lines[round(out.scroll_y)] == top == "line 1000 epoch"
        await pilot.press("f", *"epoch", "enter")
        await pilot.pause()
        assert out.lines[out.match_line] == "line 1500 epoch"  # the last one
        assert "line 3 of 3" in str(out.border_subtitle)  # line 0 left the ring: 500, 1000, 1500
        await pilot.press("N")
        await pilot.pause()
        assert out.lines[out.match_line] == "line 1000 epoch"
        out.write("".join(f"more {i}\n" for i in range(100)))  # lines leave again: the match stays on screen
        await pilot.pause()
        assert out.lines[out.match_line] == "line 1000 epoch"
        assert out.scroll_y <= out.match_line < out.scroll_y + out.scrollable_content_region.height
        await pilot.press("n", "n")
        await pilot.pause()
        assert out.lines[out.match_line] == "line 500 epoch"  # past the last one: round to the first


def count_draws(app: LiveApp, draws: list[float]) -> None:
    """From now on each redraw of `app` appends the elapsed time of the sample it draws to `draws`."""
    original = app._redraw

    def counted(*, sample: bool = False) -> None:
        draws.append(app.latest.elapsed if app.latest else -1)
        original(sample=sample)

    app._redraw = counted  # type: ignore[method-assign]


async def test_samples_faster_than_the_draw_period_are_folded_into_one_draw_a_second() -> None:
    """At the default 0.5 s interval the screen is drawn from the newest sample at most once a DRAW_PERIOD (the
    view's CPU halves); every sample still reaches the charts' history, and the newest is drawn in the end."""
    from gputop_tracker.tui.live.texts import DRAW_PERIOD

    src = FakeSource(1)
    app = LiveApp(src, interval=0.25, command=["python3", "train.py"], store_dir=Path(src.store))
    draws: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot, src.n_scripted)
        count_draws(app, draws)
        for i in range(1, 6):
            src.push_sample(i)
        await settle(app, pilot, src.n_scripted)
        assert len(app.history.chart) >= 6  # every sample is in the history
        await asyncio.sleep(DRAW_PERIOD + 0.3)
        await pilot.pause()
        assert 1 <= len(draws) <= 2, draws  # five samples, at most two draws
        assert app.latest is not None and app.latest.elapsed == src.samples[-1].elapsed
        assert draws[-1] == src.samples[-1].elapsed  # the newest was drawn


async def test_the_samples_of_one_hand_over_are_drawn_once_at_once() -> None:
    """The reader hands over the samples that came since the last draw together: the newest is drawn at once,
    once (a draw for each, or a timer left behind for the others, drew the same screen again 1.5 s later)."""
    from gputop_tracker.tui.live.messages import SamplerEvent
    from gputop_tracker.tui.live.texts import DRAW_PERIOD

    src = FakeSource(1)
    app = LiveApp(src, interval=0.5, command=["python3", "train.py"], store_dir=Path(src.store))
    draws: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot, src.n_scripted)
        await asyncio.sleep(DRAW_PERIOD)  # the first sample's draw is a period ago
        count_draws(app, draws)
        batch = [SampleMessage(make_sample(i, interval=0.5)) for i in range(1, 4)]
        app.post_message(SamplerEvent(batch))  # type: ignore[arg-type]
        await pilot.pause()
        assert draws == [batch[-1].sample.elapsed]  # at once, the newest
        await asyncio.sleep(DRAW_PERIOD + 0.3)
        await pilot.pause()
        assert len(draws) == 1, draws  # and no second draw of the same


async def test_a_source_that_paces_its_samples_has_each_hand_over_drawn_at_once() -> None:
    """The sampler's reader hands samples over at most once a period itself (`hold`); the view draws each hand-over
    at once. Spaced by both, the two clocks drifted apart: a hand-over a little early (an event took the held
    samples with it) set a timer, and every draw after it came a second late, for good."""
    from gputop_tracker.tui.live.messages import SamplerEvent

    src = FakeSource(1)
    src.hold = 1.5  # type: ignore[attr-defined]
    app = LiveApp(src, interval=0.5, command=["python3", "train.py"], store_dir=Path(src.store))
    draws: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot, src.n_scripted)
        count_draws(app, draws)
        for i in (1, 2):
            await asyncio.sleep(0.8)  # over half a period since the last draw: the source spaced them
            sample = make_sample(i, interval=0.5)
            app.post_message(SamplerEvent([SampleMessage(sample)]))
            await pilot.pause()
            assert draws[-1:] == [sample.elapsed], draws  # at once, though a whole period has not passed
        assert app.pacer.timer is None


def test_final_summary_stays_inside_its_border() -> None:
    """Every line of the summary panel fits its content width: figures cut, the saved path shortened, a note
    (the detach line) wrapped; a run that ended before its first sample reads '-', not 0 B."""
    from gputop_tracker.tui.widgets.panels import SummaryPanel

    src = FakeSource(4)
    u = make_summary(src.samples, store=src.store)
    u.session_path = "/very/long/path/" + "x" * 80 + "/20250301-120000-demo.json"
    shown: list[str] = []
    panel = SummaryPanel()
    panel.update = lambda text: shown.append(str(text))  # type: ignore[method-assign,assignment]
    note = "detached: PID 4242 keeps running; its output goes on to /home/me/.local/share/x/y.output.log"
    for width in (30, 38, 48):
        shown.clear()
        panel.show_final(u, False, note, width=width)
        lines = shown[-1].splitlines()
        assert all(len(line) <= width for line in lines), (width, lines)
        assert "".join(lines).replace(" ", "").endswith("y.output.log")  # the whole note, wrapped
    u.max_ram.combined.total_rss = 0
    panel.show_final(u, False, width=48)
    assert "peak RAM    - (ended before a sample)" in shown[-1]


def test_after_detach_the_terminal_says_the_pid_runs_on_and_where_its_output_goes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gputop_tracker.tui.live import run

    src = FakeSource(2)
    u = make_summary(src.samples, status="detached", exit_code=None, store=src.store)
    run._say_how_it_ended(u, True, Path("/store/s1.output.log"))
    err = capsys.readouterr().err
    assert f"detached: PID {u.pid} keeps running; its output goes on to /store/s1.output.log" in err
