"""Attached to a running process: the output pane says its output is not captured, the command is named as the
user would type it, and detaching names the PID left running."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from fakesource import FakeSource, make_summary
from textual.widgets import Static

from gputop_tracker.tui.live import run
from gputop_tracker.tui.live.app import ATTACHED_OUTPUT, LiveApp
from gputop_tracker.tui.live.output_pane import OutputPane
from gputop_tracker.tui.live.texts import left_running, typed_command


def test_a_command_as_the_user_would_type_it() -> None:
    sh = shutil.which("sh")
    assert sh is not None
    assert typed_command((sh, "-c", "exit 3")) == ("sh", "-c", "exit 3")  # as executed: sh, not dash
    assert typed_command(("/opt/no-such-dir/python3", "train.py")) == ("/opt/no-such-dir/python3", "train.py")
    assert typed_command(("python3", "train.py")) == ("python3", "train.py")
    assert typed_command(()) == ()


async def test_attached_the_output_pane_says_it_is_not_captured_and_the_header_names_the_command_as_typed() -> None:
    sh = shutil.which("sh") or "/bin/sh"
    src = FakeSource(2, output=[])
    for s in src.samples:
        s.processes[0].cmdline = [sh, "-c", "sleep 100"]
    app = LiveApp(src, interval=1.0, command=[], mode="attach", store_dir=Path(src.store))
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(300):
            if app.n_messages >= src.n_scripted:
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        out = app.query_one("#output", OutputPane)
        assert out.lines == ATTACHED_OUTPUT.splitlines() and str(out.border_title) == "output: not captured"
        header = str(app.query_one("#header", Static).content).splitlines()[0]
        assert header.endswith(": sh -c sleep 100"), header


@pytest.mark.parametrize(("mode", "status", "left"), [("attach", "stopped", True), ("launch", "detached", True)])
def test_detaching_names_the_pid_left_running(
    capsys: pytest.CaptureFixture[str], mode: str, status: str, left: bool
) -> None:
    """Attached, the sampler calls a detach "stopped": the terminal said only "session saved"."""
    final = make_summary(FakeSource(2).samples).model_copy(update={"mode": mode, "status": status, "pid": 4242})
    assert left_running(final) is left
    run._say_how_it_ended(final, True, None)
    err = capsys.readouterr().err
    assert "detached: PID 4242 keeps running" in err
    assert not left_running(final.model_copy(update={"status": "exited"}))
