"""Which GPU backend a run uses: simulated if asked, else NVIDIA (NVML), then AMD (amdsmi), or the one named
by `--gpu-backend nvidia|amd|none`. Each probe costs a dlopen where its library is absent (well under a
millisecond), so a machine without GPUs pays nothing more and its run is unchanged."""

from __future__ import annotations

import os

from gputop_tracker.core.gpu.base import GpuBackend, NoGpuBackend
from gputop_tracker.core.gpu.guard import LIBRARIES, GuardedBackend
from gputop_tracker.core.gpu.nvidia import open_nvidia
from gputop_tracker.core.gpu.simulated import SIMULATE_ENV, SimulatedGpuBackend


def open_backend(simulate: int = 0, backend: str = "auto") -> GpuBackend:
    """The backend for this machine: simulated if asked (or GPUTOP_TRACKER_SIMULATE_GPUS), else the one named,
    else NVIDIA, then AMD, else none with a one-line note."""
    simulate = simulate or int(os.environ.get(SIMULATE_ENV, "0") or 0)
    if simulate > 0:
        return SimulatedGpuBackend(simulate)
    if backend == "none":
        return NoGpuBackend("GPU tracking off (--gpu-backend none)")
    if backend == "nvidia":
        return open_nvidia()
    from gputop_tracker.core.gpu import amd as amdgpu  # ROCm's loader: only where NVIDIA found nothing

    if backend == "amd":
        return amdgpu.open_amd()
    nvidia = open_nvidia()
    if not nvidia.found_none():
        return nvidia
    amd = amdgpu.open_amd()
    if not amd.found_none():
        nvidia.close()
        return amd
    if amd.note == amdgpu.NO_LIBRARY:  # no ROCm at all: the NVIDIA line alone, as before
        amd.close()
        return nvidia
    nvidia.close()
    amd.close()
    return NoGpuBackend(f"{nvidia.note}; {amd.note}")


def open_guarded(simulate: int, backend: str, watch_hz: float) -> GpuBackend:
    """The backend a run reads, its memory watcher started: a vendor's library behind a deadline per call, opened
    on a worker thread (`guard.GuardedBackend`); simulated GPUs and `none` as they are (they call no library)."""
    simulate = simulate or int(os.environ.get(SIMULATE_ENV, "0") or 0)
    if simulate > 0 or backend == "none":
        gpu = open_backend(simulate, backend)
        gpu.start_watch(watch_hz)
        return gpu
    library = LIBRARIES.get(backend, "the GPU library (NVML, then amdsmi)")
    return GuardedBackend(lambda: open_backend(0, backend), watch_hz, library)
