"""Cost of code blocks: outside tracking (the promise: under 2 µs a call) and while tracked.

    python bench/bench_blocks.py [-n N]

Outside tracking: `with block("x")`, a `@tracked` call (over the bare call), `mark()`, the best of 5 rounds
of N calls each. Tracked: the same against a real FIFO that this script reads meanwhile (what a block costs
the program under gputop-track: two /proc reads, a VmHWM reset and one non-blocking write per boundary).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.pop("GPUTOP_TRACKER_BLOCKS", None)

from gputop_tracker.api import blocks
from gputop_tracker.core.blocks.inbox import BlockInbox


def per_call(fn: Callable[[int], None], n: int) -> float:
    """Best of 5: seconds per call."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def with_block(n: int) -> None:
    block = blocks.block
    for _ in range(n):
        with block("x"):
            pass


def with_default_name(n: int) -> None:
    block = blocks.block
    for _ in range(n):
        with block():
            pass


def plain(n: int) -> None:
    f = _plain
    for _ in range(n):
        f()


def decorated(n: int) -> None:
    f = _decorated
    for _ in range(n):
        f()


def marks(n: int) -> None:
    mark = blocks.mark
    for _ in range(n):
        mark("m")


def _plain() -> None:
    return None


_decorated = blocks.tracked("f")(_plain)


def run(label: str, n: int) -> dict[str, float]:
    figures = {
        "with block('x')": per_call(with_block, n),
        "with block() (file:line)": per_call(with_default_name, n),
        "@tracked call (over a bare call)": per_call(decorated, n) - per_call(plain, n),
        "mark()": per_call(marks, n),
    }
    print(f"{label}:")
    for name, sec in figures.items():
        print(f"  {name:<34} {sec * 1e6:8.3f} µs per call")
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200_000, help="calls per round outside tracking")
    args = ap.parse_args()
    assert not blocks.tracking()
    off = run("outside tracking (no-op)", args.n)
    worst = max(off.values())
    print(f"  worst: {worst * 1e6:.3f} µs — {'OK' if worst < 2e-6 else 'OVER'} the 2 µs promise")
    inbox = BlockInbox.create()
    if inbox is None:
        print("tracked: no FIFO on this machine")
        return 0
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            inbox.read()
            time.sleep(0.001)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    blocks._activate(inbox.path)
    try:
        run("tracked (a real FIFO, read meanwhile)", max(args.n // 100, 1000))
        sink = blocks._sink
        print(f"  messages dropped: {sink.dropped if sink else 0}")
    finally:
        blocks._activate(None)
        stop.set()
        reader.join()
        inbox.close()
    return 0 if worst < 2e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
