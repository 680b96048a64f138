"""A demanding terminal user's findings in the live view: hostile output, tiny terminals, resize storms."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
from fakesource import FakeSource
from helpers import output_reader
from test_tui import settle
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Footer, Label, Static

from gputop_tracker.core.model.text import clean_output
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.live.output_pane import OutputPane

HOSTILE = (
    "a\x1bcb"  # RIS: resets the viewer's whole terminal
    "\x1b7\x1b8\x1b=\x1b>\x1bM"  # save/restore cursor, keypad modes, reverse index
    "\x1b(0q\x1b(B"  # G0 = DEC line drawing: every later letter would be a box piece
    "\x0eshift\x0f"  # SO/SI: switch to the G1 character set and back
    "\x1b#8"  # DECALN: fill the screen with E
    "\x07\x08\x0b\x0c\x00\x7f"  # bell, backspace, VT, FF, NUL, DEL
    "\u009b2J\u009d0;t\u009c"  # C1 controls in UTF-8: an 8-bit CSI and OSC
    "\x1bP1$r\x1b\\"  # DCS string
    "\x1b[?1049h\x1b[?1000h"  # alternate screen, mouse reporting
    "\x1b[31mred\x1b[0m"  # colours stay
)


def has_control(s: str) -> bool:
    return any(unicodedata.category(c) == "Cc" for c in s)


def test_clean_output_leaves_no_terminal_control_but_colours() -> None:
    out = clean_output(HOSTILE + "\r\n")
    assert out.count("\x1b") == 2 and "\x1b[31m" in out and "\x1b[0m" in out
    rest = out.replace("\x1b[31m", "").replace("\x1b[0m", "")
    assert not has_control(rest.replace("\n", "").replace("\r", "").replace("\t", "")), repr(rest)
    assert rest.startswith("ab") and "shift" in rest and "red" in rest


async def test_output_pane_sends_no_control_character_to_the_terminal() -> None:
    src = FakeSource(2, output=[])
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(100, 30)) as pilot:
        out = app.query_one("#output", OutputPane)
        # an escape cut between two reads: the pane joins the halves, they must be cleaned as a whole
        for chunk in [
            clean_output(HOSTILE),
            "\x1b",
            "czz",
            "\tcol\there\n",
            clean_output(bytes(range(256)).decode("utf-8", "replace")),
        ]:
            out.write(chunk)
        await pilot.pause()
        for y in range(len(out.lines)):
            strip = out.render_line(y - round(out.scroll_y))
            text = "".join(seg.text for seg in strip)
            assert not has_control(text), repr(text)
            assert strip.cell_length == out.size.width


@pytest.mark.parametrize("size", [(40, 12), (60, 15), (79, 20), (100, 20), (120, 24), (250, 16), (300, 90), (80, 24)])
async def test_small_terminals_keep_the_header_the_table_and_the_footer_on_screen(size: tuple[int, int]) -> None:
    src = FakeSource(3)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot, src.n_scripted)
        check_layout(app, size)
        for other in [(300, 90), (40, 12), (120, 40), (60, 15), size]:  # a resize storm, back to the size
            await pilot.resize_terminal(*other)
            await pilot.pause()
        await pilot.pause()
        check_layout(app, size)


def check_layout(app: LiveApp, size: tuple[int, int]) -> None:
    height = size[1]
    screen = app.screen
    assert screen.max_scroll_y == 0, f"the screen scrolls by {screen.max_scroll_y} rows at {size}"
    header = app.query_one("#header").region
    assert header.y == 0 and header.height == 2
    footer = app.query_one(Footer).region
    assert footer.bottom == height
    procs = app.query_one("#procs").region
    assert procs.height >= 4, f"table {procs} at {size}: not one process row"
    main = app.query_one("#main").region
    assert procs.bottom <= main.bottom, f"table {procs} cut by the panels under it ({main}) at {size}"
    side = app.query_one("#side")
    if side.display and side.region.height:
        assert side.region.bottom <= main.bottom, f"side panels {side.region} cut ({main}) at {size}"
    for widget in app.query("#main, #charts, #output").results():
        if widget.display and widget.region.height:
            assert widget.region.bottom <= footer.y, f"{widget.id} {widget.region} under the footer at {size}"


def test_a_command_line_with_newlines_and_escapes_stays_on_its_row() -> None:
    from fakesource import make_sample

    from gputop_tracker.tui.live.process_rows import process_cells

    base = make_sample(3).processes[0]
    script = "import time\nfor i in range(30):\n\tprint('\x1b[2J', i)"
    for p in (
        base.model_copy(update={"cmdline": ["python3", "-c", script], "name": "python3"}),
        base.model_copy(update={"cmdline": ["\x1bc\rx"], "name": "x"}),
        base.model_copy(update={"cmdline": [], "name": "evil\x1b[2J\n"}),  # a comm set by prctl
    ):
        for room in (0, 30):
            cells = process_cells(p, 1, ["pid", "name", "state"], name_width=room)
            assert not any(has_control(text) for text, _style in cells), cells
    cells = process_cells(base.model_copy(update={"cmdline": ["python3", "-c", script]}), 0, ["name"], name_width=200)
    assert cells[0][0].startswith("python3 -c import time\\nfor i in range(30):\\n\\tprint('\\x1b[2J', i)")


def test_a_flood_of_output_reaches_the_view_in_a_few_tail_batches(tmp_path: Path) -> None:
    """`yes | head -c 200M`: the reader handed the view every 64 kB (3,200 messages, 100 million lines, each
    parsed), so samples waited behind them for many minutes. A flood is read in large batches, and only its
    last lines (more than the pane keeps) are handed on: the whole output stays in the log file."""
    from gputop_tracker.tui.live.run import TAIL_LINES

    path = tmp_path / "out.log"
    path.write_bytes(b"y\n" * 20_000_000 + b"DONE\n")
    r = os.open(path, os.O_RDONLY)
    source, got, reader = output_reader(r)
    try:
        deadline = time.monotonic() + 120
        while not "".join(got[-1:]).endswith("DONE\n") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        source.close()
        reader.join(10)
        os.close(r)
    assert "".join(got).endswith("y\ny\nDONE\n")
    assert len(got) <= 10, f"{len(got)} batches"
    assert all(text.count("\n") <= TAIL_LINES for text in got)


async def test_the_output_pane_parses_only_the_lines_it_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.text import Text

    calls = 0
    from_ansi = Text.from_ansi

    def counting(*args: object, **kwargs: object) -> Text:
        nonlocal calls
        calls += 1
        return from_ansi(*args, **kwargs)  # type: ignore[arg-type]

    src = FakeSource(2, output=[])
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(100, 30)) as pilot:
        out = app.query_one("#output", OutputPane)
        out.write("first\npartial ")
        monkeypatch.setattr(Text, "from_ansi", counting)
        out.write("".join(f"\x1b[32mline {i}\x1b[0m\n" for i in range(50_000)) + "last\r")
        await pilot.pause()
        assert calls <= out.max_lines + 1
        assert out.lines[0] == "line 48000" and out.lines[-2:] == ["line 49999", "last"]
        assert len(out.lines) == out.max_lines + 1  # and the unfinished line
        out.write("over\n")
        assert out.lines[-1] == "over" and out.lines[-2] == "line 49999"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_a_flood_of_output_does_not_hold_up_the_view_in_a_terminal(tmp_path: Path) -> None:
    """`yes | head -c 50M` (25 million lines): the header, the table and the final summary keep up."""
    from test_tui_e2e import start_in_tmux, wait_file, wait_for

    job = "yes | head -c 50M; echo; echo DONE; sleep 3"
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", "bash", "-c", job]
    session, rc_file = start_in_tmux(tmp_path, track, size=(120, 40))
    try:
        wait_for(session, r"exited with code 0", 90)
        wait_for(session, r"│DONE\s", 10)
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        assert wait_file(rc_file, 20) == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    log = next((tmp_path / "store").glob("*.output.log"))
    assert log.stat().st_size == 50 * 1024 * 1024 + len("\nDONE\n")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_ctrl_z_suspends_the_view_and_fg_draws_it_whole_again(tmp_path: Path) -> None:
    """As htop: Ctrl-Z gives the shell back (the command runs on, still sampled), `fg` returns to the view,
    drawn whole (not only the cells that changed while the shell wrote over it)."""
    from test_tui_e2e import new_tmux_session, screen, wait_for

    log = tmp_path / "ticks"
    job = f"import time\nfor i in range(600):\n    print(i, file=open({str(log)!r}, 'w'), flush=True); time.sleep(0.1)"
    track = [
        sys.executable,
        "-m",
        "gputop_tracker",
        "--store",
        str(tmp_path / "store"),
        "--",
        sys.executable,
        "-c",
        job,
    ]
    session = new_tmux_session(tmp_path, "bash --norc", (100, 30), prefix="gputop-adv")
    try:
        subprocess.run(["tmux", "send-keys", "-t", session, shlex.join(track), "Enter"], check=True)
        wait_for(session, r"● running", 30)
        subprocess.run(["tmux", "send-keys", "-t", session, "C-z"], check=True)
        wait_for(session, r"Stopped", 15)
        before = int(log.read_text() or 0)
        deadline = time.monotonic() + 15
        while int(log.read_text() or 0) < before + 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert int(log.read_text() or 0) >= before + 5, "the command stopped with the view"
        subprocess.run(["tmux", "send-keys", "-t", session, "clear; fg", "Enter"], check=True)
        # the header, first line, drawn again (the command's start: an interpreter path may be cut before its name)
        wait_for(session, r"\A ▶ \S*(python|…)", 15)
        wait_for(session, r"╭─ processes", 5)
        assert "Stopped" not in screen(session)
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        wait_for(session, r"Stop tree", 10)
        subprocess.run(["tmux", "send-keys", "-t", session, "s"], check=True)
        wait_for(session, r"exited|signal|SIGTERM", 20)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


async def test_question_mark_in_history_lists_the_history_keys(tmp_path: Path) -> None:
    """`?` did nothing in `--history` and, opened from the live view, showed the live view's keys; the
    history's hidden keys (g jobs, j job, f5 reload) were nowhere to be found."""
    from test_tui import history_from_live_view

    from gputop_tracker.tui.history.app import HistoryApp
    from gputop_tracker.tui.history.screens.sessions import HistoryScreen
    from gputop_tracker.tui.screens.help import HelpScreen

    def help_text(app: object) -> str:
        screen = app.screen  # type: ignore[attr-defined]
        assert isinstance(screen, HelpScreen), screen
        return "\n".join(_screen_text(screen.query_one(Static)))  # as shown

    history = HistoryApp(tmp_path / "empty")
    async with history.run_test(size=(80, 24)) as pilot:
        await history.workers.wait_for_complete()
        await pilot.press("question_mark")
        await pilot.pause()
        text = help_text(history)
        for key in ("space", "g", "j", "f5", "⏎", "/", "d"):
            assert re.search(rf"(^|\s){re.escape(key)}(\s|$)", text, re.MULTILINE), (key, text)
        assert "gputop-track live view" not in text
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(history.screen, HistoryScreen)

    async with history_from_live_view(tmp_path) as (live, pilot):
        await pilot.press("f1")
        await pilot.pause()
        text = help_text(live)
        assert "Mark" in text or "mark" in text
        assert "pause the display" not in text  # the live view's keys do not act here


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_closing_the_terminal_hangs_up_the_whole_job_not_only_its_first_process(tmp_path: Path) -> None:
    """`bash -c 'worker & wait'` in the live view and the terminal closes: without the tool the kernel hangs up
    the job's whole process group and the worker ends with bash; the view passed SIGHUP to bash alone, and the
    worker ran on, orphaned. The session is saved all the same."""
    from test_tui_e2e import alive, start_in_tmux, wait_file, wait_for

    pid_file = tmp_path / "worker.pid"
    worker = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    job = f"{shlex.quote(sys.executable)} -c {shlex.quote(worker)} & wait"
    track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--", "bash", "-c", job]
    session, _rc = start_in_tmux(tmp_path, track, size=(100, 30))
    try:
        wait_for(session, r"● running", 30)
        pid = int(wait_file(pid_file, 30))
        wait_for(session, rf"^│\s+{pid}\s", 15)  # tracked
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert not alive(pid), "the worker survived the hang-up"
    finally:
        if alive(pid):
            os.kill(pid, 9)
    # the session is on disk from the start (running); the sampler writes its end once the tree is gone
    deadline = time.monotonic() + 30
    meta: dict[str, object] = {}
    while time.monotonic() < deadline:
        files = sorted((tmp_path / "store").glob("[!.]*.json"))
        meta = json.loads(files[0].read_text())["meta"] if files else {}
        if meta.get("exit_code") is not None or meta.get("signal"):
            break
        time.sleep(0.1)
    assert meta.get("exit_code") is not None or meta.get("signal"), meta


