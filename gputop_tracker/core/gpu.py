"""GPU access behind one small interface: NVML (nvidia-ml-py) for real GPUs, fakes for tests and demos.

Nothing else in the tool knows which backend it talks to. Every NVML failure degrades to a missing
field, a GPU marked lost, or a one-line note — never an exception out of `read`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GpuReading:
    index: int
    uuid: str
    name: str
    memory_total: int | None = None
    memory_used: int | None = None
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    processes: dict[int, int] = field(default_factory=dict)  # host pid -> bytes of GPU memory
    lost: bool = False


class GpuBackend:
    """The interface. `read` is called once per sample with the tracked pids."""

    simulated = False
    #: one line for the report when GPUs are absent or only partly readable
    note: str | None = None

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        return []

    def close(self) -> None:
        return None


class NoGpuBackend(GpuBackend):
    def __init__(self, note: str) -> None:
        self.note = note


class FakeGpuBackend(GpuBackend):
    """Scripted GPUs for tests: `script(pids) -> list[GpuReading]`."""

    def __init__(self, script: Callable[[Sequence[int]], list[GpuReading]]) -> None:
        self._script = script

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        return self._script(pids)


class SimulatedGpuBackend(GpuBackend):
    """Clearly labelled simulated GPUs for demos and screenshots on machines without a GPU.

    Deterministic given elapsed time: utilization follows a slow wave, and the main tracked
    process appears to hold a GPU memory that grows then levels off.
    """

    simulated = True
    note = "GPUs are SIMULATED (--simulate-gpus): no figure below comes from real hardware"

    def __init__(self, count: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.count = count
        self._clock = clock
        self._t0 = clock()

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        t = self._clock() - self._t0
        out = []
        total = 80 * 1024**3
        for i in range(self.count):
            util = 50 + 45 * math.sin(t / 7.0 + i)
            held = int(min(1.0, t / 20.0) * (6 + 4 * i) * 1024**3)
            procs = {pids[0]: held} if pids else {}
            other = 512 * 1024**2
            out.append(
                GpuReading(
                    index=i,
                    uuid=f"GPU-51a1a7ed-0000-4000-8000-{i:012d}",
                    name="Simulated GPU",
                    memory_total=total,
                    memory_used=held + other,
                    utilization_gpu=round(util, 1),
                    utilization_memory=round(util * 0.6, 1),
                    temperature_c=40 + util / 4,
                    power_w=90 + 3 * util,
                    power_limit_w=700.0,
                    processes=procs,
                )
            )
        return out


class NvmlBackend(GpuBackend):
    """Real GPUs through nvidia-ml-py. NVML is initialised once and handles are cached."""

    #: the running-processes query takes a driver lock (~4.5 ms per GPU): not every sample
    PROCESS_PERIOD = 1.0

    def __init__(self) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handles = []
        self._static: list[tuple[str, str, int | None]] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            self._handles.append(h)
            name = self._get(pynvml.nvmlDeviceGetName, h) or f"GPU {i}"
            uuid = self._get(pynvml.nvmlDeviceGetUUID, h) or f"GPU-index-{i}"
            mem: Any = self._get(pynvml.nvmlDeviceGetMemoryInfo, h)
            self._static.append((str(name), str(uuid), int(mem.total) if mem is not None else None))
        self._lost: set[int] = set()
        self._procs: list[dict[int, int]] = [{} for _ in self._handles]
        self._procs_due = 0.0
        if not self._handles:
            self.note = "NVML found no NVIDIA GPU"

    def _get(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call one NVML query; None when unsupported, not permitted or failing."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as e:
            if isinstance(e, self._nvml.NVMLError_GpuIsLost):
                raise
            return None
        except Exception:  # NVMLLibraryMismatchError is a plain Exception
            return None

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        nv = self._nvml
        now = time.monotonic()
        refresh_procs = now >= self._procs_due
        if refresh_procs:
            self._procs_due = now + self.PROCESS_PERIOD
        out = []
        for i, h in enumerate(self._handles):
            name, uuid, total = self._static[i]
            r = GpuReading(index=i, uuid=uuid, name=name, memory_total=total)
            if i in self._lost:
                r.lost = True
                out.append(r)
                continue
            try:
                mem = self._get(nv.nvmlDeviceGetMemoryInfo, h)
                if mem is not None:
                    r.memory_used = int(mem.used)
                    r.memory_total = int(mem.total)
                util = self._get(nv.nvmlDeviceGetUtilizationRates, h)
                if util is not None:
                    r.utilization_gpu = float(util.gpu)
                    r.utilization_memory = float(util.memory)
                temp = self._get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
                r.temperature_c = float(temp) if isinstance(temp, int | float) else None
                power = self._get(nv.nvmlDeviceGetPowerUsage, h)
                r.power_w = power / 1000.0 if isinstance(power, int | float) else None
                limit = self._get(nv.nvmlDeviceGetEnforcedPowerLimit, h)
                r.power_limit_w = limit / 1000.0 if isinstance(limit, int | float) else None
                if refresh_procs:
                    procs: dict[int, int] = {}
                    for fn in (
                        nv.nvmlDeviceGetComputeRunningProcesses,
                        nv.nvmlDeviceGetGraphicsRunningProcesses,
                    ):
                        for p in self._get(fn, h) or ():  # type: ignore[attr-defined]
                            used = getattr(p, "usedGpuMemory", None)
                            procs[int(p.pid)] = procs.get(int(p.pid), 0) + (int(used) if used else 0)
                    self._procs[i] = procs
                r.processes = self._procs[i]
            except nv.NVMLError_GpuIsLost:
                self._lost.add(i)
                r.lost = True
            out.append(r)
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


SIMULATE_ENV = "GPUTOP_TRACKER_SIMULATE_GPUS"


def open_backend(simulate: int = 0) -> GpuBackend:
    """The backend for this machine: simulated if asked, else NVML, else none with a one-line note."""
    simulate = simulate or int(os.environ.get(SIMULATE_ENV, "0") or 0)
    if simulate > 0:
        return SimulatedGpuBackend(simulate)
    try:
        import pynvml
    except ImportError:
        return NoGpuBackend("no GPU tracking: nvidia-ml-py is not installed")
    try:
        return NvmlBackend()
    except pynvml.NVMLError as e:
        return NoGpuBackend(f"no NVIDIA GPU found ({_nvml_reason(e)})")
    except Exception as e:  # a broken or mismatched library must not stop CPU/RAM tracking
        return NoGpuBackend(f"no NVIDIA GPU found ({type(e).__name__}: {e})")


def _nvml_reason(e: Exception) -> str:
    name = type(e).__name__.removeprefix("NVMLError_")
    reasons = {
        "LibraryNotFound": "NVIDIA driver library libnvidia-ml.so.1 not found",
        "DriverNotLoaded": "NVIDIA driver not loaded",
        "NoPermission": "no permission to use NVML",
    }
    return reasons.get(name, f"NVML: {e}")


def resolve_gpu_selection(readings: Sequence[GpuReading], spec: str) -> tuple[set[str], list[str]]:
    """UUIDs chosen by a CUDA_VISIBLE_DEVICES-style list: indices, full or short UUIDs, MIG UUIDs.

    Returns (uuids, problems). NVML orders GPUs by PCI bus, not as CUDA does, so indices are taken as
    NVML indices only when every entry is an index; everything is resolved to a UUID.
    """
    chosen: set[str] = set()
    problems: list[str] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        if item.lstrip("-").isdigit():
            idx = int(item)
            if idx < 0:
                break  # CUDA stops at the first invalid index
            match = [r.uuid for r in readings if r.index == idx]
        else:
            key = item.lower()
            match = [r.uuid for r in readings if r.uuid.lower() == key or r.uuid.lower().startswith(key)]
            if not match and not key.startswith(("gpu-", "mig-")):
                match = [r.uuid for r in readings if r.uuid.lower().startswith("gpu-" + key)]
        if len(match) == 1:
            chosen.add(match[0])
        else:
            problems.append(f"{item!r} matches {'no' if not match else 'more than one'} GPU")
    return chosen, problems
