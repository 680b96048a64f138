"""GPU access behind one small interface: NVML (nvidia-ml-py) for real GPUs, fakes for tests and demos.

Nothing else in the tool knows which backend it talks to. Every NVML failure degrades to a missing
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
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop_tracker.core.gpu.nvml_extras import NvmlExtras
from gputop_tracker.core.gpu.watch import GpuWatcher, Window


@dataclass
class GpuReading:
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
    #: pid as the tracker sees it (host PIDs from NVML mapped through NSpid) -> bytes of GPU memory
    processes: dict[int, int] = field(default_factory=dict)
    lost: bool = False
    pci_bus_id: str | None = None
    memory_reserved: int | None = None
    clock_sm_mhz: float | None = None
    clock_memory_mhz: float | None = None
    fan_percent: float | None = None
    energy_mj: int | None = None  # NVML's counter since the driver loaded; differences are what count
    # GPM (Hopper and newer): how busy the SMs really were; None where the GPU has no GPM
    sm_activity: float | None = None
    sm_occupancy: float | None = None
    tensor_activity: float | None = None
    dram_bandwidth: float | None = None
    #: pid -> SM / memory utilization % from nvmlDeviceGetProcessUtilization (new samples only)
    process_sm_util: dict[int, float] = field(default_factory=dict)
    process_memory_util: dict[int, float] = field(default_factory=dict)
    #: pid -> (gpuInstanceId, computeInstanceId) where NVML gives them (MIG)
    process_instances: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: bytes NVML lists for PIDs that could not be mapped to this PID namespace (containers); None = n/a
    unattributed_memory: int | None = None
    mig_parent: int | None = None  # index of the physical GPU this MIG device belongs to
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    vendor: str | None = None  # "nvidia", "amd"; None: simulated or scripted
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


#: the reading's own fields a streamed sample carries (`models.GpuSample` adds tree_memory, counted, simulated,
#: energy_j and tree_sm_util); a test checks this list against the model with extra="forbid"
SAMPLE_FIELDS = (
    "index",
    "uuid",
    "name",
    "memory_total",
    "memory_used",
    "utilization_gpu",
    "utilization_memory",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "lost",
    "pci_bus_id",
    "memory_reserved",
    "clock_sm_mhz",
    "clock_memory_mhz",
    "fan_percent",
    "sm_activity",
    "sm_occupancy",
    "tensor_activity",
    "dram_bandwidth",
    "unattributed_memory",
    "mig_parent",
    "vendor",
)


class GpuBackend:
    """The interface. `read` is called once per sample with the tracked pids."""

    simulated = False
    #: "nvidia" or "amd": which *_VISIBLE_DEVICES variables choose the GPUs counted; None for fakes
    vendor: str | None = None
    #: one line for the report when GPUs are absent or only partly readable
    note: str | None = None

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


class NoGpuBackend(GpuBackend):
    def __init__(self, note: str) -> None:
        super().__init__()
        self.note = note

    def found_none(self) -> bool:
        return True


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

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        t = self._clock() - self._t0
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
                    energy_mj=int(power * t * 1000),
                    sm_activity=round(util * 0.7, 1),
                    sm_occupancy=round(util * 0.4, 1),
                    process_sm_util={pids[0]: round(util * 0.9, 1)} if pids else {},
                )
            )
        return out


# The initial PID namespace has this fixed inode (PROC_PID_INIT_INO); any other means a container.
_INIT_PID_NS = "pid:[4026531836]"


def in_pid_namespace() -> bool:
    try:
        return os.readlink("/proc/self/ns/pid") != _INIT_PID_NS
    except OSError:
        return False


def read_nspid(pid: int) -> list[int]:
    """NSpid of /proc/PID/status: the PID in each namespace from /proc's own down to the process's."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


class PidMapper:
    """Maps the host PIDs NVML reports to the PIDs the tracker sees.

    Outside a PID namespace they are the same. Inside one (a container), /proc shows the host PID only
    where it is mounted from an outer namespace (NSpid has more than one level); PIDs that cannot be
    mapped are returned as unmapped, so their memory is reported as unattributed rather than dropped.
    """

    def __init__(self, namespaced: bool | None = None, nspid: Callable[[int], list[int]] = read_nspid) -> None:
        self.namespaced = in_pid_namespace() if namespaced is None else namespaced
        self._nspid = nspid
        self._map: dict[int, int] = {}
        self._known: set[int] = set()
        self._paired: dict[int, int] = {}  # host PID -> tracked PID, by elimination (containers.py)

    def update(self, pids: Sequence[int]) -> None:
        if not self.namespaced:
            return
        for pid in pids:
            if pid in self._known:
                continue
            self._known.add(pid)
            levels = self._nspid(pid)
            if len(levels) > 1:  # /proc shows outer levels: one of them is the host's PID
                for x in levels:
                    self._map[x] = pid

    def __call__(self, host_pid: int) -> int | None:
        if not self.namespaced:
            return host_pid
        pid = self._map.get(host_pid)
        return self._paired.get(host_pid) if pid is None else pid

    def mapped(self) -> set[int]:
        """The tracked PIDs whose host PID is known (through NSpid or a pairing)."""
        return set(self._map.values()) | set(self._paired.values())

    def pair(self, pairs: dict[int, int], alive: set[int]) -> bool:
        """Take pairings made by elimination (host PID -> tracked PID); drop those of processes gone (their host
        PID may be reused). True when the mapping changed."""
        kept = {h: p for h, p in self._paired.items() if p in alive}
        kept.update(pairs)
        changed = kept != self._paired
        self._paired = kept
        return changed

    def is_paired(self, host_pid: int) -> bool:
        return host_pid in self._paired and host_pid not in self._map