def test_a_job_that_exits_at_once_gets_a_readable_chart() -> None:
    """`gputop-track -- true`: one sample of 0 B, 20 ms. The RAM chart's axis read 1 B, 0.75 B, 0.5 B (a
    fraction of a byte) and its time axis 0s 0s 0s."""
    from textual.app import App, ComposeResult

    from gputop_tracker.tui.widgets.charts import Series, TimeChart

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield TimeChart("RAM", [0.0], [Series("Σ PSS", [0.0], "green")], id="ram")
            yield TimeChart("RAM", [0.0, 0.02], [Series("Σ PSS", [0.0, 0.0], "green")], id="ram2")

    async def run() -> None:
        app = One()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            for chart in app.query(TimeChart).results():
                text = chart.render().plain
                assert not re.search(r"\b0\.\d+ B\b", text), text
                axis = text.splitlines()[-1].split()
                assert len(set(axis)) == len(axis) >= 2, axis

    asyncio.run(run())


NASTY = 'print("\x1b[31mstep\x1b[0m", i, "\\r", end="", flush=True)  [b]x[/b] [link=foo] [/]'


async def test_square_brackets_in_a_command_a_filter_or_a_search_do_not_crash_the_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `python -c` script with `[0m", …, flush=True)` in it was read as Textual markup in the table's
    subtitle: MarkupError, the view died with a traceback (exit 1) while the job ran on."""
    import fakesource as fake

    monkeypatch.setattr(fake, "COMMAND", ["python3", "-c", NASTY])
    src = FakeSource(3)
    app = LiveApp(src, interval=1.0, command=["python3", "-c", NASTY], store_dir=Path(src.store))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot, src.n_scripted)
        table = app.query_one("#procs")
        assert "[link=foo]" in table.border_subtitle  # shown as written
        await pilot.press("slash", *"[x=1]", "enter")
        await pilot.pause()
        await pilot.press("escape", "f", *"[/b] [x=", "enter")
        await pilot.pause()
        await pilot.press("tab", "enter")  # the process in full
        await pilot.pause()
        await pilot.press("escape", "k")  # the signal dialog names it
        await pilot.pause()
        await pilot.press("escape", "q")  # and the quit dialog
        await pilot.pause()
        assert app.is_running and app.return_code is None


async def test_a_store_path_with_brackets_is_shown_not_parsed(tmp_path: Path) -> None:
    """`--store '/data/run[x=1]/'`: the notification 'session saved: …' at the end crashed the view."""
    store = tmp_path / 'st[x="1"' / "a[b=c"
    store.mkdir(parents=True)
    src = FakeSource(3, store=str(store), finished=True)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot, src.n_scripted)
        await pilot.pause()
        assert app.is_running and app.return_code is None
        from textual.content import Content

        notes = list(app._notifications)
        assert any('st[x="1"' in n.message for n in notes), notes
        for n in notes:  # as a toast draws it
            shown = Content.from_markup(n.message) if n.markup else Content(n.message)
            assert n.message == shown.plain


async def test_the_output_pane_follows_the_tail_across_a_resize() -> None:
    """A job printing a line a tenth of a second, the terminal made smaller: the pane stayed on the line it
    showed then (a shorter pane scrolls further, so its end looked "scrolled back") and never moved again."""
    src = FakeSource(2, output=[])
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot, src.n_scripted)
        out = app.query_one("#output", OutputPane)
        n = 0
        for size in [(40, 12), (60, 15), (80, 24), (200, 20), (50, 60), (40, 12)]:
            out.write("".join(f"line {n + i}\n" for i in range(30)))
            n += 30
            await pilot.pause()
            await pilot.resize_terminal(*size)
            await pilot.pause()
            out.write(f"line {n}\n")
            n += 1
            await pilot.pause()
            await pilot.pause()
            last = round(out.scroll_y) + out.size.height - 1
            assert out.scroll_y == out.max_scroll_y and out.lines[last] == f"line {n - 1}", (size, out.scroll_y)
        # scrolled back by the user, a resize leaves the text being read where it is
        out.scroll_to(y=5, animate=False, immediate=True)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        out.write("more\n")
        await pilot.pause()
        assert out.scroll_y == 5


def _screen_text(widget: Widget) -> list[str]:
    strips = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return ["".join(seg.text for seg in strip).rstrip() for strip in strips]


@pytest.mark.parametrize("size", [(40, 12), (60, 15), (80, 24)])
async def test_dialogs_wrap_their_lines_and_stay_on_a_small_terminal(size: tuple[int, int]) -> None:
    """At 60x15 the quit dialog cut every line at its edge ("SIGTERM to the command and every proc", "the
    command keeps ru"); at 40x12 its buttons and bottom border were off the screen."""
    from gputop_tracker.tui.live.screens.kill_dialog import KillScreen
    from gputop_tracker.tui.live.screens.quit_dialog import QuitScreen
    from gputop_tracker.tui.live.screens.signal_dialog import SignalScreen

    src = FakeSource(3, output=[])
    app = LiveApp(src, interval=1.0, command=["python3", "train.py", "--epochs", "100"], store_dir=Path(src.store))
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot, src.n_scripted)
        for key, kind in [("q", QuitScreen), ("k", SignalScreen), (None, KillScreen)]:
            if key is None:
                app.push_screen(KillScreen(3, 5.0, "PID 4242 (python3 train.py --epochs 100)"))
            else:
                await pilot.press(key)
            await pilot.pause()
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, kind)
            dialog = screen.query_one(".dialog")
            assert screen.region.contains_region(dialog.region), (kind.__name__, dialog.region, size)
            for label in dialog.query(Label).results():
                assert label.region.right <= dialog.content_region.right, (kind.__name__, str(label.render()), size)
            await pilot.press("escape")
            await pilot.pause()


