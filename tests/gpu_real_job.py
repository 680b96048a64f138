"""The PyTorch workloads of tests/test_gpu_real.py, each writing the figures it read itself into a facts file.

    python gpu_real_job.py MODE FACTS [SECONDS]

The truth for GPU memory is NVML's own per-process figure, read here for this process while it holds the memory
(after `torch.cuda.synchronize()`); the truth for the allocator is what `torch.cuda.max_memory_allocated/reserved`
return here. Modes: `spike` (6 GiB held, 10 GiB more for 150 ms), `blocks` (a block that creates the CUDA context,
an 8 GiB / 300 ms block), `probe` (allocator peaks before and after a block, and at the end), `cpu` (a light
wrapper around a mostly idle PyTorch child, reporting the CPU time of both, the child's exit included), `oom` (half
the free memory held, 80 % of it asked: caught; then twice the GPU asked: uncaught, exit 1; the allocator's own
figures read at each, and what 2,000 small allocations and the failing call cost here).
Runs as a tracked program: imports gputop_tracker only for its code blocks.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

from blocksync import running  # tests/, this script's directory

MiB = 1024**2
GiB = 1024**3


def gpu_handles(pynvml: Any, uuid: str) -> list[Any]:
    """NVML's handle of the GPU with this UUID (by index: every NVML has that call), or of every GPU when `uuid`
    names none."""
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        found = pynvml.nvmlDeviceGetUUID(h)
        found = found.decode() if isinstance(found, bytes) else str(found)
        if not uuid.startswith("GPU-") or found == uuid:
            out.append(h)
    return out


def accounting_state(uuid: str, pid: int) -> tuple[bool | None, int | None]:
    """The GPU's accounting mode (None: it has none, e.g. MIG) and the driver's record of `pid` (its max memory,
    kept after it exited), read only: nothing here changes a device setting."""
    import pynvml

    pynvml.nvmlInit()
    try:
        (h,) = gpu_handles(pynvml, uuid)
        try:
            on = pynvml.nvmlDeviceGetAccountingMode(h) == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError:
            return None, None
        if not on:
            return False, None
        try:
            return True, int(pynvml.nvmlDeviceGetAccountingStats(h, pid).maxMemoryUsage)
        except pynvml.NVMLError:
            return True, None
    finally:
        pynvml.nvmlShutdown()


class OwnGpuMemory:
    """NVML's per-process figure for this process on the GPU named by CUDA_VISIBLE_DEVICES (a UUID), or on any
    GPU when the variable names none; NVML is initialised once, so a read costs only the process list."""

    def __init__(self, uuid: str | None = None) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = gpu_handles(pynvml, uuid if uuid is not None else os.environ.get("CUDA_VISIBLE_DEVICES", ""))

    def read(self) -> int | None:
        """Bytes NVML lists for this PID (summed over the GPUs read); None when it lists none (not using a GPU,
        or NVML's PIDs are another namespace's)."""
        me, total, seen = os.getpid(), 0, False
        for h in self.handles:
            for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid == me and p.usedGpuMemory is not None:
                    total += int(p.usedGpuMemory)
                    seen = True
        return total if seen else None

    def close(self) -> None:
        self.nvml.nvmlShutdown()


def held_for(seconds: float, since: float) -> None:
    time.sleep(max(0.0, seconds - (time.monotonic() - since)))


def allocated_for_a_moment(nv: OwnGpuMemory, facts: dict[str, Any], key: str, size: int, seconds: float) -> None:
    """`size` bytes more allocated on the GPU for `seconds` from the allocation, then freed with PyTorch's cache;
    facts[key] is this process's GPU memory (NVML's figure) while they were held."""
    import torch

    t0 = time.monotonic()
    extra = torch.empty(size, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    facts[key] = nv.read()
    held_for(seconds, t0)
    del extra
    torch.cuda.empty_cache()


def spike(facts: dict[str, Any]) -> None:
    import torch

    nv = OwnGpuMemory()
    base = torch.empty(6 * GiB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    facts["held"] = nv.read()
    running()
    time.sleep(1.2)  # more than two samples at the default interval before the spike
    allocated_for_a_moment(nv, facts, "at_spike", 10 * GiB, 0.15)
    facts["after_spike"] = nv.read()
    time.sleep(1.2)
    facts["reserved_peak"] = torch.cuda.max_memory_reserved()
    del base
    nv.close()


def blocks(facts: dict[str, Any]) -> None:
    import torch

    from gputop_tracker import block

    nv = OwnGpuMemory()
    running()
    with block("context"):
        torch.zeros(1, device="cuda")  # the CUDA context (and the allocator's first 2 MiB segment)
        torch.cuda.synchronize()
        facts["context"] = nv.read()
        time.sleep(0.2)
    time.sleep(0.3)
    with block("alloc8"):
        allocated_for_a_moment(nv, facts, "alloc8", 8 * GiB, 0.3)
    facts["after"] = nv.read()
    time.sleep(0.3)
    nv.close()


def probe(facts: dict[str, Any]) -> None:
    import torch

    from gputop_tracker import block

    def peaks() -> list[int]:
        return [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]

    before = torch.empty(1 * GiB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    facts["before_block"] = peaks()
    with block("alloc3"):
        x = torch.empty(3 * GiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        del x
    facts["after_block"] = peaks()  # read after the block's own reads: never reset by them
    small = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")  # below the peak: it stays
    torch.cuda.synchronize()
    del small, before
    facts["at_end"] = peaks()  # the probe reads at exit, after this


OOM_KEYS = ("allocated_bytes.all.current", "reserved_bytes.all.current", "active_bytes.all.current", "num_ooms")


def allocator_state() -> dict[str, Any]:
    import torch

    s = torch.cuda.memory_stats(0)
    free, total = torch.cuda.mem_get_info(0)
    return {"stats": {k: s.get(k) for k in OOM_KEYS}, "free": free, "total": total}


def oom(facts: dict[str, Any], out: str) -> None:
    """Sized from mem_get_info (an H100 80 GB or an H200 141 GB alike)."""
    import torch

    nv = OwnGpuMemory()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info(0)
    held = [torch.empty(int(free * 0.5) // MiB * MiB, dtype=torch.uint8, device="cuda")]
    t = time.perf_counter()
    for _ in range(2000):  # from the cache: what the allocator history (--gpu-history) adds to each
        x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
        del x
    facts["alloc_free_us"] = (time.perf_counter() - t) / 2000 * 1e6
    torch.cuda.synchronize()
    facts["nvml_held"] = nv.read()
    facts["asked"] = int(free * 0.8) // MiB * MiB
    time.sleep(0.5)  # the tracker's GPU watcher reads the held state meanwhile
    t = time.perf_counter()
    try:
        held.append(torch.empty(facts["asked"], dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        facts["oom_call_ms"] = (time.perf_counter() - t) * 1e3
        facts["caught"] = {**allocator_state(), "type": type(e).__name__, "text": str(e)[:400]}
    nv.close()
    time.sleep(0.3)
    facts["uncaught_before"] = allocator_state()
    with open(out, "w") as f:
        json.dump(facts, f)
    torch.empty(2 * total, dtype=torch.uint8, device="cuda")  # not caught: ends the program (exit 1)


def cpu_child(seconds: float) -> None:
    """A PyTorch process as a training job between steps: 4 GiB held, a small matmul every half second."""
    import torch

    held = torch.empty(4 * GiB, dtype=torch.uint8, device="cuda")
    a = torch.randn(1024, 1024, device="cuda")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        (a @ a).sum().item()
        time.sleep(0.5)
    del held


def cpu(facts: dict[str, Any], seconds: float) -> None:
    subprocess.run([sys.executable, __file__, "cpu-child", "-", str(seconds)], check=True)
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    facts["cpu_seconds"] = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    if mode == "cpu-child":
        cpu_child(seconds)
        return
    facts: dict[str, Any] = {"pid": os.getpid()}
    if mode == "cpu":
        cpu(facts, seconds)
    elif mode == "oom":
        oom(facts, out)
    else:
        {"spike": spike, "blocks": blocks, "probe": probe}[mode](facts)
    with open(out, "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    main()
