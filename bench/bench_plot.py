"""Pictures and the notebook magic's live feed: what they cost.

    python bench/bench_plot.py [--rows N] [--gpus G] [--seconds S]

1. Drawing a session of N timeline rows (default 14,400: the cap a long run is merged down to) with G GPUs:
   seconds and bytes for PNG, SVG and HTML (`core/plot.py`, as `sessions plot` draws it).
2. The live feed `%%gputop` uses (`Tracker.on_sample`: every sample sent to and decoded in the tracked
   process): CPU-seconds of this process over S idle seconds at 0.2 s, with and without it.
"""

from __future__ import annotations

import argparse
import math
import resource
import tempfile
import time

from gputop_tracker.core.model.models import Event, GpuSummary, ResourceUsage, Session, SessionMeta, Timeline
from gputop_tracker.core.report import plot
from gputop_tracker.core.summary.builder import TIMELINE_COLUMNS


def synthetic(rows: int, gpus: int) -> Session:
    cols = [*TIMELINE_COLUMNS]
    for g in range(gpus):
        cols += [f"gpu{g}_memory", f"gpu{g}_util"]
    data: list[list[float | None]] = []
    for i in range(rows):
        ram = 2e9 + 1e9 * math.sin(i / 300)
        row: list[float | None] = [i * 1.0, ram, ram * 0.9, ram * 0.1, ram * 0.7, ram * 0.3]
        row += [150 + 50 * math.sin(i / 50), 90.0, i * 1.5, 12, 3, 4e9, 8e9, 40.0]
        for g in range(gpus):
            row += [3e9 + g * 1e8 + 5e8 * math.sin(i / 200), 50 + 40 * math.sin(i / 100 + g)]
        data.append(row)
    events = [Event(time=1000.0 + t, elapsed=t, type=k, name="step", pid=1) for t, k in ((100, "block_start"), (900, "block_end"), (3000, "warning"), (5000, "oom"))]  # fmt: skip
    usage = ResourceUsage(
        events=events,
        start_time=1000.0,
        gpus=[GpuSummary(index=g, uuid=f"GPU-{g}", name="bench") for g in range(gpus)],
    )
    usage.compute_time.time = float(rows)
    meta = SessionMeta(id="bench", command=["train.py"], start_time=1000.0, end_time=1000.0 + rows)
    return Session(meta=meta, summary=usage, timeline=Timeline(columns=cols, rows=data))


def draw(rows: int, gpus: int) -> None:
    session = synthetic(rows, gpus)
    for fmt in ("png", "svg", "html"):
        t0 = time.perf_counter()
        data = plot.picture(session, fmt)
        dt = time.perf_counter() - t0
        print(f"draw {rows} rows, {gpus} GPUs, {fmt:<4}  {dt:6.2f} s  {len(data) / 1e6:6.2f} MB")


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def feed(seconds: float) -> None:
    from gputop_tracker import Tracker

    with tempfile.TemporaryDirectory() as store:
        for live in (False, True):
            tracker = Tracker(sleep_time=0.2, store=store)
            got = []
            if live:
                tracker.on_sample(got.append)
            before = cpu_self()
            with tracker:
                time.sleep(seconds)
            used = cpu_self() - before
            label = f"with on_sample ({len(got)} samples)" if live else "without on_sample"
            print(f"tracked process CPU over {seconds:g} s idle at 0.2 s, {label}: {used:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=14400)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    plot.figure(synthetic(10, 0))  # matplotlib's import and font cache, outside the timings
    draw(args.rows, args.gpus)
    feed(args.seconds)


if __name__ == "__main__":
    main()
