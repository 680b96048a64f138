"""amdsmi time per sample per GPU: what `AmdSmiBackend.read` costs the sampler.

    python bench/bench_amdsmi.py [--gpus N] [--procs P] [--samples S] [--real]

Without --real it runs through the stand-in libamd_smi.so (tests/fakeamdsmi, generated from the installed
amdsmi package and built with gcc): that measures the tool's own share — amdsmi's ctypes path and our Python
— not the driver's (a real GPU reads sysfs and its metrics table). With --real it uses ROCm's library. It
prints the median and p95 of a cheap sample (every interval) and of a sample that also reads the process
list (at most once a second), per GPU, and the start-up cost: the library probe and `import amdsmi`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _stats(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(len(xs) * 0.95))]
    return f"median {statistics.median(xs) * 1e6:8.1f} µs   p95 {p95 * 1e6:8.1f} µs"


def _time(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=4, help="stand-in GPUs (ignored with --real)")
    ap.add_argument("--procs", type=int, default=8, help="stand-in processes per GPU")
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--real", action="store_true", help="ROCm's libamd_smi.so instead of the stand-in")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if not args.real:
            from fakeamdsmi.fake import FakeAmdSmi, MiB, build, device, env_for

            lib = build(tmp / "rocm")
            if lib is None:
                sys.exit("no C compiler or no amdsmi package: cannot build the stand-in (use --real on an AMD GPU)")
            cfg = FakeAmdSmi(
                tmp / "amdsmi.conf",
                [device(uuid=f"aaaa-{i}", used=(i + 1) * 1000 * MiB, gfx=50) for i in range(args.gpus)],
            )
            cfg.processes = [
                {"dev": g, "pid": 10_000 + g * 100 + p, "vram": 100 * MiB}
                for g in range(args.gpus)
                for p in range(args.procs)
            ]
            cfg.write()
            os.environ.update(env_for(lib, cfg.path))  # before amdsmi is imported: it binds its library then
            source = f"the stand-in libamd_smi.so ({args.gpus} GPUs, {args.procs} processes each)"
        else:
            source = "ROCm's libamd_smi.so"
        from gputop_tracker.core.gpu.amd import AmdSmiBackend, find_library, quiet_stdout
        from gputop_tracker.core.gpu.pidns import PidMapper

        probe = _time(find_library, 200)
        t = time.perf_counter()
        with quiet_stdout([]):
            import amdsmi
        imported = time.perf_counter() - t
        b = AmdSmiBackend(amdsmi, pid_mapper=PidMapper(namespaced=False))
        try:
            n_gpus = max(1, len(b.read([])))
            cheap = _time(lambda: b.read([]), args.samples)

            def slow() -> None:
                b._procs_due = 0.0
                b.read([])

            full = _time(slow, max(50, args.samples // 10))
        finally:
            b.close()
        print(
            f"amdsmi {getattr(amdsmi, '__version__', '?')} through {source}, {n_gpus} devices, {args.samples} samples"
        )
        print(f"  library probe (dlopen)       {_stats(probe)}")
        print(f"  import amdsmi                {imported * 1e3:8.1f} ms")
        print(f"  sample, cheap queries        per sample {_stats(cheap)}")
        print(f"                               per GPU    {_stats([x / n_gpus for x in cheap])}")
        print(f"  sample with the process list per sample {_stats(full)}")
        print(f"                               per GPU    {_stats([x / n_gpus for x in full])}")
        print(f"  process-list period: max({b.PROCESS_PERIOD} s, {b.PROCESS_BUDGET:g} × its cost)")


if __name__ == "__main__":
    main()
