"""Edges of the live view's plumbing found in review: a chart of gaps only, an output file truncated under the
reader, an export failure told again while it lasts."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import output_reader, wait_for
from textual.app import App, ComposeResult

from gputop_tracker.tui.live import run as live
from gputop_tracker.tui.widgets.charts import Series, TimeChart, _largest


def test_a_series_of_gaps_only_scales_to_zero() -> None:
    """A GPU that reports no utilization (a MIG slice) gives [None]: max() compares nothing and returned None."""
    assert _largest([None]) == 0.0
    assert _largest([None, 3.0, None]) == 3.0
    assert _largest([]) == 0.0
    assert _largest([0.0, 2.5]) == 2.5


def test_a_chart_of_gaps_draws() -> None:
    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield TimeChart("GPU util", [0.0], [Series("GPU0", [None], "magenta")], unit="percent", y_top=100)

    async def run() -> None:
        app = One()
        async with app.run_test(size=(60, 12)) as pilot:
            await pilot.pause()
            chart = app.query_one(TimeChart)
            assert "GPU util" in chart.render().plain

    asyncio.run(run())


def test_output_reader_follows_a_file_truncated_under_it() -> None:
    """logrotate's copytruncate empties the output log: the reader starts again at its start, not past its end."""
    fd, name = tempfile.mkstemp()
    os.close(fd)
    w = os.open(name, os.O_WRONLY | os.O_APPEND)
    r = os.open(name, os.O_RDONLY)
    source, got, reader = output_reader(r)
    try:
        os.write(w, b"epoch 1 of 3, loss 0.93\n" * 20)
        deadline = time.monotonic() + 30
        while "".join(got).count("epoch 1") < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.truncate(name, 0)
        time.sleep(0.3)
        os.write(w, b"after the rotation\n")
        while "after the rotation" not in "".join(got) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "after the rotation" in "".join(got)
    finally:
        source.close()
        reader.join(10)
        os.close(w)
        os.close(r)
        os.unlink(name)


def test_a_textfile_that_cannot_be_written_is_told_again_while_it_lasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told once, not every 2 s; but again a minute later: a first notice lost while the view started up is
    not the only one."""
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from gputop_tracker.core.integrations.exporters import prometheus

    told: list[str] = []
    clock = [1000.0]
    monkeypatch.setattr(prometheus.time, "monotonic", lambda: clock[0])
    writer = prometheus.TextfileWriter(str(tmp_path / "gone" / "job.prom"), CollectorRegistry())
    writer.report = told.append
    writer.write()
    clock[0] += 2
    writer.write()
    assert len(told) == 1 and "cannot write" in told[0] and "tracking goes on" in told[0]
    clock[0] += prometheus.REPORT_AGAIN
    writer.write()
    assert len(told) == 2
    (tmp_path / "gone").mkdir()
    writer.write()  # it works again: the next failure is told at once
    assert (tmp_path / "gone" / "job.prom").exists()
    (tmp_path / "gone" / "job.prom").unlink()
    (tmp_path / "gone").rmdir()
    clock[0] += 1
    writer.write()
    assert len(told) == 3


def test_signals_after_the_view_closed_are_held_then_passed_to_the_command() -> None:
    """Between the view's end and a takeover (the sampler died) a SIGTERM ended us with the default action,
    leaving the command running untracked; now it is held and passed to the command's group once we wait for
    it — and after that, sent straight on."""
    import signal
    import subprocess
    import sys

    from gputop_tracker.tui.live.run import HeldSignals

    saved = {sig: signal.getsignal(sig) for sig in HeldSignals.SIGNALS}
    command = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )  # its own group, as a launched command
    try:
        held = HeldSignals()
        held.hold()
        os.kill(os.getpid(), signal.SIGTERM)  # would have ended the test process
        deadline = time.monotonic() + 10
        while not held.held and time.monotonic() < deadline:
            time.sleep(0.01)
        assert held.held == [signal.SIGTERM] and command.poll() is None
        held.forward_to(command.pid)
        assert command.wait(30) == -signal.SIGTERM and held.held == []
        os.kill(os.getpid(), signal.SIGINT)  # its group is gone now: nothing raised, nothing held
        time.sleep(0.05)
        assert held.held == []
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if command.poll() is None:
            command.kill()


def test_close_returns_only_once_no_reader_is_inside_its_fd(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_live closes the output fd (and the sampler's pipe) right after `close()`; Textual does not join its
    thread workers, so a reader descheduled inside a read could then read, seek or fstat a closed fd, or one
    reused meanwhile (the session file the takeover rewrites)."""
    r, w = os.pipe()
    os.write(w, b"some output\n")
    inside, left = threading.Event(), threading.Event()
    real_read = os.read

    def slow_read(fd: int, n: int) -> bytes:
        if fd == r and not inside.is_set():
            inside.set()
            time.sleep(0.5)  # descheduled in the read
            data = real_read(fd, n)
            left.set()
            return data
        return real_read(fd, n)

    monkeypatch.setattr(live.os, "read", slow_read)
    source = live.SamplerSource(handle=None, output_fd=r)  # type: ignore[arg-type]
    reader = threading.Thread(target=lambda: list(source.output()), daemon=True)
    reader.start()
    try:
        assert inside.wait(30)
        source.close()
        assert left.is_set()  # close() waited for the reader to leave its read
    finally:
        source.close()
        reader.join(10)
        os.close(w)
        os.close(r)
    assert not reader.is_alive()


