"""What the NVML backend reads after the process lists, at their slow pace: accounting records and, in a
container, the pairing of unmappable host PIDs with tracked processes (see accounting.py, containers.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gputop_tracker.core.gpu import accounting, containers
from gputop_tracker.core.gpu.base import GpuReading
from gputop_tracker.core.gpu.nvml_device import NvmlDevice
from gputop_tracker.core.gpu.pidns import PidMapper

NAMESPACE_LINE = (
    "the tracker runs in a PID namespace (container) whose /proc does not show the host PIDs NVML reports: "
    "GPU memory of processes it could not map is reported as unattributed"
)


class NvmlHost(Protocol):
    """What the extras use of `nvidia.NvmlBackend` (typed here: the backend imports the extras, never the reverse)."""

    _nvml: Any
    _devices: list[NvmlDevice]
    _pids: PidMapper
    problems: set[str]

    def _get(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def _read_processes(self, dev: NvmlDevice, r: GpuReading | None) -> None: ...


class NvmlExtras:
    def __init__(self, backend: NvmlHost) -> None:
        self.b = backend
        self.starts = accounting.ProcessStarts()
        self._final: set[int] = set()  # exited processes whose last record was read: their PID may be reused
        self._majors: containers.NvidiaMajors | None = None
        self._lines: dict[str, str] = {}  # kind -> the line in the backend's problems now
        self._paired_pids: set[int] = set()

    def after_processes(self, out: list[GpuReading], pids: list[int] | tuple[int, ...] | Any) -> None:
        alive = set(pids)
        devices = self.b._devices
        if self.b._pids.namespaced and any(d.unmapped for d in devices):
            try:
                self._pair(out, alive)
            except Exception as e:  # never let the pairing stop the tracking
                self.b.problems.add(f"pairing GPU processes in the container failed ({type(e).__name__}: {e})")
        self._say("namespace", NAMESPACE_LINE if any(d.unattributed for d in devices) else "")
        self.starts.see(alive)
        for dev, r in zip(devices, out, strict=True):
            if not dev.lost and dev.mig_parent is None and not dev.mig_enabled:
                try:
                    self._read_accounting(dev, alive)
                except Exception:  # a GPU lost meanwhile: the next sample's own reading says so
                    dev.accounting = None
            r.accounting = dev.accounting
            r.accounting_peaks = dev.accounting_peaks
        self._final |= {p for d in devices for p in d.accounting_peaks if p not in alive}

    def at_end(self, pids: Sequence[int]) -> list[NvmlDevice]:
        """Every GPU's accounting records read once more when tracking ends: a record read then covers the whole
        tracked life of its process (a record read while the process runs is its peak so far). The devices,
        for the backend to turn into readings."""
        alive = set(pids)
        self.starts.see(alive)
        for dev in self.b._devices:
            if not dev.lost and dev.mig_parent is None and not dev.mig_enabled:
                try:
                    self._read_accounting(dev, alive)
                except Exception:
                    dev.accounting = None
        return list(self.b._devices)

    # ---------------------------------------------------------------- accounting

    def _read_accounting(self, dev: NvmlDevice, alive: set[int]) -> None:
        nv = self.b._nvml
        dev.accounting = accounting.accounting_mode(nv, dev.handle)
        if not dev.accounting:
            return
        mapper = self.b._pids

        def to_ours(host: int) -> int | None:
            pid = mapper(host)
            return None if pid in self._final else pid

        peaks = accounting.read_accounting_peaks(nv, dev.handle, to_ours, self.starts, alive)
        for pid, peak in peaks.items():
            dev.accounting_peaks[pid] = max(dev.accounting_peaks.get(pid, 0), peak)

    # ---------------------------------------------------------------- containers

    def _pair(self, out: list[GpuReading], alive: set[int]) -> None:
        if self._majors is None:
            self._majors = containers.nvidia_majors()
        if not self._majors:  # no device numbers to judge by: nothing can be paired, nor ruled out
            self._say("unpaired", f"GPU memory left unattributed: {containers.NO_MAJORS}")
            return
        devices = self.b._devices
        unmapped: dict[int, set[int]] = {}
        for dev in devices:
            for host in dev.unmapped:
                unmapped.setdefault(host, set()).add(dev.index)
        holders, all_read = self._holders(alive - self.b._pids.mapped())
        pairing = containers.pair_by_elimination(
            {h: frozenset(g) for h, g in unmapped.items()}, holders, self._minors(), all_read
        )
        if self.b._pids.pair(pairing.pairs, alive):
            for dev, r in zip(devices, out, strict=True):
                if dev.unmapped and not dev.lost:
                    self.b._read_processes(dev, r)
                    r.processes, r.process_instances = dev.procs, dev.instances
                    r.unattributed_memory, r.attributed_pids = dev.unattributed, dev.attributed
        self._paired_pids |= set(pairing.pairs.values())
        reason = pairing.reason
        earlier = self._lines.get("unpaired", "")
        if reason and "ambiguous" in earlier and "ambiguous" not in reason:
            reason = earlier.removeprefix("GPU memory left unattributed: ")  # why it was, not that its holder left
        self._say("unpaired", f"GPU memory left unattributed: {reason}" if reason else "")
        if self._paired_pids:
            listed = ", ".join(str(p) for p in sorted(self._paired_pids))
            self._say(
                "paired",
                f"GPU memory of tracked PID(s) {listed} {containers.LABEL}: the only tracked process holding that "
                "GPU's device open, against the only process NVML lists there with a host PID not visible here",
            )

    def _holders(self, candidates: set[int]) -> tuple[dict[int, frozenset[int]], bool]:
        assert self._majors is not None
        holders: dict[int, frozenset[int]] = {}
        all_read = True
        for pid in candidates:
            nodes = containers.held_nvidia_nodes(pid, self._majors)
            if nodes is None:
                all_read = all_read and containers.fds_readable(pid)
            else:
                holders[pid] = nodes
        return holders, all_read

    def _minors(self) -> dict[int, int | None]:
        nv = self.b._nvml
        by_index = {d.index: d for d in self.b._devices}
        out: dict[int, int | None] = {}
        for dev in self.b._devices:
            phys = by_index.get(dev.mig_parent, dev) if dev.mig_parent is not None else dev
            if phys.minor is None and not phys.lost:
                phys.minor = self.b._get(nv.nvmlDeviceGetMinorNumber, phys.handle)
            out[dev.index] = phys.minor
        return out

    def _say(self, kind: str, line: str) -> None:
        old = self._lines.pop(kind, "")
        if old and old != line:
            self.b.problems.discard(old)
        if line:
            self._lines[kind] = line
            self.b.problems.add(line)
