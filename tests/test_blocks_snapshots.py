"""Snapshots of the code blocks in the views, with deterministic fake data: the live view's blocks table (key b;
under the process table on a large terminal) and the history charts shading blocks with marks on the time axis.

Update after an intended change of the look: pytest tests/test_blocks_snapshots.py --snapshot-update
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_tui_snapshots import SIZES, settled

from gputop_tracker.tui.fake import FakeSource
from gputop_tracker.tui.live_app import LiveApp


def make_live() -> LiveApp:
    src = FakeSource(20, blocks=True)
    return LiveApp(src, interval=1.0, command=["python3", "train.py", "--epochs", "3"], store_dir=Path(src.store))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_live_blocks_table(snap_compare: Any, size: tuple[int, int]) -> None:
    app = make_live()
    keys = () if size == (160, 50) else ("b",)  # large: shown under the processes by itself
    assert snap_compare(app, terminal_size=size, run_before=settled(app, *keys))