async def test_the_help_wraps_beside_its_keys_and_its_keys_scroll_it() -> None:
    """At 80x24 the help was cut off after "/ f4" with no way to read the rest (no key scrolled it), and its
    lines, broken by hand for 90 columns, wrapped back to the dialog's left edge between the keys."""
    from gputop_tracker.tui.screens.help import HelpScreen

    src = FakeSource(2, output=[])
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot, src.n_scripted)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        dialog = app.screen.query_one("#help-dialog")
        assert app.screen.region.contains_region(dialog.region)
        lines = _screen_text(app.screen.query_one(Static))
        sigkill = next(line for line in lines if "SIGTERM, then" in line)
        assert sigkill.startswith("  "), lines  # beside the keys "q ctrl+c f10", not under them
        assert dialog.max_scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert dialog.scroll_y == dialog.max_scroll_y
        await pilot.press("home")
        await pilot.pause()
        assert dialog.scroll_y == 0
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.parametrize(
    ("size", "gpus"), [((200, 20), 2), ((120, 30), 2), ((120, 40), 2), ((160, 50), 2), ((60, 15), 0), ((80, 24), 2)]
)
async def test_the_run_so_far_stays_on_screen_on_a_short_terminal(size: tuple[int, int], gpus: int) -> None:
    """Wide and short (200x20), or 120x30 with two GPUs: the side panels stood beside a table a few rows high
    and the run so far (peak RAM, CPU time, GPU memory) was below the screen's edge; at 60x15 the host line
    wrapped and the summary under it was cut. The charts give way first, and where the panels cannot stand
    beside the table they stack under it in their compact form."""
    from gputop_tracker.tui.widgets.panels import SummaryPanel

    src = FakeSource(6, n_gpus=gpus)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot, src.n_scripted)
        await pilot.pause()
        side = app.query_one("#side")
        summary = app.query_one("#summary", SummaryPanel)
        assert side.max_scroll_y == 0, f"the side panels are {side.max_scroll_y} rows taller than their room"
        assert "peak RAM" in str(summary.render())
        assert side.region.contains_region(summary.region) and summary.region.height > 0
        check_layout(app, size)


