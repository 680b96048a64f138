"""The fields one GPU has at one instant, written once: the reading a GPU backend gives (`gpu.GpuReading` adds what
only the tracker uses) and the streamed sample (`models.GpuSample` adds the tree's share) both derive from it.

A plain dataclass, standard library only: the sampler reads GPUs without loading pydantic; `models.GpuSample`
validates the same fields (pydantic reads a dataclass base's fields as its own).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class GpuFields:
    """One device (a whole GPU or one MIG instance) at one instant. None = not supported / unreadable."""

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
    lost: bool = False
    pci_bus_id: str | None = None
    memory_reserved: int | None = None
    clock_sm_mhz: float | None = None
    clock_memory_mhz: float | None = None
    fan_percent: float | None = None
    #: GPM (Hopper and newer): % of SMs busy; None where the GPU has no GPM
    sm_activity: float | None = None
    #: GPM: % of warps active against the maximum
    sm_occupancy: float | None = None
    #: GPM: % of time any tensor core was busy
    tensor_activity: float | None = None
    #: GPM: % of peak DRAM bandwidth used
    dram_bandwidth: float | None = None
    #: bytes NVML lists for PIDs that could not be mapped to this PID namespace (containers); None = n/a
    unattributed_memory: int | None = None
    #: index of the physical GPU this MIG device belongs to
    mig_parent: int | None = None
    #: "nvidia", "amd"; None: simulated or scripted
    vendor: str | None = None


#: the reading's own fields a streamed sample carries, in order (`models.GpuSample` adds tree_memory, counted,
#: simulated, energy_j and tree_sm_util)
SAMPLE_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(GpuFields))
