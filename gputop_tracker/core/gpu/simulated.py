"""GPUs that are not there: clearly labelled simulated ones for demos and screenshots (`--simulate-gpus`), and
scripted ones for tests (`FakeGpuBackend`). No library is loaded."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from gputop_tracker.core.gpu.base import GpuBackend, GpuReading

SIMULATE_ENV = "GPUTOP_TRACKER_SIMULATE_GPUS"


class FakeGpuBackend(GpuBackend):
    """Scripted GPUs for tests: `script(pids) -> list[GpuReading]`."""

    def __init__(self, script: Callable[[Sequence[int]], list[GpuReading]]) -> None:
        super().__init__()
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
        super().__init__()
        self.count = count
        self._clock = clock
        self._t0 = clock()
        self._last_t = 0.0
        self._energy_mj = [0.0] * count  # the power integrated over time, as a real counter only grows

    def _integrate(self, t: float) -> list[float]:
        """Each GPU's energy counter at `t` (mJ): its power curve integrated in steps of at most 0.1 s."""
        while self._last_t < t:
            dt = min(0.1, t - self._last_t)
            mid = self._last_t + dt / 2
            for i in range(self.count):
                self._energy_mj[i] += (90 + 3 * (50 + 45 * math.sin(mid / 7.0 + i))) * dt * 1000
            self._last_t += dt
        return self._energy_mj

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        t = self._clock() - self._t0
        energy = self._integrate(t)
        out = []
        total = 80 * 1024**3
        for i in range(self.count):
            util = 50 + 45 * math.sin(t / 7.0 + i)
            held = int(min(1.0, t / 20.0) * (6 + 4 * i) * 1024**3)
            procs = {pids[0]: held} if pids else {}
            other = 512 * 1024**2
            power = 90 + 3 * util
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
                    power_w=power,
                    power_limit_w=700.0,
                    processes=procs,
                    pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
                    clock_sm_mhz=1980.0,
                    clock_memory_mhz=2619.0,
                    energy_mj=int(energy[i]),
                    sm_activity=round(util * 0.7, 1),
                    sm_occupancy=round(util * 0.4, 1),
                    process_sm_util={pids[0]: round(util * 0.9, 1)} if pids else {},
                )
            )
        return out
