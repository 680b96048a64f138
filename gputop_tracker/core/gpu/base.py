"""What every GPU backend shares (psutil's `_common.py`): the reading, the interface, and the device record.

Nothing else in the tool knows which backend it talks to. Every failure of a vendor's library degrades to a
missing field, a GPU marked lost, or a one-line note — never an exception out of `read`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop_tracker.core.gpu.watch import GpuWatcher, Window
from gputop_tracker.core.model.gpufields import GpuFields


@dataclass
class GpuReading(GpuFields):
    """One device at one instant: the fields a streamed sample carries (`GpuFields`) and what only the tracker
    uses (per-process figures, energy, the watcher's window, accounting records)."""

    #: pid as the tracker sees it (host PIDs from NVML mapped through NSpid) -> bytes of GPU memory
    processes: dict[int, int] = field(default_factory=dict)
    energy_mj: int | None = None  # NVML's counter since the driver loaded; differences are what count
    #: pid -> SM / memory utilization % from nvmlDeviceGetProcessUtilization (new samples only)
    process_sm_util: dict[int, float] = field(default_factory=dict)
    process_memory_util: dict[int, float] = field(default_factory=dict)
    #: pid -> (gpuInstanceId, computeInstanceId) where NVML gives them (MIG)
    process_instances: dict[int, tuple[int, int]] = field(default_factory=dict)
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    #: other names the GPU goes by in a *_VISIBLE_DEVICES list (AMD: the HIP/ROCr UUID, GPU-<hex>)
    alt_ids: tuple[str, ...] = ()
    #: what the GPU memory watcher saw since the last sample (one object shared by the sample's readings);
    #: None where the watcher does not read this device: `processes` is then one reading
    window: Window | None = None
    #: NVML accounting mode: True on, False off, None unknown / not supported (MIG, no NVML)
    accounting: bool | None = None
    #: pid -> exact peak GPU memory on this GPU from the driver's accounting records (exited processes too)
    accounting_peaks: dict[int, int] = field(default_factory=dict)
    #: pids in `processes` whose host PID was paired with them by elimination (a container)
    attributed_pids: frozenset[int] = frozenset()
    #: pids in `processes` (as 0) that NVML lists with no memory figure (N/A: MIG, some containers, WDDM)
    no_figure: frozenset[int] = frozenset()


VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}


def vendor_label(vendor: str | None) -> str:
    """The vendor as people write it ("AMD"); "" when unknown (simulated GPUs, sessions older than the field)."""
    return VENDOR_NAMES.get(vendor, vendor.upper()) if vendor else ""


class GpuBackend:
    """The interface. `read` is called once per sample with the tracked pids."""

    simulated = False
    #: "nvidia" or "amd": which *_VISIBLE_DEVICES variables choose the GPUs counted; None for fakes
    vendor: str | None = None
    #: one line for the report when GPUs are absent or only partly readable
    note: str | None = None
    #: the library stopped answering (a call past its deadline, `guard.GuardedBackend`): nothing is read any more
    not_responding = False

    def __init__(self) -> None:
        #: lines for the report's notes, gathered while running (a set the summary reads at the end)
        self.problems: set[str] = set()

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        return []

    def read_accounting_at_end(self, pids: Sequence[int]) -> list[GpuReading]:
        """The driver's per-process peak records once the tree is done (NVML accounting); [] where none."""
        return []

    def close(self) -> None:
        return None

    # the GPU memory watcher, where the backend has one (NVML)
    watcher: GpuWatcher | None = None

    def start_watch(self, hz: float) -> None:
        """Read process lists and memory at `hz` on a thread of its own (0: not at all)."""
        return None

    def stop_watch(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()

    def set_counted(self, uuids: set[str] | None) -> None:
        """The GPUs counted for the run (None: all): the watcher reads only those."""
        return None

    def memory_source(self) -> str:
        """How per-process GPU memory was read, for the report's `sources`."""
        return "sampled (once a sample)"

    def read_energy(self) -> dict[int, int]:
        """Each device's energy counter (mJ) now: the last reading at the end of the run."""
        return {}

    def found_none(self) -> bool:
        """True when this backend has no GPU to read (so the next vendor's may be tried)."""
        return False

    def changed(self) -> bool:
        """True once after the backend's state changed (opened late, stopped answering): its note, watcher and
        `not_responding` are to be taken again."""
        return False


class NoGpuBackend(GpuBackend):
    def __init__(self, note: str) -> None:
        super().__init__()
        self.note = note

    def found_none(self) -> bool:
        return True


@dataclass
class OpenedDevice:
    """What a backend keeps of each device it opened (NVIDIA in nvidia.py, AMD in amd.py): who the device is, and
    what its reads found last."""

    handle: Any
    index: int
    uuid: str
    name: str
    pci_bus_id: str | None = None
    memory_total: int | None = None
    power_limit_w: float | None = None
    lost: bool = False
    procs: dict[int, int] = field(default_factory=dict)  # pid as the tracker sees it -> bytes, at the last read
    unattributed: int | None = None
