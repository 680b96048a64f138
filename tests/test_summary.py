"""SummaryBuilder on its own: the timeline stays bounded and keeps its peaks."""

from __future__ import annotations

import json

from gputop_tracker.core.summary.accumulators import TIMELINE_CAP
from gputop_tracker.core.summary.builder import SummaryBuilder


def test_timeline_of_a_day_at_1s_stays_small_and_keeps_the_peak() -> None:
    b = SummaryBuilder(main_pid=1, command=["x"], mode="launch", interval=1.0, start_time=0.0)
    n = 86_400
    for i in range(n):
        mem = 1_000_000_000 + (5_000_000_000 if i == 50_001 else 0)  # a one-sample spike
        b.timeline_data.append([float(i), mem, mem, 0, mem, 0, 50.0, 50.0, float(i), 4, 1, 0, 8_000_000_000, 30.0])
    tl = b.timeline()
    assert len(tl["rows"]) <= TIMELINE_CAP
    assert tl["stride"] >= 8
    size = len(json.dumps(tl))
    assert size < 20_000_000, size
    assert max(r[1] for r in tl["rows"]) == 6_000_000_000  # the spike survived the merging
    assert all(r[6] == 50.0 for r in tl["rows"])  # means stay means
    assert tl["rows"][-1][0] >= n - 2 * tl["stride"]
