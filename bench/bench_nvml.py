"""NVML time per sample per GPU: what `NvmlBackend.read` costs the sampler.

    python bench/bench_nvml.py [--gpus N] [--procs P] [--samples S] [--real]

Without --real it runs through the fake libnvidia-ml.so.1 (tests/fakenvml, built with gcc): that measures
the tool's own share — nvidia-ml-py's ctypes path and our Python — not the driver's. With --real it uses
the machine's NVML. It prints the median and p95 of a cheap sample (every interval) and of a sample that
also runs the slow queries (running processes, per-process utilization, fan, power limit; at most once a
second), per GPU, and the cost of each NVML query on its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
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
    ap.add_argument("--gpus", type=int, default=4, help="fake GPUs (ignored with --real)")
    ap.add_argument("--procs", type=int, default=8, help="fake processes per GPU")
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--real", action="store_true", help="the machine's NVML instead of the fake")
    args = ap.parse_args()

    from gputop_tracker.core.gpu.nvidia import NvmlBackend
    from gputop_tracker.core.gpu.pidns import PidMapper

    with ExitStack() as stack:
        if not args.real:
            from fakenvml.fake import FakeNvml, MiB, build, device, loaded_in_process

            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            lib = build(tmp / "lib")
            if lib is None:
                sys.exit("no C compiler: cannot build the fake libnvidia-ml (use --real on a GPU machine)")
            devices = [
                device(uuid=f"GPU-{i:08x}-0000-4000-8000-000000000000", used=(i + 1) * 1000 * MiB, util=50, gpm=1,
                       sm_act=40, sm_occ=20, tensor=5, dram_bw=30)
                for i in range(args.gpus)
            ]  # fmt: skip
            cfg = FakeNvml(tmp / "nvml.conf", devices)
            cfg.processes = [
                {"dev": d, "pid": 10_000 + d * 100 + p, "mem": 100 * MiB}
                for d in range(args.gpus)
                for p in range(args.procs)
            ]
            cfg.procutils = [{"dev": d, "pid": 10_000 + d * 100, "sm": 50, "mem": 10} for d in range(args.gpus)]
            cfg.write()
            stack.enter_context(loaded_in_process(lib, cfg.path))
            source = f"fake libnvidia-ml ({args.gpus} GPUs, {args.procs} processes each)"
        else:
            source = "real NVML"
        import pynvml

        b = NvmlBackend(pid_mapper=PidMapper(namespaced=False))
        stack.callback(b.close)
        n_gpus = max(1, len(b._devices))
        b.read([])  # GPM needs a first sample
        cheap = _time(lambda: b.read([]), args.samples)

        def slow() -> None:
            b._procs_due = 0.0
            b.read([])

        full = _time(slow, max(50, args.samples // 10))
        print(f"NVML through {source}, {n_gpus} devices, {args.samples} samples")
        print(f"  sample, cheap queries        per sample {_stats(cheap)}")
        print(f"                               per GPU    {_stats([x / n_gpus for x in cheap])}")
        print(f"  sample with slow queries     per sample {_stats(full)}")
        print(f"                               per GPU    {_stats([x / n_gpus for x in full])}")
        h = b._devices[0].handle
        queries: dict[str, Callable[[], Any]] = {
            "MemoryInfo (v2)": lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
            "UtilizationRates": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
            "Temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "PowerUsage": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
            "ClockInfo (SM)": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "TotalEnergyConsumption": lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
            "ComputeRunningProcesses_v3": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h),
        }
        print("  one query, one GPU:")
        for name, fn in queries.items():
            try:
                print(f"    {name:<28}{_stats(_time(fn, min(args.samples, 2000)))}")
            except pynvml.NVMLError as e:
                print(f"    {name:<28}not available ({e})")
        print(f"  slow-query period: max({b.PROCESS_PERIOD} s, {b.PROCESS_BUDGET:g} × its cost)")


if __name__ == "__main__":
    main()
