"""AMD GPUs through amdsmi (PyPI `amdsmi`, which loads ROCm's libamd_smi.so with ctypes), behind `base.GpuBackend`.

Like the NVML backend: amdsmi is initialised once and handles cached; the cheap per-device queries (VRAM,
activity, temperature, power, clocks, energy) run every sample, the process list (it walks the driver's
per-process entries) at a bounded rate; every failure degrades to a missing field, a GPU marked lost, or a
one-line note, never an exception out of `read`.

amdsmi prints to stdout when it cannot load its library (and ROCm's library may print too): its import and
init run with fd 1 and `sys.stdout` captured, so nothing reaches the user's output or a JSON report on stdout.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gputop_tracker.core.gpu.base import GpuBackend, GpuReading, NoGpuBackend, OpenedDevice
from gputop_tracker.core.gpu.pidns import PidMapper

VENDOR = "amd"
LIBRARY = "libamd_smi.so"
# amdsmi status codes (amdsmi_status_t) that mean the device itself is gone, when its VRAM cannot be read
_LOST = {6: "DRM error", 12: "I/O error", 14: "file error", 31: "device not found", 52: "file not found"}
_NO_PERM = 10
_REASONS = {34: "amdgpu driver not loaded", 10: "no permission to use amdsmi", 18: "amdsmi initialisation error"}
_NA = 0xFFFF  # amdsmi's "not available" in 16-bit activity and power fields
NO_LIBRARY = f"no AMD GPU found (ROCm library {LIBRARY} not found)"


def library_candidates() -> list[str]:
    """Where amdsmi looks for its library, in its order (amdsmi_wrapper.find_smi_library)."""
    out = []
    rocm = os.environ.get("ROCM_HOME", os.environ.get("ROCM_PATH"))
    if rocm:
        out.append(os.path.join(rocm, "lib", LIBRARY))
    out.append(LIBRARY)  # LD_LIBRARY_PATH, ld.so.conf
    out.append(os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "lib", LIBRARY))
    return out


def find_library() -> str | None:
    """The first candidate that loads, or None: a dlopen costs ~0.1 ms where there is none, far less than
    importing amdsmi (~40 ms), so machines without ROCm pay nothing more."""
    for path in library_candidates():
        try:
            ctypes.CDLL(path)
        except OSError:
            continue
        return path
    return None


@contextlib.contextmanager
def quiet_stdout(captured: list[str]) -> Iterator[None]:
    """Run a block with fd 1 and sys.stdout captured; what was written is appended to `captured` (lines)."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
    except OSError:  # fd 1 closed: it is closed again afterwards
        saved = None
    buf = io.StringIO()
    with tempfile.TemporaryFile() as tmp:
        if tmp.fileno() != 1:
            os.dup2(tmp.fileno(), 1)
        try:
            with contextlib.redirect_stdout(buf):
                yield
        finally:
            with contextlib.suppress(Exception):  # C stdio buffers (printf of the library) go to the capture
                ctypes.CDLL(None).fflush(None)
            if saved is not None:
                os.dup2(saved, 1)
                os.close(saved)
            elif tmp.fileno() != 1:
                os.close(1)
            tmp.seek(0)
            text = buf.getvalue() + tmp.read().decode(errors="replace")
            captured.extend(line.strip() for line in text.splitlines() if line.strip())


def open_amd(pid_mapper: PidMapper | None = None) -> GpuBackend:
    """The AMD backend, or a NoGpuBackend with a one-line note saying why not."""
    if find_library() is None:
        return NoGpuBackend(NO_LIBRARY)
    captured: list[str] = []
    try:
        with quiet_stdout(captured):
            import amdsmi
    except ImportError:
        return NoGpuBackend(
            "no AMD GPU tracking: amdsmi is not installed (pip install 'amdsmi>=6.2,<8', the version of your ROCm)"
        )
    except Exception as e:  # amdsmi could not bind its library (a version without a symbol it needs ...)
        why = captured[0] if captured else f"{type(e).__name__}: {e}"
        return NoGpuBackend(f"no AMD GPU found (amdsmi did not load: {why})")
    try:
        with quiet_stdout(captured):
            return AmdSmiBackend(amdsmi, pid_mapper)
    except Exception as e:  # AmdSmiLibraryException from amdsmi_init, or a broken library
        code = getattr(e, "err_code", None)
        reason = _REASONS.get(code, f"amdsmi status {code}") if isinstance(code, int) else f"{type(e).__name__}: {e}"
        return NoGpuBackend(f"no AMD GPU found ({reason})")


