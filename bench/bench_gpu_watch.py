"""Tool CPU at 10 Hz with and without one GPU: what reading an H100 costs the tracker.

    python bench/bench_gpu_watch.py [--seconds 10] [--repeat 3] [--code DIR]

The GPU is the stand-in libnvidia-ml (tests/fakenvml, built with gcc) with a real H100's CPU cost per call
(`H100_COSTS`: energy 3,450 µs, process utilization 1,414 µs, process lists 40 + 15 µs, memory 9 µs, ...),
holding 4 GiB of the job's. The job sleeps; tool CPU = rusage of the whole run (`gputop-track --headless
--interval 0.1`, front end and sampler) minus the job alone, as % of one core over the run's wall time.
Rows: `--gpu-backend none`, the GPU with the watcher at its default 50 Hz, the GPU with `--gpu-poll 0`, and
(with --code DIR, an older checkout of the package, e.g. `git archive main | tar -x -C DIR`) that code's GPU
row, for a before/after on the same machine. Also the watcher's own CPU per pass, in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakenvml.fake import (  # noqa: E402 (the tests folder first)
    CONFIG_ENV,
    H100_COSTS,
    HOLD_SOURCE,
    FakeNvml,
    MiB,
    build,
    device,
    loaded_in_process,
)


def cpu_of(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """(CPU seconds of the command's whole tree, by rusage; wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True, timeout=600)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def watch_pass_cost(lib: Path, fake: FakeNvml, n: int = 2000) -> float:
    """CPU µs of one watcher pass (one GPU: memory, compute and graphics lists), in this process."""
    with loaded_in_process(lib, fake.path):
        from gputop_tracker.core.gpu.backend import NvmlBackend, PidMapper

        b = NvmlBackend(pid_mapper=PidMapper(namespaced=False))
        try:
            b.set_counted(None)
            b._watched = {0}
            t = time.thread_time()
            for _ in range(n):
                b._watch_pass()
            return (time.thread_time() - t) / n * 1e6
        finally:
            b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the job sleeps")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--code", type=Path, help="another checkout's package root, for a before/after")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lib = build(tmp / "lib")
        if lib is None:
            sys.exit("no C compiler: cannot build the stand-in libnvidia-ml")
        memfile = tmp / "gpu.mem"
        fake = FakeNvml(tmp / "nvml.conf", [device(used=600 * MiB, power_mw=300_000, util=50)])
        fake.processes = [{"dev": 0, "memfile": str(memfile)}]
        fake.costs = dict(H100_COSTS)
        fake.write()
        job = [sys.executable, "-c", HOLD_SOURCE + f"import time\nhold({str(memfile)!r}, 4 << 30)\n"
               f"time.sleep({args.seconds})"]  # fmt: skip
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent), CONFIG_ENV: str(fake.path)}
        report = tmp / "report.json"
        cli = [sys.executable, "-m", "gputop_tracker", "--headless", "--no-save", "-f", "json", "-o", str(report),
               "--interval", "0.1"]  # fmt: skip
        rows: dict[str, tuple[list[str], dict[str, str], Path | None]] = {
            "no GPU (--gpu-backend none)": ([*cli, "--gpu-backend", "none", "--", *job], env, ROOT),
            "one H100, watcher at 50 Hz": ([*cli, "--", *job], env, ROOT),
            "one H100, --gpu-poll 0": ([*cli, "--gpu-poll", "0", "--", *job], env, ROOT),
        }
        if args.code is not None:  # `python -m` puts the working directory first on the path: run from there
            code = args.code.resolve()
            rows[f"one H100, code of {args.code}"] = ([*cli, "--", *job], {**env, "PYTHONPATH": str(code)}, code)
        alone = statistics.median(cpu_of(job, env)[0] for _ in range(args.repeat))
        print(f"job alone: {alone:.3f} s CPU; tool CPU at --interval 0.1 over {args.seconds:g} s, median of "
              f"{args.repeat} (% of one core):")  # fmt: skip
        base = None
        for name, (argv, e, cwd) in rows.items():
            runs = [cpu_of(argv, e, cwd) for _ in range(args.repeat)]
            tool = statistics.median(c for c, _ in runs) - alone
            wall = statistics.median(w for _, w in runs)
            pct = 100 * tool / wall
            base = pct if base is None else base
            extra = "" if pct is base else f"  ({pct / base - 1:+.0%} against no GPU)"
            print(f"  {name:<40} {tool:6.3f} s  {pct:5.2f} %{extra}")
            label = json.loads(report.read_text()).get("sources", {}).get("max_gpu_ram")
            if label and "no GPU" not in name:
                print(f"      GPU memory: {label}")
        print(f"watcher pass (one GPU, H100 call costs): {watch_pass_cost(lib, fake):.0f} µs CPU")


if __name__ == "__main__":
    main()
