"""Tool CPU at 10 Hz with and without one GPU: what reading an H100 costs the tracker.

    python bench/bench_gpu_watch.py [--seconds 10] [--repeat 3] [--code DIR] [--real]

The GPU is the stand-in libnvidia-ml (tests/fakenvml, built with gcc) with a real H100's CPU cost per call
(`H100_COSTS`: energy 3,450 µs, process utilization 1,414 µs, process lists 40 + 15 µs, memory 9 µs, ...),
holding 4 GiB of the job's. The job sleeps; tool CPU = rusage of the whole run (`gputop-track --headless
--interval 0.1`, front end and sampler; wait4's rusage) minus the job alone, as % of one core over the run's
wall time. The rows run side by side, each job holding its own memory, so that each sees the same load.
Rows: `--gpu-backend none`, the GPU with the watcher at its default 50 Hz, the GPU with `--gpu-poll 0`, and
(with --code DIR, an older checkout of the package, e.g. `git archive main | tar -x -C DIR`) that code's GPU
row, for a before/after on the same machine. Also the watcher's own CPU per pass, in-process (--real: only that,
on the machine's NVML).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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


def cpu_side_by_side(runs: list[tuple[list[str], dict[str, str], Path | None]]) -> list[tuple[float, float]]:
    """Each command's (CPU seconds of its whole tree, by wait4's rusage; wall seconds), all started at once so
    that each sees the same load on a shared machine."""
    t = time.monotonic()
    procs = [
        subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for argv, env, cwd in runs
    ]
    out = []
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{p.args} failed")
        out.append((ru.ru_utime + ru.ru_stime, time.monotonic() - t))
    return out


def watch_pass_cost(lib: Path | None, fake: FakeNvml | None, n: int = 2000) -> float:
    """CPU µs of one watcher pass (one GPU: memory, compute and graphics lists), in this process; through the
    stand-in (lib, fake) or, with None, the machine's own NVML."""
    with loaded_in_process(lib, fake.path) if lib is not None and fake is not None else contextlib.nullcontext():
        from gputop_tracker.core.gpu.nvidia import NvmlBackend
        from gputop_tracker.core.gpu.pidns import PidMapper

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
    ap.add_argument("--real", action="store_true", help="only the watcher's pass, on the machine's NVML (GPU 0)")
    args = ap.parse_args()
    if args.real:
        try:
            print(f"watcher pass (GPU 0, the machine's NVML): {watch_pass_cost(None, None):.0f} µs CPU")
        except Exception as e:  # no driver, no GPU
            sys.exit(f"bench_gpu_watch: no NVML GPU here ({e})")
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lib = build(tmp / "lib")
        if lib is None:
            sys.exit("no C compiler: cannot build the stand-in libnvidia-ml")
        names = ["no GPU (--gpu-backend none)", "one H100, watcher at 50 Hz", "one H100, --gpu-poll 0"]
        if args.code is not None:
            names.append(f"one H100, code of {args.code}")
        names.append("job alone")
        memfiles = [tmp / f"gpu{i}.mem" for i in range(len(names))]  # each row's job holds its own 4 GiB
        fake = FakeNvml(tmp / "nvml.conf", [device(used=600 * MiB, power_mw=300_000, util=50)])
        fake.processes = [{"dev": 0, "memfile": str(m)} for m in memfiles]
        fake.costs = dict(H100_COSTS)
        fake.write()
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent), CONFIG_ENV: str(fake.path)}
        rows: list[tuple[list[str], dict[str, str], Path | None]] = []
        for i, name in enumerate(names):
            job = [sys.executable, "-c", HOLD_SOURCE + f"import time\nhold({str(memfiles[i])!r}, 4 << 30)\n"
                   f"time.sleep({args.seconds})"]  # fmt: skip
            cli = [sys.executable, "-m", "gputop_tracker", "--headless", "--no-save", "-f", "json",
                   "-o", str(tmp / f"report{i}.json"), "--interval", "0.1"]  # fmt: skip
            if name.startswith("no GPU"):
                rows.append(([*cli, "--gpu-backend", "none", "--", *job], env, ROOT))
            elif "--gpu-poll 0" in name:
                rows.append(([*cli, "--gpu-poll", "0", "--", *job], env, ROOT))
            elif "code of" in name:  # `python -m` puts the working directory first on the path: run from there
                code = args.code.resolve() if args.code is not None else ROOT
                rows.append(([*cli, "--", *job], {**env, "PYTHONPATH": str(code)}, code))
            elif name == "job alone":
                rows.append((job, env, ROOT))
            else:
                rows.append(([*cli, "--", *job], env, ROOT))
        results: list[list[tuple[float, float]]] = [[] for _ in rows]
        for _ in range(args.repeat):
            for got, runs in zip(cpu_side_by_side(rows), results, strict=True):
                runs.append(got)
        alone = statistics.median(c for c, _ in results[-1])
        print(f"job alone: {alone:.3f} s CPU; tool CPU at --interval 0.1 over {args.seconds:g} s, the rows run side "
              f"by side, median of {args.repeat} (% of one core):")  # fmt: skip
        base = None
        for i, (name, runs) in enumerate(zip(names[:-1], results, strict=False)):
            tool = statistics.median(c for c, _ in runs) - alone
            wall = statistics.median(w for _, w in runs)
            pct = 100 * tool / wall
            base = pct if base is None else base
            extra = "" if pct is base else f"  ({pct / base - 1:+.0%} against no GPU)"
            print(f"  {name:<40} {tool:6.3f} s  {pct:5.2f} %{extra}")
            if i:
                label = json.loads((tmp / f"report{i}.json").read_text())["sources"].get("max_gpu_ram")
                print(f"      GPU memory: {label}")
        print(f"watcher pass (one GPU, H100 call costs): {watch_pass_cost(lib, fake):.0f} µs CPU")


if __name__ == "__main__":
    main()
