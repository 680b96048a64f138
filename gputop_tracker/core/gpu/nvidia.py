"""NVIDIA GPUs through NVML (nvidia-ml-py): the backend and its opener. Every NVML failure degrades to a missing
field, a GPU marked lost, or a one-line note — never an exception out of `read`.

Cost (CPU per call on an H100; bench/bench_nvml.py, bench/bench_gpu_watch.py): only the cheap queries run
every sample (utilization, temperature, power: 1-2 µs). The process lists and device memory of the counted
GPUs are read by the watcher (`watch.GpuWatcher`, 50 Hz by default) on its own thread; each sample takes the
highs it saw. The slow ones run at their own pace: energy (3.5 ms) at the first sample, at most every
ENERGY_PERIOD and at the end (`read_energy`); per-process utilization (1.4 ms) and GPM (94 µs) at most once
a second; clocks, fan and power limit every RARE_PERIOD.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gputop_tracker.core.gpu.base import GpuBackend, GpuReading, NoGpuBackend
from gputop_tracker.core.gpu.nvml_device import NvmlDevice, read_gpm, read_process_util, running_processes
from gputop_tracker.core.gpu.nvml_extras import NvmlExtras
from gputop_tracker.core.gpu.pidns import PidMapper
from gputop_tracker.core.gpu.watch import GpuWatcher, Window


class NvmlBackend(GpuBackend):
    """Real GPUs through nvidia-ml-py. NVML is initialised once and handles are cached."""

    vendor = "nvidia"

    #: the running-processes query takes a driver lock (~4.5 ms per GPU): at most this often ...
    PROCESS_PERIOD = 1.0
    #: ... and never more than 1/PROCESS_BUDGET of the time (period = max(PERIOD, cost × BUDGET))
    PROCESS_BUDGET = 50.0
    #: the energy counter costs 3.5 ms of CPU a read on an H100: at most this often (and at the start and end)
    ENERGY_PERIOD = 5.0
    #: clocks, fan and power limit change seldom
    RARE_PERIOD = 10.0

    def __init__(self, pid_mapper: PidMapper | None = None) -> None:
        super().__init__()
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._pids = pid_mapper or PidMapper()
        self._devices: list[NvmlDevice] = []
        self._process_lists = (
            running_processes(pynvml, "nvmlDeviceGetComputeRunningProcesses_v3"),
            running_processes(pynvml, "nvmlDeviceGetGraphicsRunningProcesses_v3"),
        )
        n = pynvml.nvmlDeviceGetCount()
        migs: list[NvmlDevice] = []
        for i in range(n):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
            except pynvml.NVMLError as e:
                self.problems.add(f"GPU {i} could not be opened ({_err(e)}); it is not tracked")
                continue
            dev = self._open(h, i)
            self._devices.append(dev)
            if dev.lost:
                continue
            mode = self._get(pynvml.nvmlDeviceGetMigMode, h)
            if mode is not None and mode[0] == getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
                dev.mig_enabled = True
                count = self._get(pynvml.nvmlDeviceGetMaxMigDeviceCount, h) or 0
                for k in range(count):
                    mh = self._get(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
                    if mh is None:
                        continue
                    m = self._open(mh, n + len(migs))
                    m.mig_parent = i
                    m.gpu_instance_id = self._get(pynvml.nvmlDeviceGetGpuInstanceId, mh)
                    m.compute_instance_id = self._get(pynvml.nvmlDeviceGetComputeInstanceId, mh)
                    m.gpm = False  # GPM of MIG instances needs nvmlGpmMigSampleGet: not read
                    migs.append(m)
        self._devices += migs
        self._extras = NvmlExtras(self)
        self._procs_due = 0.0
        self._energy_due = 0.0
        self._rare_due = 0.0
        self._watched: set[int] = set()  # device indices the watcher reads
        self._unmapped_seen: frozenset[int] = frozenset()  # host PIDs the lists held that no tracked PID maps
        self._counted: set[str] | None = None
        self.process_query_s = 0.0  # last cost of the slow queries, all devices (for the benchmark)
        if not self._devices:
            self.note = "NVML found no NVIDIA GPU"

    def found_none(self) -> bool:
        return not self._devices

    def _open(self, h: Any, index: int) -> NvmlDevice:
        nv = self._nvml
        try:
            name = self._get(nv.nvmlDeviceGetName, h) or f"GPU {index}"
            uuid = self._get(nv.nvmlDeviceGetUUID, h) or f"GPU-index-{index}"
            dev = NvmlDevice(handle=h, index=index, uuid=str(uuid), name=str(name))
            pci = self._get(nv.nvmlDeviceGetPciInfo, h)
            if pci is not None:
                bus = pci.busId
                dev.pci_bus_id = bus.decode() if isinstance(bus, bytes) else str(bus)
            mem = self._memory(dev)
            dev.memory_total = int(mem.total) if mem is not None else None
            dev.gpm = bool(getattr(self._get(nv.nvmlGpmQueryDeviceSupport, h), "isSupportedDevice", 0))
        except nv.NVMLError_GpuIsLost:
            dev = NvmlDevice(handle=h, index=index, uuid=f"GPU-index-{index}", name=f"GPU {index}", lost=True)
            self.problems.add(f"GPU {index} was lost before tracking started")
        return dev

    def _get(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call one NVML query; None when unsupported, not permitted or failing. A lost GPU raises."""
        nv = self._nvml
        try:
            return fn(*args)
        except nv.NVMLError as e:
            if isinstance(e, nv.NVMLError_GpuIsLost):
                raise
            if isinstance(e, nv.NVMLError_NoPermission):
                self.problems.add(f"NVML: no permission for {_fn_name(fn)}; that figure is absent")
            return None
        except Exception:  # NVMLLibraryMismatchError (unversioned wrappers) is a plain Exception
            return None

    def _memory(self, dev: NvmlDevice) -> Any:
        nv = self._nvml
        if dev.memory_v2 and hasattr(nv, "nvmlMemory_v2"):
            try:
                return nv.nvmlDeviceGetMemoryInfo(dev.handle, version=nv.nvmlMemory_v2)
            except nv.NVMLError_GpuIsLost:
                raise
            except Exception:  # an older driver without _v2: the v1 struct (no reserved) from now on
                dev.memory_v2 = False
        return self._get(nv.nvmlDeviceGetMemoryInfo, dev.handle)

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        now = time.monotonic()
        cpu = time.thread_time()  # the budget is CPU: waiting for the watcher's thread (the GIL) costs nothing
        slow = now >= self._procs_due
        self._pids.update(pids)  # only new pids cost anything (and nothing outside a PID namespace)
        due = _Due(slow, now >= self._energy_due, now >= self._rare_due, set(pids) if slow else set())
        if due.energy:
            self._energy_due = now + self.ENERGY_PERIOD
        if due.rare:
            self._rare_due = now + self.RARE_PERIOD
        window = self.watcher.take() if self.watcher is not None else None
        out = []
        by_index = {d.index: d for d in self._devices}
        for dev in self._devices:
            if dev.mig_parent is not None and by_index[dev.mig_parent].lost:
                dev.lost = True
            r = GpuReading(
                index=dev.index,
                uuid=dev.uuid,
                name=dev.name,
                memory_total=dev.memory_total,
                pci_bus_id=dev.pci_bus_id,
                mig_parent=dev.mig_parent,
                gpu_instance_id=dev.gpu_instance_id,
                compute_instance_id=dev.compute_instance_id,
                vendor="nvidia",
            )
            out.append(r)
            if dev.lost:
                r.lost = True
                continue
            try:
                self._read_device(dev, r, due, window if dev.index in self._watched else None)
            except self._nvml.NVMLError_GpuIsLost:
                dev.lost = r.lost = True
                self.problems.add(f"GPU {dev.index} ({dev.uuid}) fell off the bus (NVML: GPU is lost)")
            except Exception as e:  # never let one device stop the tracking of the others
                self.problems.add(f"GPU {dev.index}: reading failed ({type(e).__name__}: {e})")
        self._note_no_figure(pids)
        # pairing (containers) and accounting at the slow pace, and at once when the watcher saw new host PIDs
        if self._new_unmapped() or slow:
            self._extras.after_processes(out, pids)
        if slow:
            cost = time.thread_time() - cpu
            self.process_query_s = cost
            self._procs_due = now + max(self.PROCESS_PERIOD, cost * self.PROCESS_BUDGET)
        return out

    def _note_no_figure(self, pids: Sequence[int]) -> None:
        """A note for each GPU with no process list, and each where NVML lists a tracked process without its memory:
        counted as 0 there, so the tree's figures on that GPU are lower bounds, never a silent zero. (On the
        sampler's thread: the watcher only hands over what it read.)"""
        for dev in self._devices:
            if dev.no_list and not dev.lost:
                self.problems.add(
                    f"GPU {dev.index}: NVML gives no list of the processes on it (not supported on this GPU or "
                    "driver, or not permitted): GPU memory of the tree there is unknown, counted as 0 (a lower "
                    "bound); the GPU's memory used is its whole figure, every process's"
                )
            if dev.no_figure and not dev.no_figure.isdisjoint(pids):
                self.problems.add(
                    f"GPU {dev.index}: NVML gives no memory figure (N/A) for a tracked process there (as under MIG, "
                    "in some containers, on WDDM): it counts as 0, so GPU memory of the tree on that GPU is a lower "
                    "bound, and that process's own figure there is missing"
                )

    def _new_unmapped(self) -> bool:
        """True when the process lists hold host PIDs (containers) other than at the last look."""
        if not self._pids.namespaced:
            return False
        hosts = frozenset(h for d in self._devices for h in d.unmapped)
        changed, self._unmapped_seen = hosts != self._unmapped_seen, hosts
        return changed and bool(hosts)

    def _read_device(self, dev: NvmlDevice, r: GpuReading, due: _Due, window: Window | None) -> None:
        nv = self._nvml
        h = dev.handle
        get = self._get
        mem = dev.last_mem if window is not None and dev.last_mem is not None else self._memory(dev)
        if mem is not None:
            r.memory_used = int(mem.used) if window is None else window.used_max.get(dev.index, int(mem.used))
            r.memory_total = dev.memory_total = int(mem.total)
            reserved = getattr(mem, "reserved", None)
            r.memory_reserved = int(reserved) if reserved is not None else None
        util = get(nv.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            r.utilization_gpu = float(util.gpu)
            r.utilization_memory = float(util.memory)
        r.temperature_c = _num(get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU))
        power = _num(get(nv.nvmlDeviceGetPowerUsage, h))
        r.power_w = power / 1000.0 if power is not None else None
        if due.rare:
            self._read_rare(dev)
        r.clock_sm_mhz, r.clock_memory_mhz = dev.clocks
        if due.energy:  # a reading only when read: the summary's energy is last minus first
            r.energy_mj = self._energy(dev)
        if dev.gpm and due.slow:
            read_gpm(self._nvml, dev, r)
            dev.gpm_last = (r.sm_activity, r.sm_occupancy, r.tensor_activity, r.dram_bandwidth)
        r.sm_activity, r.sm_occupancy, r.tensor_activity, r.dram_bandwidth = dev.gpm_last
        if due.slow:
            if window is None:
                self._read_processes(dev, r)
            # 1.4 ms of CPU on an H100: only while a tracked process is on this GPU (the figure is the tree's)
            if dev.mig_parent is None and not dev.mig_enabled and not due.tree.isdisjoint(dev.procs):
                read_process_util(self._nvml, dev, r, self._pids)
        r.power_limit_w = dev.power_limit_w
        r.fan_percent = dev.fan_percent
        r.processes = dev.procs if window is None else window.procs_max.get(dev.index, dev.procs)
        r.window = window
        r.process_instances = dev.instances
        r.unattributed_memory = dev.unattributed
        r.attributed_pids = dev.attributed
        r.no_figure = dev.no_figure
        r.accounting = dev.accounting
        r.accounting_peaks = dev.accounting_peaks

    def _read_rare(self, dev: NvmlDevice) -> None:
        nv = self._nvml
        h = dev.handle
        get = self._get
        dev.clocks = (
            _num(get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
            _num(get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)),
        )
        limit = _num(get(nv.nvmlDeviceGetEnforcedPowerLimit, h))
        dev.power_limit_w = limit / 1000.0 if limit is not None else None
        dev.fan_percent = _num(get(nv.nvmlDeviceGetFanSpeed, h))

    def _energy(self, dev: NvmlDevice) -> int | None:
        energy = self._get(self._nvml.nvmlDeviceGetTotalEnergyConsumption, dev.handle)
        return int(energy) if isinstance(energy, int) else None

    def read_energy(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for dev in self._devices:
            if dev.lost:
                continue
            try:
                energy = self._energy(dev)
            except Exception:  # lost meanwhile: its last reading stands
                continue
            if energy is not None:
                out[dev.index] = energy
        return out

    # ------------------------------------------------------------------ the GPU memory watcher

    def set_counted(self, uuids: set[str] | None) -> None:
        self._counted = uuids
        if self.watcher is not None:
            self._watched = self._to_watch()

    def _to_watch(self) -> set[int]:
        """Devices the watcher reads: the counted ones (all by default), a counted GPU's MIG devices with it."""
        counted = self._counted
        by_index = {d.index: d for d in self._devices}

        def chosen(d: NvmlDevice) -> bool:
            if counted is None:
                return True
            parent = by_index.get(d.mig_parent) if d.mig_parent is not None else None
            return d.uuid in counted or (parent is not None and parent.uuid in counted)

        return {d.index for d in self._devices if chosen(d)}

    def start_watch(self, hz: float) -> None:
        if hz <= 0 or not self._devices:
            return
        self._watched = self._to_watch()
        self.watcher = GpuWatcher(self._watch_pass, hz)
        self.watcher.summed = {d.index for d in self._devices if d.mig_parent is None}  # MIG memory is the parent's
        self.watcher.poll_once()  # the first sample already has a read
        self.watcher.start()

    def _watch_pass(self) -> tuple[dict[int, dict[int, int]], dict[int, int]]:
        """One read of the watched devices' process lists and memory (on the watcher's thread)."""
        procs: dict[int, dict[int, int]] = {}
        used: dict[int, int] = {}
        watched = self._watched
        for dev in self._devices:
            if dev.index not in watched or dev.lost:
                continue
            try:
                mem = self._memory(dev)
                if mem is not None:
                    dev.last_mem = mem
                    used[dev.index] = int(mem.used)
                self._read_processes(dev, None)
            except Exception:  # lost or failing: the sampler's own read finds out and says so
                continue
            procs[dev.index] = dev.procs
        return procs, used

    def memory_source(self) -> str:
        if self.watcher is None:
            return f"sampled (NVML running processes, at most every {self.PROCESS_PERIOD:g} s)"
        label = self.watcher.label("NVML running processes")
        # the watcher reads the counted GPUs only: a figure may come from another one, read at the slow pace
        slow = [str(d.index) for d in self._devices if d.index not in self._watched and not d.mig_enabled]
        if slow:
            label += f"; GPU {', '.join(slow)} (not counted): at most every {self.PROCESS_PERIOD:g} s"
        return label

    def _read_processes(self, dev: NvmlDevice, r: GpuReading | None) -> None:
        if dev.mig_enabled:  # the parent lists MIG processes without memory: read them on the MIG devices
            dev.procs, dev.instances, dev.unattributed = {}, {}, None
            return
        procs: dict[int, int] = {}
        instances: dict[int, tuple[int, int]] = {}
        unmapped = False
        attributed: set[int] = set()
        unmapped_hosts: dict[int, int] = {}  # filled here, then handed over whole (the watcher's thread reads lists)
        no_figure: set[int] = set()
        answered = False
        for fn in self._process_lists:
            listed = self._get(fn, dev.handle)
            answered = answered or listed is not None
            for p in listed or ():
                used = getattr(p, "usedGpuMemory", None)
                pid = self._pids(int(p.pid))
                if used is None and pid is not None:  # not available (MIG on the parent, some containers, WDDM)
                    no_figure.add(pid)
                used = int(used) if used else 0
                # A process with a compute and a graphics context is in both lists, each time with its whole
                # figure (nvidia-smi shows it once, as C+G): the larger, never the sum, which could exceed the truth.
                if pid is None:
                    unmapped = True
                    unmapped_hosts[int(p.pid)] = max(unmapped_hosts.get(int(p.pid), 0), used)
                    continue
                if self._pids.is_paired(int(p.pid)):
                    attributed.add(pid)
                procs[pid] = max(procs.get(pid, 0), used)
                gi = getattr(p, "gpuInstanceId", 0xFFFFFFFF)
                ci = getattr(p, "computeInstanceId", 0xFFFFFFFF)
                if gi != 0xFFFFFFFF:
                    instances[pid] = (int(gi), int(ci))
        dev.procs, dev.instances, dev.attributed = procs, instances, frozenset(attributed)
        dev.unmapped = unmapped_hosts
        dev.no_figure = frozenset(no_figure)
        dev.no_list = not answered
        unattributed = sum(unmapped_hosts.values())
        dev.unattributed = unattributed if (self._pids.namespaced and unmapped) else None

    def read_accounting_at_end(self, pids: Sequence[int]) -> list[GpuReading]:
        try:
            devices = self._extras.at_end(pids)
            return [
                GpuReading(index=d.index, uuid=d.uuid, name=d.name, vendor="nvidia", lost=d.lost,
                           accounting=d.accounting, accounting_peaks=dict(d.accounting_peaks))
                for d in devices
            ]  # fmt: skip
        except Exception as e:  # the report must still be written
            self.problems.add(f"NVML accounting records could not be read at the end ({type(e).__name__}: {e})")
            return []

    def close(self) -> None:
        self.stop_watch()
        for dev in self._devices:
            if dev.gpm_prev is not None:
                try:
                    self._nvml.nvmlGpmSampleFree(dev.gpm_prev)
                except Exception:
                    pass
                dev.gpm_prev = None
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


@dataclass
class _Due:
    """Which of the slower queries this sample runs."""

    slow: bool  # process utilization, GPM, and process lists the watcher does not read: at most once a second
    energy: bool
    rare: bool  # clocks, fan, power limit
    tree: set[int]  # the tracked pids (on slow samples)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def _fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", "an NVML query").removeprefix("nvmlDevice")


def _err(e: Exception) -> str:
    return type(e).__name__.removeprefix("NVMLError_")


NVML_LIBRARY = "libnvidia-ml.so.1"  # the name pynvml loads on Linux


def open_nvidia() -> GpuBackend:
    """The NVML backend, or a NoGpuBackend with a one-line note saying why not."""
    try:
        # 0.2 ms without a driver, against ~25 ms to import pynvml: machines without a GPU pay nothing
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return NoGpuBackend(f"no NVIDIA GPU found ({_nvml_reason_by_name('LibraryNotFound', '')})")
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
    return _nvml_reason_by_name(type(e).__name__.removeprefix("NVMLError_"), str(e))


def _nvml_reason_by_name(name: str, message: str) -> str:
    reasons = {
        "LibraryNotFound": "NVIDIA driver library libnvidia-ml.so.1 not found",
        "DriverNotLoaded": "NVIDIA driver not loaded",
        "NoPermission": "no permission to use NVML",
        # nvidia-smi's "Driver/library version mismatch": the driver was updated and the old module is still loaded
        "LibRmVersionMismatch": "the NVIDIA kernel driver and libnvidia-ml.so.1 versions differ: the driver was "
        "updated and the machine not rebooted (or the module not reloaded)",
    }
    return reasons.get(name, f"NVML: {message}")
