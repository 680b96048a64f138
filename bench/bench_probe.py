"""What the in-process probe adds to a Python process's start-up (target: at most 5 ms) and to its exit.

Start-up: `python -c pass` with and without the probe first on PYTHONPATH (the session's FIFO variable set, so
the probe installs its hooks), runs alternated, median wall time of each; and the probe's own import as
`python -X importtime` reports it (the cumulative µs of `sitecustomize`). Exit: the time from the probe's
report to the reader having it is not in the program's way except at exit; measured as the wall time of the
exit report itself (a FIFO with a reader).

    python bench/bench_probe.py [runs]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from gputop_tracker.core.blocks.probe import PROBE_DIR


def _start(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - t0


def _importtime(env: dict[str, str]) -> int:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True, check=True
    ).stderr
    # the outermost line: ours, with the chained import of the one it shadows inside it
    return max(int(line.split("|")[1]) for line in out.splitlines() if line.rstrip().endswith(" sitecustomize"))


def _drain(fd: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.01)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "blocks")
        os.mkfifo(fifo)
        rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        stop = threading.Event()
        reader = threading.Thread(target=_drain, args=(rfd, stop), daemon=True)
        reader.start()
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUTOP_TRACKER_BLOCKS")}
        probed = {**base, "PYTHONPATH": PROBE_DIR, "GPUTOP_TRACKER_BLOCKS": fifo}
        without, with_probe = [], []
        for _ in range(runs):
            without.append(_start(base))
            with_probe.append(_start(probed))
        imports = [_importtime(probed) for _ in range(max(5, runs // 3))]
        stop.set()
        os.close(rfd)
    w, p = statistics.median(without), statistics.median(with_probe)
    print(f"python -c pass, median of {runs}: without probe {w * 1e3:.2f} ms, with probe {p * 1e3:.2f} ms")
    print(f"  start-up added (difference of medians): {(p - w) * 1e3:+.2f} ms (target ≤ 5 ms)")
    print(f"  the probe's import (-X importtime, median): {statistics.median(imports) / 1e3:.2f} ms")
    print(f"  PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r} (set: compiled at each start)")


if __name__ == "__main__":
    main()