@pytest.mark.parametrize("dialog", ["q", "k"])
async def test_the_job_ending_while_a_dialog_is_open_closes_it(dialog: str) -> None:
    """`gputop-track -- sleep 3`, q, and the job ends while the dialog is open: it went on saying "PID … is
    still running" and offering to stop it; d then only said "waiting for the sampler…" and the view stayed. The
    signal dialog stayed too: a t there would signal a PID of the ended tree, which may be another process's now."""
    from gputop_tracker.tui.live.screens.quit_dialog import QuitScreen
    from gputop_tracker.tui.live.screens.signal_dialog import SignalScreen

    src = FakeSource(3, output=[])
    app = LiveApp(src, interval=1.0, command=["sleep", "3"], store_dir=Path(src.store))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot, src.n_scripted)
        await pilot.press(dialog)
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen if dialog == "q" else SignalScreen)
        src._end(exit_code=0)  # the job exits by itself
        for _ in range(200):
            if app.final is not None:
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        await pilot.pause()
        assert not isinstance(app.screen, QuitScreen | SignalScreen), "a dialog about a run that ended"
        await pilot.press("d", "s")  # the quit dialog's keys, pressed a moment too late, act on nothing
        await pilot.pause()
        assert src.signals == [] and src.tree_signals == [] and not src.stopped
        await pilot.press("q")  # the run is over: q quits at once, with the command's exit code
        await pilot.pause()
    assert app.return_code == 0


