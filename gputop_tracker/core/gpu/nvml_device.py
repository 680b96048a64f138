"""What the NVML backend keeps of each device, and its queries that take more than one NVML call: a process list
in one C call, per-process utilization, GPM metrics. Used by `nvidia.NvmlBackend` (and typed by `nvml_extras`)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gputop_tracker.core.gpu.base import GpuReading, OpenedDevice


@dataclass
class NvmlDevice(OpenedDevice):
    """What the NVML backend keeps of one device (a GPU or a MIG device) between reads."""

    fan_percent: float | None = None
    mig_parent: int | None = None
    mig_enabled: bool = False  # a physical GPU in MIG mode: its processes are read on its MIG devices
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_v2: bool = True
    gpm: bool = False
    gpm_prev: Any = None
    gpm_last: tuple[float | None, ...] = (None, None, None, None)
    clocks: tuple[float | None, float | None] = (None, None)
    last_mem: Any = None  # the watcher's latest memory reading (total, reserved)
    last_seen_us: int = 0  # nvmlDeviceGetProcessUtilization's timestamp, kept or values lag
    instances: dict[int, tuple[int, int]] = field(default_factory=dict)
    unmapped: dict[int, int] = field(default_factory=dict)  # host PID -> bytes, where no tracked PID is known
    attributed: frozenset[int] = frozenset()
    accounting: bool | None = None
    accounting_peaks: dict[int, int] = field(default_factory=dict)
    minor: int | None = None  # N of /dev/nvidiaN (the parent's for a MIG device)
    no_figure: frozenset[int] = frozenset()  # listed pids whose usedGpuMemory NVML gives as not available
    no_list: bool = False  # neither process list answered at the last read (not supported, no permission)


@dataclass
class _ProcessInfo:
    """One entry of a running-processes list, as nvidia-ml-py gives it (usedGpuMemory None: not available)."""

    pid: int
    usedGpuMemory: int | None  # NVML's names
    gpuInstanceId: int
    computeInstanceId: int


def running_processes(nv: Any, name: str) -> Callable[[Any], list[_ProcessInfo]]:
    """A running-processes query in one C call (nvidia-ml-py's wrapper makes two, the size then the list, and on
    a real driver each takes its lock): a buffer with room to spare, a second call only when it was too small."""
    not_available = nv.NVML_VALUE_NOT_AVAILABLE_ulonglong.value

    def read(handle: Any) -> list[_ProcessInfo]:
        room = 32
        for _ in range(3):
            buf = (nv.c_nvmlProcessInfo_v3_t * room)()
            count = ctypes.c_uint(room)
            ret = nv._nvmlGetFunctionPointer(name)(handle, ctypes.byref(count), buf)
            if ret == nv.NVML_ERROR_INSUFFICIENT_SIZE:
                room = count.value * 2 + 8
                continue
            nv._nvmlCheckReturn(ret)
            return [
                _ProcessInfo(
                    b.pid,
                    None if b.usedGpuMemory == not_available else b.usedGpuMemory,
                    b.gpuInstanceId,
                    b.computeInstanceId,
                )
                for b in buf[: count.value]
            ]
        nv._nvmlCheckReturn(ret)
        return []

    read.__name__ = name
    return read


def read_process_util(nv: Any, dev: NvmlDevice, r: GpuReading, to_ours: Callable[[int], int | None]) -> None:
    """Each process's SM and memory utilization since the last read into r (1.4 ms of CPU on an H100)."""
    try:
        samples = nv.nvmlDeviceGetProcessUtilization(dev.handle, dev.last_seen_us)
    except nv.NVMLError_GpuIsLost:
        raise
    except Exception:  # NOT_FOUND: no new samples since last_seen; NotSupported: none ever
        return
    for s in samples:
        dev.last_seen_us = max(dev.last_seen_us, int(s.timeStamp))
        pid = to_ours(int(s.pid))
        if pid is None:
            continue
        r.process_sm_util[pid] = max(r.process_sm_util.get(pid, 0.0), float(s.smUtil))
        r.process_memory_util[pid] = max(r.process_memory_util.get(pid, 0.0), float(s.memUtil))


def read_gpm(nv: Any, dev: NvmlDevice, r: GpuReading) -> None:
    """GPM metrics (Hopper and newer) between the last sample and this one into r (94 µs on an H100)."""
    try:
        sample = nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(dev.handle, sample)
    except nv.NVMLError_GpuIsLost:
        raise
    except Exception:
        dev.gpm = False  # GPM advertised but unusable (e.g. no permission): absent from now on
        return
    prev, dev.gpm_prev = dev.gpm_prev, sample
    if prev is None:
        return
    try:
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.sample1 = prev
        mg.sample2 = sample
        ids = (
            nv.NVML_GPM_METRIC_SM_UTIL,
            nv.NVML_GPM_METRIC_SM_OCCUPANCY,
            nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
            nv.NVML_GPM_METRIC_DRAM_BW_UTIL,
        )
        mg.numMetrics = len(ids)
        for i, mid in enumerate(ids):
            mg.metrics[i].metricId = mid
        nv.nvmlGpmMetricsGet(mg)
        vals = [float(mg.metrics[i].value) if mg.metrics[i].nvmlReturn == 0 else None for i in range(len(ids))]
        r.sm_activity, r.sm_occupancy, r.tensor_activity, r.dram_bandwidth = vals
    except nv.NVMLError_GpuIsLost:
        raise
    except Exception:
        pass
    finally:
        try:
            nv.nvmlGpmSampleFree(prev)
        except Exception:
            pass
