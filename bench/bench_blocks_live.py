"""Cost in the sampler of the live view's blocks table and of the cgroup peak windows.

    python bench/bench_blocks_live.py

- `live_blocks()` when nothing changed (what every streamed sample pays; a run without blocks never gets
  further), and `BlockStats.live()` (building the table) at several numbers of names and open runs;
- one cgroup peak window (a reset at a block's start, a read at its end) on this machine's job cgroup,
  where one can be made.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gputop_tracker.core.blocks.stats import BlockStats
from gputop_tracker.core.blocks.summary import BlocksPart
from gputop_tracker.core.proc import cgroup
from gputop_tracker.core.summary.builder import SummaryBuilder


class _NoEvents:
    def add(self, *a: object, **k: object) -> None:
        pass


def best(fn: object, n: int) -> float:
    out = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()  # type: ignore[operator]
        out = min(out, (time.perf_counter() - t0) / n)
    return out


def stats(names: int, open_runs: int) -> BlockStats:
    s = BlockStats()
    done = [
        {"k": k, "pid": 1, "id": i, "name": f"block {i}", "t": float(i), "dur": 0.01}
        for i in range(names)
        for k in "se"
    ]
    s.feed(done, _NoEvents(), lambda: False)
    s.feed(
        [{"k": "s", "pid": 2, "id": i, "name": f"block {i % names}", "t": 1.0} for i in range(open_runs)],
        _NoEvents(),
        lambda: False,
    )
    return s


def main() -> None:
    b = BlocksPart.attach(SummaryBuilder(main_pid=1, command=["x"], mode="launch", interval=1.0, start_time=0.0))
    print(f"live_blocks(), nothing changed: {best(lambda: b.live_blocks(time.monotonic()), 100_000) * 1e9:.0f} ns")
    for names, open_runs in ((10, 2), (100, 10), (1000, 100), (1000, 10_000)):
        s = stats(names, open_runs)
        print(f"BlockStats.live() {names:5d} names {open_runs:6d} open runs: {best(s.live, 20) * 1e3:.3f} ms")
    cg = cgroup.create_job_cgroup(f"bench-{time.time_ns()}")
    if cg is None:
        print("cgroup peak window: no cgroup can be made here")
        return
    try:
        w = cgroup.PeakWindows(cg)

        def window() -> None:
            token = w.open()
            if token is not None:
                w.close(token)

        cost = best(window, 2000)
        print(f"cgroup peak window ({cg.version}, {'resettable' if w.ok else 'not resettable'}): {cost * 1e6:.1f} µs")
    finally:
        cg.remove()


if __name__ == "__main__":
    main()