async def test_attached_the_header_and_the_quit_dialog_name_the_process() -> None:
    """`--attach PID`: the header read "attached to 4242" and the quit dialog "PID 4242 is still running",
    nothing saying what that process is, until it ended."""
    from fakesource import MAIN_PID

    from gputop_tracker.tui.live.screens.quit_dialog import QuitScreen

    src = FakeSource(3, output=[])
    app = LiveApp(src, interval=1.0, command=None, mode="attach", store_dir=Path(src.store))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot, src.n_scripted)
        main = next(p for p in src.samples[-1].processes if p.pid == MAIN_PID)
        shown = " ".join(main.cmdline)
        head = str(app.query_one("#header", Static).content)
        assert f"attached to {MAIN_PID}: {shown}" in head, head
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        assert shown in str(app.screen.query(Label).first().render())
        await pilot.press("escape")


async def test_a_terminal_too_small_says_so_and_the_view_comes_back() -> None:
    """At 20x5 the view drew a few broken borders and the screen scrolled; at 100x6 a table with no row."""
    src = FakeSource(3, output=[])
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(20, 5)) as pilot:
        await settle(app, pilot, src.n_scripted)
        for size in [(20, 5), (100, 6), (39, 30)]:
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await pilot.pause()
            note = app.query_one("#too-small", Static)
            assert note.display and note.region.height > 0
            text = str(note.render())
            assert text.startswith(f"Terminal too small ({size[0]}×{size[1]}). q quits."), text
            assert not any(w.region.height for w in app.query("#header, #main, #charts, #output").results())
            assert app.screen.max_scroll_y == 0
        await pilot.resize_terminal(40, 12)  # the smallest the view is drawn at
        await pilot.pause()
        await pilot.pause()
        assert not app.query_one("#too-small").region.height
        check_layout(app, (40, 12))
        assert app.query_one("#procs").has_focus
        await pilot.press("q")
        await pilot.pause()
        from gputop_tracker.tui.live.screens.quit_dialog import QuitScreen

        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")


def test_a_dumb_terminal_gets_the_headless_report(tmp_path: Path) -> None:
    """TERM=dumb (Emacs' M-x shell, compile buffers): stdin and stdout are a pty, so the live view started and
    wrote its escape sequences (alternate screen, cursor moves, mouse reporting) into a terminal that shows
    them as text, and waited for a q that such a terminal user had no reason to press."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: the tool on the pty, as a shell in a dumb terminal runs it
        env = {**os.environ, "TERM": "dumb", "GPUTOP_TRACKER_STORE": str(tmp_path / "store")}
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
        os.execve(sys.executable, [sys.executable, "-m", "gputop_tracker", "--", "true"], env)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not chunk:
            break
        out += chunk
        if b"\x1b[?1049h" in out:  # the live view started: it would wait for a q
            os.kill(pid, signal.SIGTERM)
            break
    else:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert b"\x1b[?1049h" not in out and b"\x1b[?1000h" not in out, out[:300]
    assert os.waitstatus_to_exitcode(status) == 0, out
    assert b"session " in out and b" saved: " in out, out  # the headless run's last line
