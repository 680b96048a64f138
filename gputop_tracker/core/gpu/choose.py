"""Which GPU backend a run uses: simulated if asked, else NVIDIA (NVML), then AMD (amdsmi), or the one named
by `--gpu-backend nvidia|amd|none`. Each probe costs a dlopen where its library is absent (well under a
millisecond), so a machine without GPUs pays nothing more and its run is unchanged."""

from __future__ import annotations

import os

from gputop_tracker.core.gpu.backend import SIMULATE_ENV, GpuBackend, NoGpuBackend, SimulatedGpuBackend
from gputop_tracker.core.gpu.backend import open_backend as open_nvidia


def open_backend(simulate: int = 0, backend: str = "auto") -> GpuBackend:
    simulate = simulate or int(os.environ.get(SIMULATE_ENV, "0") or 0)
    if simulate > 0:
        return SimulatedGpuBackend(simulate)
    if backend == "none":
        return NoGpuBackend("GPU tracking off (--gpu-backend none)")
    if backend == "nvidia":
        return open_nvidia()
    from gputop_tracker.core.gpu import amd as amdgpu

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
