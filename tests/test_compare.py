"""`sessions compare` (core/report/compare.py) on two hand-built sessions with known figures: the JSON-ready
comparison (diff = B - A, change in percent of A, None where a figure is missing or A is 0, blocks in A's order
then B's) and its text (human units or those asked for, signed differences, where a block ran, escapes)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gputop_tracker.core.model.models import (
    BlockDuration,
    BlockSummary,
    ComputeTime,
    CPUTime,
    GpuSummary,
    MaxGPURAM,
    MaxRAM,
    ResourceUsage,
    RSSValues,
    Session,
    SessionMeta,
)
from gputop_tracker.core.model.units import Units
from gputop_tracker.core.report.compare import compare, compare_text

GB = 1e9
MB = 1e6


def block(name: str, calls: int, total: float, peak: float, cpu: float, private: float | None = None) -> BlockSummary:
    return BlockSummary(
        name=name,
        calls=calls,
        duration=BlockDuration(total=total, min=total / calls, mean=total / calls, max=total / calls),
        peak_ram=peak,
        peak_private=private,
        cpu_seconds=cpu,
        mean_cpu_percent=100.0 * cpu / total,
    )


def session(
    sid: str,
    *,
    wall: float,
    tree: float,
    main: float,
    cpu: float,
    n: int,
    blocks: list[BlockSummary],
    gpu_peak: float | None = None,
) -> Session:
    usage = ResourceUsage(
        max_ram=MaxRAM(combined=RSSValues(total_rss=tree), main=RSSValues(total_rss=main)),
        compute_time=ComputeTime(time=wall),
        cpu_time=CPUTime(total=cpu, mean_percent=100.0 * cpu / wall),
        n_processes=n,
        blocks=blocks,
    )
    if gpu_peak is not None:
        usage.gpus = [GpuSummary(index=0, uuid="GPU-0", name="Fake")]
        usage.max_gpu_ram = MaxGPURAM(combined=gpu_peak)
    return Session(meta=SessionMeta(id=sid, command=["python", "train.py"], start_time=1000.0), summary=usage)


def pair(b_gpu: float | None = None) -> tuple[Session, Session]:
    a = session(
        "A-id",
        wall=100.0,
        tree=2 * GB,
        main=0.0,  # the main figure is 0 in A: a change in percent of it means nothing
        cpu=50.0,
        n=4,
        blocks=[block("load", 2, 0.5, 100 * MB, 0.4), block("train", 1, 60.0, 1.8 * GB, 45.0, private=1 * GB)],
    )
    b = session(
        "B-id",
        wall=150.0,
        tree=1.5 * GB,
        main=500 * MB,
        cpu=50.0,
        n=6,
        # B lists its own block first: the comparison still starts with A's order
        blocks=[block("eval", 4, 8.0, 700 * MB, 6.0), block("load", 3, 0.9, 300 * MB, 0.3, private=200 * MB)],
        gpu_peak=b_gpu,
    )
    return a, b


def figures(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["figure"]: r for r in rows}


# --------------------------------------------------------------------------- compare (JSON-ready)


def test_overall_figures_diff_is_b_minus_a_and_change_is_percent_of_a() -> None:
    cmp = compare(*pair())
    assert cmp["a"]["id"] == "A-id" and cmp["b"]["id"] == "B-id"
    f = figures(cmp["overall"])
    assert (f["duration"]["a"], f["duration"]["b"], f["duration"]["diff"]) == (100.0, 150.0, 50.0)
    assert f["duration"]["change_percent"] == pytest.approx(50.0)
    assert f["duration"]["unit"] == "seconds"
    assert f["peak_ram"]["diff"] == pytest.approx(-0.5 * GB)
    assert f["peak_ram"]["change_percent"] == pytest.approx(-25.0)
    assert f["peak_ram"]["unit"] == "bytes"
    assert f["processes"]["diff"] == 2 and f["processes"]["change_percent"] == pytest.approx(50.0)
    assert f["cpu_seconds"]["diff"] == 0.0 and f["cpu_seconds"]["change_percent"] == 0.0
    assert f["mean_cpu_percent"]["diff"] == pytest.approx(100 / 3 - 50)


def test_change_is_none_when_a_is_zero_but_the_difference_is_kept() -> None:
    f = figures(compare(*pair())["overall"])
    main = f["peak_ram_main"]
    assert main["a"] == 0.0 and main["b"] == 500 * MB
    assert main["diff"] == 500 * MB and main["change_percent"] is None


def test_gpu_figures_are_none_without_gpus_on_either_side() -> None:
    f = figures(compare(*pair())["overall"])
    for key in ("peak_gpu_ram", "mean_gpu_utilization"):
        assert f[key]["a"] is None and f[key]["b"] is None
        assert f[key]["diff"] is None and f[key]["change_percent"] is None


def test_a_gpu_figure_of_one_side_only_has_no_difference() -> None:
    f = figures(compare(*pair(b_gpu=4 * GB))["overall"])
    assert f["peak_gpu_ram"]["a"] is None and f["peak_gpu_ram"]["b"] == 4 * GB
    assert f["peak_gpu_ram"]["diff"] is None and f["peak_gpu_ram"]["change_percent"] is None


def test_blocks_in_a_order_then_b_and_where_each_ran() -> None:
    blocks = compare(*pair())["blocks"]
    assert [(x["name"], x["in"]) for x in blocks] == [("load", "both"), ("train", "a"), ("eval", "b")]
    load, train, ev = (figures(x["figures"]) for x in blocks)
    assert load["calls"]["diff"] == 1 and load["calls"]["change_percent"] == pytest.approx(50.0)
    assert load["duration_total"]["diff"] == pytest.approx(0.4)
    assert load["peak_ram"]["diff"] == pytest.approx(200 * MB) and load["peak_ram"]["change_percent"] == 200.0
    assert load["cpu_seconds"]["diff"] == pytest.approx(-0.1)
    # A's load block has no private figure: nothing to subtract from
    assert load["peak_private"]["a"] is None and load["peak_private"]["b"] == 200 * MB
    assert load["peak_private"]["diff"] is None and load["peak_private"]["change_percent"] is None
    assert train["peak_ram"]["a"] == 1.8 * GB and all(r["b"] is None and r["diff"] is None for r in train.values())
    assert ev["calls"]["b"] == 4 and all(r["a"] is None and r["diff"] is None for r in ev.values())


def test_a_session_without_a_summary_compares_as_zeros() -> None:
    _, b = pair()
    empty = Session(meta=SessionMeta(id="empty", status="interrupted"))
    cmp = compare(empty, b)
    f = figures(cmp["overall"])
    assert f["duration"]["a"] == 0.0 and f["duration"]["diff"] == 150.0 and f["duration"]["change_percent"] is None
    assert [(x["name"], x["in"]) for x in cmp["blocks"]] == [("eval", "b"), ("load", "b")]
    assert cmp["a"]["status"] == "interrupted"


# --------------------------------------------------------------------------- compare_text


def cells(text: str, label: str, after: str | None = None) -> list[str]:
    """The cells of the row `label` (in the section starting at the line `after`, if given)."""
    lines = text.splitlines()
    if after is not None:
        lines = lines[lines.index(after) :]
    for line in lines:
        parts = re.split(r" {2,}", line.strip())
        if parts[0] == label:
            return parts[1:]
    raise AssertionError(f"no row {label!r} in:\n{text}")


def test_text_in_human_units_with_signed_differences() -> None:
    text = compare_text(compare(*pair()))
    lines = text.splitlines()
    assert lines[0] == "A  A-id  python train.py" and lines[1] == "B  B-id  python train.py"
    assert cells(text, "duration") == ["1m 40.0s", "2m 30.0s", "+50.00 s", "+50.0%"]
    assert cells(text, "peak RAM (tree)") == ["2.00 GB", "1.50 GB", "-500.00 MB", "-25.0%"]
    assert cells(text, "peak RAM (main)") == ["0 B", "500.00 MB", "+500.00 MB", "-"]
    assert cells(text, "peak GPU RAM (tree)") == ["-", "-", "-", "-"]
    assert cells(text, "CPU time") == ["50.00 s", "50.00 s", "0.0 ms", "+0.0%"]  # no sign on no change
    assert cells(text, "mean CPU") == ["50.0%", "33.3%", "-16.7%", "-33.3%"]
    assert cells(text, "processes") == ["4", "6", "+2", "+50.0%"]
    assert cells(text, "time (total)", after="Block load") == ["500.0 ms", "900.0 ms", "+400.0 ms", "+80.0%"]
    assert cells(text, "peak private", after="Block load") == ["-", "200.00 MB", "-", "-"]


def test_text_says_where_a_block_ran_only() -> None:
    text = compare_text(compare(*pair()))
    heads = [line for line in text.splitlines() if line.startswith("Block ")]
    assert heads == ["Block load", "Block train  (only in A)", "Block eval  (only in B)"]
    assert cells(text, "calls", after="Block train  (only in A)") == ["1", "-", "-", "-"]
    assert cells(text, "calls", after="Block eval  (only in B)") == ["-", "4", "-", "-"]
    assert "no code blocks" not in text


def test_text_in_the_units_asked_for() -> None:
    units = Units(ram="gigabytes", gpu_ram="megabytes", time="minutes")
    text = compare_text(compare(*pair(b_gpu=4 * GB)), units)
    assert cells(text, "duration") == ["1.6667 minutes", "2.5000 minutes", "+0.8333 minutes", "+50.0%"]
    assert cells(text, "peak RAM (tree)") == ["2.000 gigabytes", "1.500 gigabytes", "-0.500 gigabytes", "-25.0%"]
    assert cells(text, "peak GPU RAM (tree)") == ["-", "4000.000 megabytes", "-", "-"]
    assert cells(text, "peak RAM", after="Block load") == [
        "0.100 gigabytes",
        "0.300 gigabytes",
        "+0.200 gigabytes",
        "+200.0%",
    ]
    assert " GB" not in text and " MB" not in text and " s " not in text  # no human unit left


def test_no_blocks_on_either_side_is_said() -> None:
    a, b = pair()
    for s in (a, b):
        assert s.summary is not None
        s.summary.blocks = []
    text = compare_text(compare(a, b))
    assert text.rstrip().endswith("no code blocks in either session")
    assert "Block " not in text


def test_control_characters_in_ids_and_block_names_are_escaped() -> None:
    a, b = pair()
    a.meta.id = "run\x1b]0;pwned\x07"
    b.meta.command = ["sh", "-c", "echo\tx"]
    assert a.summary is not None
    a.summary.blocks[0].name = "step\nBlock fake\u2028"
    text = compare_text(compare(a, b))
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", text)  # nothing but newlines
    lines = text.splitlines()
    assert lines[0].startswith("A  run\\x1b]0;pwned\\x07  ")
    assert lines[1] == "B  B-id  sh -c $'echo\\tx'"
    assert "Block step\\nBlock fake\\u2028  (only in A)" in lines
    assert sum(line.startswith("Block ") for line in lines) == 4  # load (A's, renamed), train, eval, load (B's)
