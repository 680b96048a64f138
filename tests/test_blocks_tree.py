"""The tree's figures during a code block: the job cgroup's own peak, reset for the block where the kernel allows
it (exact), else the largest tree total the samples saw (sampled); and the run's own peak never lost to a reset."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from test_blocks import MB, PRELUDE, _blocks

from gputop_tracker.core.blocks.stats import TREE_SAMPLED, BlockStats
from gputop_tracker.core.model import models
from gputop_tracker.core.proc import cgroup as cgroups
from gputop_tracker.core.proc.cgroup import JobCgroup, PeakWindows


def _resettable() -> bool:
    """This machine lets us make a cgroup and reset its peak (cgroup v1, or v2 from Linux 6.12)."""
    cg = cgroups.create_job_cgroup(f"probe-{id(object())}")
    if cg is None:
        return False
    try:
        windows = PeakWindows(cg)
        token = windows.open()
        if token is None:
            return False
        return windows.close(token) is not None
    finally:
        cg.remove()


CHILD = """
buf = touch(200 * 1000 * 1000)
truth("child", hwm())
with block("hold"):  # its start is sampled while the child holds the 200 MB
    synced()
"""

MAIN = """
import subprocess
big = touch(400 * 1000 * 1000)
truth("main_before", hwm())
del big
synced()
with block("children"):
    subprocess.run([sys.executable, {child!r}], check=True)
synced()
"""


def _children_block(tmp_path: Path, env: dict[str, str]) -> tuple[dict, dict]:  # type: ignore[type-arg]
    child = tmp_path / "child.py"
    child.write_text(PRELUDE + textwrap.dedent(CHILD))
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(MAIN.format(child=str(child))))
    from helpers import track_json

    truth_file = tmp_path / "truth.jsonl"
    proc, report = track_json(
        tmp_path, "--interval", "5", "--", sys.executable, str(script), env={"TRUTH": str(truth_file), **env}
    )
    assert proc.returncode == 0, proc.stderr
    import json

    truth = {t["key"]: t for t in map(json.loads, truth_file.read_text().splitlines())}
    return report, truth


@pytest.mark.skipif(not _resettable(), reason="no resettable memory cgroup here (cgroup v1, or v2 on Linux >= 6.12)")
def test_tree_peak_of_a_block_from_the_cgroup_and_the_run_peak_survives(tmp_path: Path) -> None:
    report, truth = _children_block(tmp_path, {})
    children = _blocks(report)["children"]
    # exact where the group's window is not below what the tree surely held; below it (library pages charged
    # elsewhere, as a Python main's are here) that lower bound stands, labelled so
    source = children["sources"]["tree_peak_ram"]
    assert source.startswith("exact (the run's own cgroup") or source == TREE_SAMPLED, source
    # the child's 200 MB were charged to the group (its VmHWM also counts file pages charged elsewhere)
    assert children["tree_peak_ram"] >= 200 * MB and children["tree_peak_ram"] >= 0.95 * truth["child"]["value"]
    # the reset at the block's start left out the 400 MB the main process had freed before
    assert children["tree_peak_ram"] < truth["main_before"]["value"]
    # ... while the run's own cgroup peak kept it
    assert report["max_ram"]["cgroup_peak"] >= 400 * MB
    assert report["max_ram"]["cgroup_peak"] >= children["tree_peak_ram"]
    hold = _blocks(report)["hold"]
    assert hold["tree_peak_ram"] is not None and hold["tree_peak_ram"] >= 200 * MB
    v1 = "max_usage_in_bytes" in children["sources"]["tree_peak_ram"]
    # cgroup v1 has one peak per group: a block inside another gets no reset of its own, only sampled figures
    hold_source = hold["sources"]["tree_peak_ram"]
    assert hold_source == TREE_SAMPLED if v1 else (hold_source.startswith("exact") or hold_source == TREE_SAMPLED)


def test_tree_peak_of_a_block_without_a_cgroup_is_sampled(tmp_path: Path) -> None:
    report, truth = _children_block(tmp_path, {"GPUTOP_TRACKER_NO_CGROUP": "1"})
    children = _blocks(report)["children"]
    assert children["sources"]["tree_peak_ram"] == TREE_SAMPLED
    # a sample saw the child hold its 200 MB (the boundary sample at the start of its block "hold")
    assert children["tree_peak_ram"] >= 200 * MB and children["tree_peak_ram"] >= 0.97 * truth["child"]["value"]
    assert report["max_ram"]["cgroup_peak"] is None


def test_a_v1_reset_keeps_the_run_peak_and_opens_one_window_at_a_time(tmp_path: Path) -> None:
    """cgroup v1's reset is global: one window at a time, and what a reset cleared stays the group's peak."""
    (tmp_path / "memory.max_usage_in_bytes").write_text("500\n")
    cg = JobCgroup("v1", tmp_path, created=True)
    w = PeakWindows(cg)
    first = w.open()
    assert first is not None and w.open() is None  # a second block while one is open: no window
    assert (tmp_path / "memory.max_usage_in_bytes").read_text() == "0"  # the reset (the kernel: usage now)
    (tmp_path / "memory.max_usage_in_bytes").write_text("120\n")
    assert w.close(first) == 120
    assert cg.peak() == 500  # the run's peak as it was before the reset
    assert PeakWindows(JobCgroup("v1", tmp_path, created=False)).open() is None  # never a group we did not make


def test_marks_count_in_the_blocks_open_and_the_live_table(strict_models: None) -> None:
    class Events:
        def add(self, *a: object, **k: object) -> None:
            pass

    stats = BlockStats()
    msgs = [
        {"k": "s", "pid": 1, "id": 1, "name": "train", "t": 10.0},
        {"k": "s", "pid": 2, "id": 1, "name": "load", "t": 11.0},
        {"k": "m", "pid": 1, "name": "epoch 1", "t": 12.0},
        {"k": "e", "pid": 2, "id": 1, "name": "load", "t": 13.0, "dur": 2.0, "cpu": 0.5, "peak": 7 * MB},
        {"k": "m", "pid": 1, "name": "epoch 2", "t": 14.0},
    ]
    v0 = stats.version
    stats.feed(msgs, Events(), lambda: True)
    assert stats.version > v0
    live = {b["name"]: b for b in stats.live()["blocks"]}
    assert list(live) == ["train", "load"]  # in order of first start
    assert live["train"]["open"] == 1 and live["train"]["calls"] == 0 and live["train"]["marks"] == 2
    assert live["load"]["open"] == 0 and live["load"]["calls"] == 1 and live["load"]["marks"] == 1
    assert live["load"]["peak_ram"] == 7 * MB and live["load"]["duration_total"] == 2.0
    assert live["train"]["peak_ram"] is None  # no sample saw it: unknown, not zero
    assert stats.summary()[0]["marks"] == 1
    models.LiveBlocks.model_validate(stats.live())  # extra="forbid": the streamed table has the models' keys
    models.BlockSummary.model_validate(stats.summary()[0])


def test_v2_windows_each_have_their_own_file_and_a_refusal_stops_them(tmp_path: Path) -> None:
    """cgroup v2 from Linux 6.12 (not on every machine that runs the tests): a window is an fd on memory.peak
    with "reset" written to it, read at its end; the kernel keeps the group's own peak for other readers."""
    peak = tmp_path / "memory.peak"
    peak.write_text("999\n")
    cg = JobCgroup("v2", tmp_path, created=True)
    w = PeakWindows(cg)
    outer, inner = w.open(), w.open()  # nested windows: both (each its own fd)
    assert outer is not None and inner is not None and outer != inner
    assert peak.read_text() == "reset\n"
    peak.write_text("4096\n")  # what the kernel would answer through those fds
    assert w.close(inner) == 4096 and w.close(outer) == 4096 and w.n_open == 0
    refusing = tmp_path / "old"
    (refusing / "memory.peak").mkdir(parents=True)  # cannot be opened for writing, as before Linux 6.12
    w2 = PeakWindows(JobCgroup("v2", refusing, created=True))
    assert w2.open() is None and not w2.ok and w2.open() is None


