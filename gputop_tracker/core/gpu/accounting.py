"""NVML accounting: the driver's own per-process peak of GPU memory, kept after a process exits.

When an administrator has turned accounting mode on (`nvidia-smi -am 1`, as root; not available on MIG),
`nvmlDeviceGetAccountingStats(pid).maxMemoryUsage` is the largest amount of GPU memory the process ever had
allocated on that GPU: exact, whatever happened between two samples. `nvmlDeviceGetAccountingPids` lists
the processes the driver keeps records of (running or terminated). The tool only reads the mode: it never
changes a device setting.

A record is keyed by PID, and PIDs are reused: a record counts for a tracked process only when it started
no earlier than that process (the record's startTime against the process's start time from /proc).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

LABEL = "exact (NVML accounting)"
HOW_TO_ENABLE = "an administrator can turn it on with `nvidia-smi -am 1` (root; not available on MIG)"
#: /proc/stat's btime has a resolution of one second: a start read back from /proc may be that much late
START_SLACK_S = 1.0


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_start_epoch(pid: int, boot: float | None, ticks: float) -> float | None:
    """When the process started, in seconds since the epoch (field 22 of /proc/PID/stat); None if unknown."""
    if boot is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        fields = raw[raw.rindex(b")") + 2 :].split()
        return boot + int(fields[19]) / ticks
    except (OSError, ValueError, IndexError):
        return None


class ProcessStarts:
    """Start times of the processes seen, read once each and kept after they exit."""

    def __init__(self, reader: Callable[[int], float | None] | None = None) -> None:
        if reader is None:
            boot, ticks = _boot_time(), float(os.sysconf("SC_CLK_TCK"))
            reader = lambda pid: process_start_epoch(pid, boot, ticks)  # noqa: E731
        self._read = reader
        self._starts: dict[int, float | None] = {}

    def see(self, pids: Iterable[int]) -> None:
        for pid in pids:
            if pid not in self._starts:
                self._starts[pid] = self._read(pid)

    def __contains__(self, pid: int) -> bool:
        return pid in self._starts

    def started(self, pid: int) -> float | None:
        return self._starts.get(pid)


def record_is_this_process(start_us: int, running: bool, alive: bool, started: float | None) -> bool:
    """Whether an accounting record of a PID belongs to the tracked process of that PID (and not to an earlier
    process that had it). A running record of a live process is its own: one PID, one live process."""
    if running and alive:
        return True
    if started is None:
        return False
    return start_us / 1e6 >= started - START_SLACK_S


def accounting_mode(nv: Any, handle: Any) -> bool | None:
    """True when accounting is on, False when off, None when the GPU cannot say (MIG, old GPUs, no NVML)."""
    try:
        return bool(nv.nvmlDeviceGetAccountingMode(handle) == nv.NVML_FEATURE_ENABLED)
    except nv.NVMLError_GpuIsLost:
        raise
    except Exception:
        return None


def read_accounting_peaks(
    nv: Any,
    handle: Any,
    to_ours: Callable[[int], int | None],
    starts: ProcessStarts,
    alive: set[int],
) -> dict[int, int]:
    """Tracked PID -> exact peak GPU memory on this GPU (bytes), for every record of a tracked process.

    `to_ours` maps the driver's (host) PIDs to the PIDs the tracker sees; `starts` holds the start time of every
    process tracked so far (exited ones too); `alive` the ones running now.
    """
    try:
        host_pids = nv.nvmlDeviceGetAccountingPids(handle)
    except nv.NVMLError_GpuIsLost:
        raise
    except Exception:
        return {}
    peaks: dict[int, int] = {}
    for host in host_pids:
        pid = to_ours(int(host))
        if pid is None or pid not in starts:
            continue
        try:
            st = nv.nvmlDeviceGetAccountingStats(handle, int(host))
        except nv.NVMLError_GpuIsLost:
            raise
        except Exception:  # NOT_FOUND: the record left the driver's ring buffer meanwhile
            continue
        if st.maxMemoryUsage is None:  # NVML_VALUE_NOT_AVAILABLE (pynvml gives None)
            continue
        if record_is_this_process(int(st.startTime), bool(st.isRunning), pid in alive, starts.started(pid)):
            peaks[pid] = max(peaks.get(pid, 0), int(st.maxMemoryUsage))
    return peaks