@dataclass
class OpenedDevice:
    """What a backend keeps of each device it opened (NVML here, AMD in amd.py): who the device is, and what
    its reads found last."""

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


@dataclass
class _Device(OpenedDevice):
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
        self._devices: list[_Device] = []
        self._process_lists = (
            _running_processes(pynvml, "nvmlDeviceGetComputeRunningProcesses_v3"),
            _running_processes(pynvml, "nvmlDeviceGetGraphicsRunningProcesses_v3"),
        )
        n = pynvml.nvmlDeviceGetCount()
        migs: list[_Device] = []
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

    def _open(self, h: Any, index: int) -> _Device:
        nv = self._nvml
        try:
            name = self._get(nv.nvmlDeviceGetName, h) or f"GPU {index}"
            uuid = self._get(nv.nvmlDeviceGetUUID, h) or f"GPU-index-{index}"
            dev = _Device(handle=h, index=index, uuid=str(uuid), name=str(name))
            pci = self._get(nv.nvmlDeviceGetPciInfo, h)
            if pci is not None:
                bus = pci.busId
                dev.pci_bus_id = bus.decode() if isinstance(bus, bytes) else str(bus)
            mem = self._memory(dev)
            dev.memory_total = int(mem.total) if mem is not None else None
            dev.gpm = bool(getattr(self._get(nv.nvmlGpmQueryDeviceSupport, h), "isSupportedDevice", 0))
        except nv.NVMLError_GpuIsLost:
            dev = _Device(handle=h, index=index, uuid=f"GPU-index-{index}", name=f"GPU {index}", lost=True)
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

    def _memory(self, dev: _Device) -> Any:
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

    def _read_device(self, dev: _Device, r: GpuReading, due: _Due, window: Window | None) -> None:
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
            self._read_gpm(dev, r)
            dev.gpm_last = (r.sm_activity, r.sm_occupancy, r.tensor_activity, r.dram_bandwidth)
        r.sm_activity, r.sm_occupancy, r.tensor_activity, r.dram_bandwidth = dev.gpm_last
        if due.slow:
            if window is None:
                self._read_processes(dev, r)
            # 1.4 ms of CPU on an H100: only while a tracked process is on this GPU (the figure is the tree's)
            if dev.mig_parent is None and not dev.mig_enabled and not due.tree.isdisjoint(dev.procs):
                self._read_process_util(dev, r)
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

    def _read_rare(self, dev: _Device) -> None:
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

    def _energy(self, dev: _Device) -> int | None:
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

        def chosen(d: _Device) -> bool:
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

    def _read_processes(self, dev: _Device, r: GpuReading | None) -> None:
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

    def _read_process_util(self, dev: _Device, r: GpuReading) -> None:
        nv = self._nvml
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(dev.handle, dev.last_seen_us)
        except nv.NVMLError_GpuIsLost:
            raise
        except Exception:  # NOT_FOUND: no new samples since last_seen; NotSupported: none ever
            return
        for s in samples:
            dev.last_seen_us = max(dev.last_seen_us, int(s.timeStamp))
            pid = self._pids(int(s.pid))
            if pid is None:
                continue
            r.process_sm_util[pid] = max(r.process_sm_util.get(pid, 0.0), float(s.smUtil))
            r.process_memory_util[pid] = max(r.process_memory_util.get(pid, 0.0), float(s.memUtil))

    def _read_gpm(self, dev: _Device, r: GpuReading) -> None:
        nv = self._nvml
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


@dataclass
class _ProcessInfo:
    """One entry of a running-processes list, as nvidia-ml-py gives it (usedGpuMemory None: not available)."""

    pid: int
    usedGpuMemory: int | None  # NVML's names
    gpuInstanceId: int
    computeInstanceId: int


def _running_processes(nv: Any, name: str) -> Callable[[Any], list[_ProcessInfo]]:
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


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def _fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", "an NVML query").removeprefix("nvmlDevice")


def _err(e: Exception) -> str:
    return type(e).__name__.removeprefix("NVMLError_")


SIMULATE_ENV = "GPUTOP_TRACKER_SIMULATE_GPUS"
NVML_LIBRARY = "libnvidia-ml.so.1"  # the name pynvml loads on Linux


