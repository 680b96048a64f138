"""What alerts, the event timeline, the leak fit and the OOM flight recorder cost per sample.

    python bench/bench_events.py [BASE_COMMIT]     # ~30 s on 2 cores

The same readings of a real tree (1, 10, 100 processes) are folded into two SummaryBuilders: the one before
alerts and events (summary.py at BASE_COMMIT, default the parent of the commit that added events.py) and today's, with
its 60 s ring buffer on. CPU time of `SummaryBuilder.add` per sample, and of a whole sample (read + add)
as bench_core.sampler_cost measures it.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_core import spawn_tree  # noqa: E402

from gputop_tracker.core.gpu import open_backend  # noqa: E402
from gputop_tracker.core.proc.host import HostReader  # noqa: E402
from gputop_tracker.core.proc.procfs import ProcessTree  # noqa: E402
from gputop_tracker.core.summary.builder import SummaryBuilder  # noqa: E402
from gputop_tracker.core.summary.events import FlightRecorder  # noqa: E402


def old_summary(commit: str) -> ModuleType:
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:gputop_tracker/core/summary.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "summary_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("summary_before", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def base_commit() -> str:
    first = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--format=%H", "--diff-filter=A", "--", "gputop_tracker/core/events.py"],
        capture_output=True,
        text=True,
    ).stdout.split()
    return f"{first[-1]}^" if first else "HEAD"


def measure(n: int, before: ModuleType, samples: int = 200) -> tuple[float, float, float, int]:
    root = spawn_tree(n)
    try:
        tree = ProcessTree(root.pid, exclude={os.getpid()})
        host = HostReader()
        gpu = open_backend()
        kw = dict(main_pid=root.pid, command=["bench"], mode="attach", interval=0.1, start_time=time.time())
        old = before.SummaryBuilder(**kw)
        new = SummaryBuilder(**kw)
        new.recorder = FlightRecorder(60.0, 0.1)
        new.mem_limit = 1  # every sample above the critical level: the checks run in full
        new.events.sink = lambda e: None
        t_old, t_new, t_read = [], [], []
        for _ in range(samples):
            t0 = time.process_time()
            tree.discover()
            readings = tree.read(time.monotonic())
            gpus = gpu.read([r.handle.pid for r in readings])
            h = host.read()
            t_read.append(time.process_time() - t0)
            now = time.time()
            # alternate which goes first, so caches favour neither
            for b, out in ((old, t_old), (new, t_new)) if len(t_old) % 2 else ((new, t_new), (old, t_old)):
                t1 = time.perf_counter()
                b.add(now, readings, gpus, h)
                out.append(time.perf_counter() - t1)
            time.sleep(0.05)
        tree.close()
        ms = [statistics.median(x[1:]) * 1000 for x in (t_read, t_old, t_new)]
        return ms[0], ms[1], ms[2], len(new.recorder.samples_jsonl()) // max(len(new.recorder.ring), 1)
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(root.pid)])
        root.kill()
        root.wait()


def main() -> None:
    commit = sys.argv[1] if len(sys.argv) > 1 else base_commit()
    before = old_summary(commit)
    print(f"== SummaryBuilder.add per sample (ms, median), before = summary.py at {commit} ==")
    print(
        f"{'N':>5} {'read':>8} {'add before':>11} {'add now':>9} {'extra':>8} {'whole sample':>13}  dump bytes/sample"
    )
    for n in (1, 10, 100):
        read, old, new, per = measure(n, before)
        print(
            f"{n:>5} {read:>8.3f} {old:>11.3f} {new:>9.3f} {new - old:>+8.3f} "
            f"{100 * (new - old) / (read + old):>+12.1f}%  {per}"
        )


if __name__ == "__main__":
    main()