@dataclass
class _Device(OpenedDevice):
    alt_ids: tuple[str, ...] = ()
    bytes_usage: bool = True  # amdsmi_get_gpu_memory_usage in bytes; else vram_usage in MiB
    temp_sensor: Any = None


class AmdSmiBackend(GpuBackend):
    """Real AMD GPUs (and partitions, each a device to amdsmi) through the amdsmi package."""

    vendor = VENDOR
    PROCESS_PERIOD = 1.0  # as NvmlBackend: the process list at most this often ...
    PROCESS_BUDGET = 50.0  # ... and never more than 1/PROCESS_BUDGET of the time

    def __init__(self, smi: Any, pid_mapper: PidMapper | None = None) -> None:
        super().__init__()
        self._smi = smi
        smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
        self._pids = pid_mapper or PidMapper()
        self._devices = [self._open(h, i) for i, h in enumerate(smi.amdsmi_get_processor_handles())]
        self._procs_due = 0.0
        self.process_query_s = 0.0
        if not self._devices:
            self.note = "amdsmi found no AMD GPU"

    def found_none(self) -> bool:
        return not self._devices

    def memory_source(self) -> str:
        return f"sampled (amdsmi process list, at most every {self.PROCESS_PERIOD:g} s)"

    def _get(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One amdsmi query; None when unsupported, not permitted or failing ("N/A" included)."""
        try:
            v = fn(*args)
        except Exception as e:
            if getattr(e, "err_code", None) == _NO_PERM:
                what = getattr(fn, "__name__", "a query")
                self.problems.add(f"amdsmi: no permission for {what}; that figure is absent")
            return None
        return None if v == "N/A" else v

    def _optional(self, name: str, h: Any) -> Any:
        """A query some amdsmi releases lack (partitions, enumeration: 6.4 and newer); None where absent."""
        fn = getattr(self._smi, name, None)
        return self._get(fn, h) if fn is not None else None

    def _open(self, h: Any, index: int) -> _Device:
        smi, get = self._smi, self._get
        uuid = get(smi.amdsmi_get_gpu_device_uuid, h) or f"AMD-index-{index}"
        asic = get(smi.amdsmi_get_gpu_asic_info, h) or {}
        name = str(asic.get("market_name") or "N/A")
        name = "AMD GPU" if name == "N/A" else name if name.upper().startswith("AMD") else f"AMD {name}"
        partition = self._optional("amdsmi_get_gpu_compute_partition", h)
        if partition and str(partition).upper() not in ("SPX", "N/A"):  # CPX, DPX ...: each partition a device
            kfd = self._optional("amdsmi_get_gpu_kfd_info", h)
            part_id = kfd.get("current_partition_id") if isinstance(kfd, dict) else None
            name += f" ({partition} partition{'' if part_id in (None, 'N/A') else f' {part_id}'})"
        enum = self._optional("amdsmi_get_gpu_enumeration_info", h)
        hip_uuid = enum.get("hip_uuid") if isinstance(enum, dict) else None
        dev = _Device(handle=h, index=index, uuid=str(uuid), name=name, alt_ids=(str(hip_uuid),) if hip_uuid else ())
        bdf = get(smi.amdsmi_get_gpu_device_bdf, h)
        dev.pci_bus_id = str(bdf) if bdf else None
        dev.memory_total = _int(get(smi.amdsmi_get_gpu_memory_total, h, smi.AmdSmiMemoryType.VRAM))
        return dev

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        now = time.monotonic()
        slow = now >= self._procs_due
        if slow:
            self._pids.update(pids)
        out = []
        for dev in self._devices:
            r = GpuReading(
                index=dev.index,
                uuid=dev.uuid,
                name=dev.name,
                memory_total=dev.memory_total,
                pci_bus_id=dev.pci_bus_id,
                vendor=VENDOR,
                alt_ids=dev.alt_ids,
            )
            out.append(r)
            if not dev.lost:
                try:
                    self._read_device(dev, r, slow)
                except Exception as e:  # never let one device stop the tracking of the others
                    self.problems.add(f"GPU {dev.index}: reading failed ({type(e).__name__}: {e})")
            r.lost = dev.lost
        if slow:
            cost = time.monotonic() - now
            self.process_query_s = cost
            self._procs_due = now + max(self.PROCESS_PERIOD, cost * self.PROCESS_BUDGET)
        return out

    def _memory(self, dev: _Device, r: GpuReading) -> bool:
        """VRAM used (and total) into r; False when the device is gone (marked lost)."""
        smi = self._smi
        try:
            if dev.bytes_usage:
                try:
                    r.memory_used = int(smi.amdsmi_get_gpu_memory_usage(dev.handle, smi.AmdSmiMemoryType.VRAM))
                    return True
                except Exception as e:
                    if getattr(e, "err_code", None) in _LOST:
                        raise
                    dev.bytes_usage = False  # an older library: vram_usage, in MiB, from now on
            vram = smi.amdsmi_get_gpu_vram_usage(dev.handle)
            r.memory_used = int(vram["vram_used"]) * 1024**2
            if dev.memory_total is None:
                r.memory_total = dev.memory_total = int(vram["vram_total"]) * 1024**2
        except Exception as e:
            code = getattr(e, "err_code", None)
            if code in _LOST:
                dev.lost = True
                self.problems.add(f"GPU {dev.index} ({dev.uuid}) stopped answering (amdsmi: {_LOST[code]})")
                return False
        return True

    def _read_device(self, dev: _Device, r: GpuReading, slow: bool) -> None:
        smi, get, h = self._smi, self._get, dev.handle
        if not self._memory(dev, r):
            return
        act = get(smi.amdsmi_get_gpu_activity, h) or {}
        r.utilization_gpu = _pct(act.get("gfx_activity"))
        r.utilization_memory = _pct(act.get("umc_activity"))
        r.temperature_c = self._temperature(dev)
        power = get(smi.amdsmi_get_power_info, h) or {}
        for key in ("current_socket_power", "average_socket_power", "socket_power"):
            w = _watts(power.get(key))
            if w is not None:
                r.power_w = w
                break
        for clk, attr in ((smi.AmdSmiClkType.GFX, "clock_sm_mhz"), (smi.AmdSmiClkType.MEM, "clock_memory_mhz")):
            info = get(smi.amdsmi_get_clock_info, h, clk)
            setattr(r, attr, _num(info.get("clk")) if isinstance(info, dict) else None)
        energy = get(smi.amdsmi_get_energy_count, h)
        if isinstance(energy, dict):  # accumulator x resolution (µJ) -> mJ
            acc = energy.get("energy_accumulator", energy.get("power"))  # "power" before amdsmi 6.3
            res = energy.get("counter_resolution")
            r.energy_mj = int(acc * res / 1000) if isinstance(acc, int) and isinstance(res, float) else None
        if slow:
            dev.power_limit_w = _watts(power.get("power_limit"))
            self._read_processes(dev)
        r.power_limit_w = dev.power_limit_w
        r.processes = dev.procs
        r.unattributed_memory = dev.unattributed

    def _temperature(self, dev: _Device) -> float | None:
        """Edge sensor, else hotspot/junction (an MI300 has no edge sensor): the first that answers, kept."""
        smi = self._smi
        sensors = [dev.temp_sensor] if dev.temp_sensor is not None else [
            smi.AmdSmiTemperatureType.EDGE, smi.AmdSmiTemperatureType.HOTSPOT,
        ]  # fmt: skip
        for s in sensors:
            v = _num(self._get(smi.amdsmi_get_temp_metric, dev.handle, s, smi.AmdSmiTemperatureMetric.CURRENT))
            if v is not None:
                dev.temp_sensor = s
                return v
        return None

    def _read_processes(self, dev: _Device) -> None:
        listed = self._get(self._smi.amdsmi_get_gpu_process_list, dev.handle)
        if listed is None:
            return  # keep the last known list: one failed query is no reason to drop the tree's memory
        procs: dict[int, int] = {}
        unattributed, unmapped = 0, False
        for p in listed:
            if not isinstance(p, dict):
                continue
            usage = p.get("memory_usage") or {}
            used = usage.get("vram_mem") if isinstance(usage, dict) else None
            used = int(used) if isinstance(used, int) else 0
            pid = self._pids(int(p.get("pid", 0)))
            if pid is None:
                unmapped = True
                unattributed += used
                continue
            procs[pid] = procs.get(pid, 0) + used
        dev.procs = procs
        dev.unattributed = unattributed if (self._pids.namespaced and unmapped) else None
        if dev.unattributed:
            self.problems.add(
                "the tracker runs in a PID namespace (container) whose /proc does not show the host PIDs "
                "amdsmi reports: GPU memory of processes it could not map is reported as unattributed"
            )

    def close(self) -> None:
        try:
            with quiet_stdout([]):
                self._smi.amdsmi_shut_down()
        except Exception:
            pass


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _pct(v: Any) -> float | None:
    x = _num(v)
    return x if x is not None and 0 <= x <= 100 else None  # amdsmi: 0xFFFF (or > 100) = not available


def _watts(v: Any) -> float | None:
    x = _num(v)
    return x if x is not None and x != _NA and x > 0 else None