def open_backend(simulate: int = 0) -> GpuBackend:
    """The backend for this machine: simulated if asked, else NVML, else none with a one-line note."""
    simulate = simulate or int(os.environ.get(SIMULATE_ENV, "0") or 0)
    if simulate > 0:
        return SimulatedGpuBackend(simulate)
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


def resolve_gpu_selection(
    readings: Sequence[GpuReading], spec: str, *, as_runtime: bool = False, cuda_order: bool = False
) -> tuple[set[str], list[str]]:
    """UUIDs chosen by a CUDA_VISIBLE_DEVICES-style list: indices, full or short UUIDs, MIG UUIDs.

    `as_runtime`: the list is the variable the job's runtime reads, so it is read as CUDA (and ROCm) read it: an
    entry that names no GPU (or several) hides it and every entry after it (`0,9,1` on 8 GPUs is GPU 0 alone).
    Otherwise (`--gpus`, a scheduler's list) such an entry is skipped and the others kept. `cuda_order`: the
    indices are meant as CUDA's (a user's list, the job's variable; not a scheduler's): say where they may differ.

    Returns (uuids, problems). NVML orders GPUs by PCI bus, not as CUDA does, so indices are taken as
    NVML indices of physical GPUs (MIG devices are chosen by UUID only); everything is resolved to a UUID.
    A layered spec (`ROCR_VISIBLE_DEVICES=0,2; HIP_VISIBLE_DEVICES=1`, see gpuselect) applies each list to
    what the one before it left, as ROCr and HIP do: an index is a position in that list.
    """
    if "=" in spec:
        return _resolve_layers(readings, spec, as_runtime)
    picked, problems = _pick(spec, readings, by_position=False, stop=as_runtime)
    return {r.uuid for r in picked}, problems + (_order_caveat(readings, spec) if cuda_order else [])


def _order_caveat(readings: Sequence[GpuReading], spec: str) -> list[str]:
    """Indices are NVML's (PCI bus order); CUDA numbers the fastest GPU first unless CUDA_DEVICE_ORDER=PCI_BUS_ID.
    The two agree where every GPU is the same model; elsewhere an index may name another GPU than the job's."""
    models = {r.name for r in readings if r.mig_parent is None}
    has_index = any(x.strip().lstrip("-").isdigit() for x in spec.split(","))
    if len(models) < 2 or not has_index or os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return []
    return [
        "indices are taken in PCI bus order (NVML's); with different GPU models here CUDA numbers the fastest first "
        "unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so an index may be another GPU for the job (UUIDs name one for sure)"
    ]


def _pick(
    value: str, pool: Sequence[GpuReading], *, by_position: bool, stop: bool = False
) -> tuple[list[GpuReading], list[str]]:
    """The GPUs of `pool` a comma-separated list names, in the list's order, and the items that name none or
    several. An index is a position in `pool` (by_position) or an NVML index of a physical GPU; other items are
    full or short UUIDs. A negative index ends the list, as in CUDA; so does any bad item when `stop`."""
    picked: list[GpuReading] = []
    problems: list[str] = []
    items = value.split(",")
    for n, raw in enumerate(items):
        item = raw.strip()
        if not item:
            continue
        if item.lstrip("-").isdigit():
            idx = int(item)
            if idx < 0:
                break  # CUDA stops at the first invalid index
            if by_position:
                found = [pool[idx]] if idx < len(pool) else []
            else:
                found = [r for r in pool if r.index == idx and r.mig_parent is None]
        else:
            uuids = set(_match_id(pool, item))
            found = [r for r in pool if r.uuid in uuids]
        if len(found) == 1:
            if found[0] not in picked:
                picked.append(found[0])
            continue
        problem = f"{item!r} matches {'no' if not found else 'more than one'} GPU"
        rest = ",".join(x.strip() for x in items[n + 1 :] if x.strip())
        if stop:
            problems.append(
                f"{problem}: the job's GPU runtime sees no GPU from there on"
                + (f" ({rest} not counted)" if rest else "")
            )
            break
        problems.append(problem)
    return picked, problems


def _match_id(readings: Sequence[GpuReading], item: str) -> list[str]:
    """UUIDs of the readings a full or short UUID (or an alternative id, AMD's GPU-<hex>) names."""
    key = item.lower()

    def ids(r: GpuReading) -> list[str]:
        return [x.lower() for x in (r.uuid, *r.alt_ids)]

    match = [r.uuid for r in readings if any(x == key or x.startswith(key) for x in ids(r))]
    if not match and not key.startswith(("gpu-", "mig-")):
        match = [r.uuid for r in readings if any(x.startswith("gpu-" + key) for x in ids(r))]
    return match


def _resolve_layers(readings: Sequence[GpuReading], spec: str, stop: bool) -> tuple[set[str], list[str]]:
    pool = sorted((r for r in readings if r.mig_parent is None), key=lambda r: r.index)
    problems: list[str] = []
    for layer in spec.split(";"):
        name, _, value = layer.strip().partition("=")
        pool, missed = _pick(value, pool, by_position=True, stop=stop)
        problems += [f"{name}: {p}" for p in missed]
    return {r.uuid for r in pool}, problems