def test_the_live_table_is_bounded_to_the_most_recently_active_names() -> None:
    from gputop_tracker.core.blocks.stats import MAX_LIVE

    class Events:
        def add(self, *a: object, **k: object) -> None:
            pass

    stats = BlockStats()
    n = MAX_LIVE + 50
    msgs = [{"k": k, "pid": 1, "id": i, "name": f"b{i}", "t": float(i), "dur": 0.0} for i in range(n) for k in "se"]
    stats.feed(msgs, Events(), lambda: False)
    live = stats.live()
    assert live["names"] == n and len(live["blocks"]) == MAX_LIVE
    assert [b["name"] for b in live["blocks"]] == [f"b{i}" for i in range(50, n)]


@pytest.mark.parametrize(
    ("window", "expected", "exact"),
    [
        (300 * MB, 300 * MB, True),  # the group held more than the process: the group's figure
        # a little below the process's own peak (library pages charged elsewhere): it bounds nothing, and the tree's
        # other processes held their own pages too; the process's own peak stands, a lower bound
        (98 * MB, 100 * MB, False),
        (60 * MB, 100 * MB, False),  # far below: the process's own peak stands, a lower bound
        (None, 100 * MB, False),  # no window (nested under cgroup v1): the lower bound
    ],
)
def test_a_blocks_tree_peak_is_the_cgroup_window_where_it_holds_up(
    window: int | None, expected: int, exact: bool
) -> None:
    class Windows:
        source = "test cgroup"

        def open(self) -> int | None:
            return None if window is None else 7

        def close(self, token: int, read: bool = True) -> int | None:
            return window

    class Events:
        def add(self, *a: object, **k: object) -> None:
            pass

    stats = BlockStats()
    stats.windows = Windows()
    start = {"k": "s", "pid": 1, "id": 1, "name": "b", "t": 1.0}
    end = {"k": "e", "pid": 1, "id": 1, "name": "b", "t": 2.0, "dur": 1.0, "cpu": 0.1, "peak": 100 * MB}
    stats.feed([start, end], Events(), lambda: False)
    (b,) = stats.summary()
    assert b["tree_peak_ram"] == expected
    assert b["sources"]["tree_peak_ram"].startswith("exact (test cgroup") == exact
    assert b["sources"]["tree_peak_ram"] == TREE_SAMPLED or exact