@contextmanager
def _sampler_pipe(hold: float) -> Iterator[tuple[int, list[tuple[float, list[str]]], Callable[[], None]]]:
    """A SamplerSource reading a pipe the test writes the sampler's lines into; yields the pipe's write end, the
    hand-overs it makes (each with its time and the kinds of its messages, collected by a thread), and `end()`,
    which closes the pipe and waits for the reader to take the rest (also done on the way out)."""
    r, w = os.pipe()
    handle = type("Handle", (), {"read_fd": r})()
    source = live.SamplerSource(handle, output_fd=-1, hold=hold)  # type: ignore[arg-type]
    got: list[tuple[float, list[str]]] = []

    def take() -> None:
        for batch in source.batches():
            got.append((time.monotonic(), [type(m).__name__ for m in batch]))

    reader = threading.Thread(target=take, daemon=True)
    reader.start()
    ended: list[bool] = []

    def end() -> None:
        if not ended:
            ended.append(True)
            os.close(w)
            reader.join(30)
            assert not reader.is_alive()

    try:
        yield w, got, end
    finally:
        end()
        source.close()
        for fd in (r, source._wake_r, source._wake_w):
            os.close(fd)


def _sample_line(i: int) -> bytes:
    from fakesource import make_sample

    return json.dumps({"kind": "sample", "sample": make_sample(i).model_dump(mode="json")}).encode() + b"\n"


STARTED_LINE = b'{"kind": "started", "pid": 1, "session_id": "s", "store": "/nonexistent"}\n'


def _event_line(kind: str) -> bytes:
    return json.dumps({"kind": "event", "event": {"time": 1.0, "type": kind, "pid": 7}}).encode() + b"\n"


def test_samples_alone_wait_for_the_next_draw_anything_else_goes_at_once() -> None:
    """Each hand-over of the sampler's messages wakes the view, which draws at most once a second: samples alone
    are held until `hold` has passed since the last hand-over (every one reaches the view, in order); a message
    of another kind takes what is held with it at once, and the end of the pipe takes the rest."""
    with _sampler_pipe(hold=60.0) as (w, got, end):
        os.write(w, _sample_line(0))  # the first goes at once
        wait_for(lambda: len(got) == 1, 30, "the first sample")
        os.write(w, _sample_line(1))
        time.sleep(0.3)  # apart: two reads
        os.write(w, _sample_line(2) + _event_line("process_exited") + _event_line("block_start"))
        time.sleep(0.5)
        assert len(got) == 1, got  # held, with the events that are no alert: the view is not woken for them
        os.write(w, _event_line("warning"))  # an alert goes at once
        wait_for(lambda: len(got) == 2, 30, "the held samples with the alert")  # long before the 60 s hold
        assert got[1][1] == ["SampleMessage", "SampleMessage", "EventMessage", "EventMessage", "EventMessage"]
        os.write(w, _sample_line(3))
        time.sleep(0.3)
        os.write(w, STARTED_LINE)  # and so does anything else
        wait_for(lambda: len(got) == 3, 30, "the held sample with the start")
        assert got[2][1] == ["SampleMessage", "Started"]
        os.write(w, _sample_line(4))
        time.sleep(0.3)
        assert len(got) == 3
        end()
    assert got[3][1] == ["SampleMessage"]  # the end takes what was held


def test_held_samples_are_handed_over_once_the_hold_has_passed() -> None:
    with _sampler_pipe(hold=0.4) as (w, got, _):
        os.write(w, _sample_line(0))
        wait_for(lambda: len(got) == 1, 30, "the first sample")
        os.write(w, _sample_line(1))
        wait_for(lambda: len(got) == 2, 30, "the held sample, without more coming")
        assert got[1][0] - got[0][0] >= 0.4 - 0.02  # not before the hold
        assert got[1][1] == ["SampleMessage"]


def test_held_samples_go_with_the_sample_that_comes_near_the_end_of_the_hold() -> None:
    """The hand-overs keep step with the samples: the first read from 0.9 of the hold on takes the held samples with
    it (the newest is drawn as it comes), rather than the hold's end handing over a sample that is already old."""
    with _sampler_pipe(hold=3.0) as (w, got, _):
        os.write(w, _sample_line(0))
        wait_for(lambda: len(got) == 1, 30, "the first sample")
        os.write(w, _sample_line(1))
        # just after the hold (between 0.9 x 3 s and 1.2 x 3 s): it goes with the one held, at once; the hold's
        # end had handed the held one over alone, and this one would have waited a whole hold more
        time.sleep(max(got[0][0] + 3.15 - time.monotonic(), 0.0))
        os.write(w, _sample_line(2))
        wait_for(lambda: len(got) == 2, 30, "the held samples")
        assert got[1][1] == ["SampleMessage", "SampleMessage"]
