"""The live view's alerts stay until read: the header names the latest (figure, limit, time), `a` lists them all."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from fakesource import START_TIME, FakeSource
from textual.widgets import Static

from gputop_tracker.core.model.models import Event
from gputop_tracker.core.sampling.channel import EventMessage
from gputop_tracker.tui.live.alerts import AlertLog, figure
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.live.screens.alerts_dialog import AlertsScreen

GB = 1e9


@pytest.fixture(autouse=True)
def _utc(utc: None) -> None:
    """Times of day on screen in UTC."""


def ram_alert(kind: str, percent: float, at: float) -> Event:
    limit = 8 * GB
    return Event(
        time=START_TIME + at,
        elapsed=at,
        type=kind,
        message=f"RAM {percent:.0f}% of --mem-limit ({percent * 80:.0f} MB of 8000 MB)",
        resource="ram",
        value=percent / 100 * limit,
        limit=limit,
        percent=percent,
    )


def test_the_header_names_the_latest_with_its_figure_limit_and_time() -> None:
    log = AlertLog()
    assert log.header() is None and not log.add(Event(time=START_TIME, type="peak", message="tree RAM peak"))
    assert log.add(ram_alert("critical", 96.0, 5.0))
    assert log.add(Event(time=START_TIME + 9, type="warning", resource="gpu1", value=64.8e9, limit=80e9, percent=81.0))
    header = log.header()
    assert header is not None
    assert header.plain.strip() == (
        "WARNING GPU 1 memory 81% of 80.0 GB (64.8 GB) at 12:00:09 (+1 more, worst CRITICAL)  a: alerts"
    )
    assert "reverse red" in str(header.spans[0].style)  # the worst's colour, bright while unread
    log.read()
    header = log.header()
    assert header is not None and "reverse" not in str(header.spans[0].style)
    assert header.plain.startswith("WARNING GPU 1 memory 81%")  # read, it stays, quiet
    assert figure(Event(time=0, type="oom", message="CUDA out of\nmemory")) == "CUDA out of memory"
    assert log.worst == "critical"


async def test_an_alert_is_findable_30_s_after_it_fired() -> None:
    """The pop-up closes after a few seconds; 30 s of samples later (the fake source's clock) the header still
    names the alert with its figure, limit and time, and `a` lists it."""
    src = FakeSource(3)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(160, 50)) as pilot:
        src.push(EventMessage(ram_alert("critical", 96.0, 3.0)))
        for _ in range(31):  # 30 s of samples after it, one a second
            src.push_sample()
        for _ in range(500):
            if app.n_messages >= src.n_scripted:
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        assert app.latest is not None and app.latest.time >= START_TIME + 33
        app.clear_notifications()  # the pop-up has long closed
        header = str(app.query_one("#header", Static).content)
        assert "CRITICAL RAM 96% of 8.00 GB (7.68 GB) at 12:00:03" in header and "a: alerts" in header
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AlertsScreen)
        text = str(app.screen.query_one("#alerts-text", Static).content)
        assert "12:00:03  +0:00:03  CRITICAL  RAM 96% of 8.00 GB (7.68 GB)" in text
        await pilot.press("escape")
        await pilot.pause()
        header = str(app.query_one("#header", Static).content)
        assert "CRITICAL RAM 96%" in header and "a: alerts" not in header  # read: named, no longer bright


async def test_alerts_key_with_no_alert_says_so() -> None:
    src = FakeSource(2)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AlertsScreen)
        assert "No alert so far" in str(app.screen.query_one(Static).content)
    assert time.localtime(START_TIME).tm_hour == 12  # the zone the times above are written in
