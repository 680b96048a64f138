"""What the in-process probe adds to a Python process's start-up (target: at most 5 ms) and to its exit.

Start-up: `python -c pass` with and without the probe first on PYTHONPATH (the session's FIFO variable set, so
the probe installs its hooks and reports at exit), runs alternated, median CPU time of each (start to exit);
also with the probe in a directory its bytecode cannot be cached in (another Python version of the tree), and
the probe's own import as `python -X importtime` reports it (the cumulative µs of `sitecustomize`). Exit: the
wall time of the exit report itself (a FIFO with a reader).

    python bench/bench_probe.py [runs]
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from gputop_tracker.core.blocks.probe import PROBE_DIR, probe_environment


def _start(env: dict[str, str], flags: tuple[str, ...] = ()) -> float:
    """CPU seconds (user + system) of one `python -c pass`, start to exit: unlike wall time, not inflated by
    the other work of a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *flags, "-c", "pass"], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


PEAK_CODE = (
    "import sys\ns = sys.modules.get('sitecustomize')\n"
    "getattr(s, '_report', lambda how: None)('exit')  # the exit report, now: its cost lands in VmHWM below\n"
    "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])"
)


def _peak(env: dict[str, str]) -> int:
    """The peak RSS (bytes) of one `python -c pass`, the exit report included: VmHWM read by the process itself
    after its report (a child's ru_maxrss would hold the parent's pages its vfork inherited)."""
    out = subprocess.run([sys.executable, "-c", PEAK_CODE], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout) * 1024


def _importtime(env: dict[str, str], flags: tuple[str, ...] = ()) -> int:
    out = subprocess.run(
        [sys.executable, *flags, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True, check=True
    ).stderr
    # the outermost line: ours, with the chained import of the one it shadows inside it
    return max(int(line.split("|")[1]) for line in out.splitlines() if line.rstrip().endswith(" sitecustomize"))


EXIT_CODE = (
    "import time, sitecustomize as s\nt = time.perf_counter(); s._report('exit'); print(time.perf_counter() - t)"
)


def _exit_cost(env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", EXIT_CODE], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout)


def _drain(fd: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.01)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    probe_environment({})  # the bytecode cached for this interpreter, as a tracked run does
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "blocks")
        os.mkfifo(fifo)
        rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        stop = threading.Event()
        reader = threading.Thread(target=_drain, args=(rfd, stop), daemon=True)
        reader.start()
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUTOP_TRACKER_BLOCKS")}
        probed = {**base, "PYTHONPATH": PROBE_DIR, "GPUTOP_TRACKER_BLOCKS": fifo}
        # another Python version of the tree, in a directory it cannot cache into: compiled at each start
        copy = os.path.join(d, "probe")
        shutil.copytree(PROBE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
        uncached: tuple[str, ...] = ()
        nocache = {**probed, "PYTHONPATH": copy, "PYTHONDONTWRITEBYTECODE": "1"}
        times: dict[str, list[float]] = {"without": [], "with": [], "compiled each start": []}
        for _ in range(runs):
            times["without"].append(_start(base))
            times["with"].append(_start(probed))
            times["compiled each start"].append(_start(nocache, uncached))
        n = max(5, runs // 3)
        imports = [_importtime(probed) for _ in range(n)]
        imports_uncached = [_importtime(nocache, uncached) for _ in range(n)]
        exits = [_exit_cost(probed) for _ in range(n)]
        peaks = {
            k: [_peak(e) for _ in range(n)] for k, e in (("without", base), ("with", probed), ("uncached", nocache))
        }
        stop.set()
        reader.join()
        os.close(rfd)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(
        f"python -c pass, median of {runs} CPU time start to exit: "
        + ", ".join(
            f"{k} probe {v:.2f} ms" if k != "compiled each start" else f"probe {k} {v:.2f} ms" for k, v in med.items()
        )
    )
    print(
        f"  start-up added (difference of medians): {med['with'] - med['without']:+.2f} ms, "
        f"compiled each start {med['compiled each start'] - med['without']:+.2f} ms (target ≤ 5 ms)"
    )
    print(
        f"  the probe's import (-X importtime, median of {n}): {statistics.median(imports) / 1e3:.2f} ms with its "
        f"bytecode cached, {statistics.median(imports_uncached) / 1e3:.2f} ms compiled at start"
    )
    print(
        f"  its exit report (VmHWM, allocators, one FIFO write; median of {n}): {statistics.median(exits) * 1e3:.2f} ms"
    )
    pk = {k: statistics.median(v) / 2**20 for k, v in peaks.items()}
    print(
        f"  peak RSS of python -c pass (ru_maxrss, median of {n}): without {pk['without']:.2f} MiB, with the probe "
        f"{pk['with']:.2f} MiB ({pk['with'] - pk['without']:+.2f}), bytecode not cached {pk['uncached']:.2f} MiB "
        f"({pk['uncached'] - pk['without']:+.2f}) (target ≤ 1 MiB)"
    )


if __name__ == "__main__":
    main()
