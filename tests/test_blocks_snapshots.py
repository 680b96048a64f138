"""Snapshots of the code blocks in the views, with deterministic fake data: the live view's blocks table (key b;
under the process table on a large terminal) and the history charts shading blocks with marks on the time axis.

Update after an intended change of the look: pytest tests/test_blocks_snapshots.py --snapshot-update
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakesource import FakeSource
from test_history import _press_after_load
from test_history_sessions import make_session
from test_tui_snapshots import SIZES, settled

from gputop_tracker.core.model import models
from gputop_tracker.core.report.listing import block_spans
from gputop_tracker.core.store import sessions as store
from gputop_tracker.tui.history.app import HistoryApp
from gputop_tracker.tui.live.app import LiveApp


def make_live() -> LiveApp:
    src = FakeSource(20, blocks=True)
    return LiveApp(src, interval=1.0, command=["python3", "train.py", "--epochs", "3"], store_dir=Path(src.store))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_live_blocks_table(snap_compare: Any, size: tuple[int, int]) -> None:
    app = make_live()
    keys = () if size == (160, 50) else ("b",)  # large: shown under the processes by itself
    first = settled(app, *keys)

    async def run_before(pilot: Any) -> None:
        await first(pilot)
        for _ in range(2):  # the table's layout after its class changed (a loaded machine draws late)
            await pilot.wait_for_scheduled_animations()
            await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


# --------------------------------------------------------------------------- history: blocks shaded, marks on the axis

PHASES = [
    ("load data", 0.0, 45.0),
    ("train epoch", 50.0, 250.0),
    ("train epoch", 255.0, 450.0),
    ("evaluate", 455.0, 520.0),
]
MARKS = [(50.0, "epoch 1"), (255.0, "epoch 2"), (521.0, "best model")]


def session_with_blocks() -> dict[str, Any]:
    """A generated 10-minute session whose program ran phases (with steps nested in them) and made marks."""
    s = make_session(3, duration=600.0, n_gpus=1, command=["python3", "train.py"])
    start, pid = s["meta"]["start_time"], s["meta"]["pid"]

    def event(kind: str, t: float, name: str) -> dict[str, Any]:
        return {"time": start + t, "elapsed": t, "type": kind, "message": name, "pid": pid, "name": name}

    events = []
    for name, t0, t1 in PHASES:
        events.append(event("block_start", t0, name))
        if name == "train epoch":  # steps inside: left in their epoch's shade
            events += [event(k, t0 + 10 + d, "train step") for d in (0, 40) for k in ("block_start", "block_end")]
        events.append(event("block_end", t1, name))
    events += [event("mark", t, name) for t, name in MARKS]
    s["summary"]["events"] = sorted(s["summary"]["events"] + events, key=lambda e: e["elapsed"])
    return s


@pytest.fixture
def blocks_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    monkeypatch.chdir(tmp_path)
    store.save_session(tmp_path / "store", session_with_blocks())
    yield Path("store")
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_block_spans_are_the_outermost_runs_and_the_marks() -> None:
    spans, marks = block_spans(models.Session.model_validate(session_with_blocks()))
    assert spans == [(name, t0, t1) for name, t0, t1 in PHASES]
    assert marks == [(t, name) for t, name in MARKS]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_history_charts_shade_blocks_and_mark_the_axis(
    snap_compare: Any, blocks_store: Path, size: tuple[int, int]
) -> None:
    assert snap_compare(HistoryApp(blocks_store), terminal_size=size, run_before=_press_after_load("enter"))
