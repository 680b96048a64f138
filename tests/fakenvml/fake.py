"""Build the fake libnvidia-ml.so.1 and write its config (the line format is described in fakenvml.c).

A test describes GPUs as plain dicts; `FakeNvml.write()` replaces the config atomically (temp file +
rename), and the library re-reads it on its next call, so PIDs of real children can be added, or a GPU
lost, while a tracker runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fakenvml.c")
LIBNAME = "libnvidia-ml.so.1"
CONFIG_ENV = "FAKE_NVML_CONFIG"
LOG_ENV = "FAKE_NVML_LOG"  # where nvmlShutdown writes how often (and when) each function was called
SLEEP_ENV = "FAKE_NVML_SLEEP"  # "SYMBOL=SECONDS|hang,...": those calls sleep (or never return), the library locked
MiB = 1024**2
GiB = 1024**3


def build(dest: Path) -> Path | None:
    """Compile the fake into dest/libnvidia-ml.so.1; None when there is no C compiler."""
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if cc is None:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    lib = dest / LIBNAME
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    stamp = dest / "fakenvml.sha"
    if lib.exists() and stamp.exists() and stamp.read_text() == digest:
        return lib
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-pthread", "-Wl,-soname," + LIBNAME, "-o", str(lib), str(SOURCE)],
        check=True,
        capture_output=True,
    )
    stamp.write_text(digest)
    return lib


# CPU time per call of the C function (µs) measured on an NVIDIA H100 80GB HBM3, driver 580: nvidia-ml-py calls the
# running-processes and process-utilization functions twice (the size, then the list), so each C call is given
# half of the figure measured per Python call; GPM's 94 µs (alloc + get + free) sits on the get.
H100_COSTS: dict[str, int] = {
    "nvmlDeviceGetTotalEnergyConsumption": 3450,
    "nvmlDeviceGetProcessUtilization": 707,
    "nvmlDeviceGetComputeRunningProcesses_v3": 20,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 15,  # none running: one call
    "nvmlGpmSampleGet": 90,
    "nvmlGpmMetricsGet": 10,
    "nvmlDeviceGetMemoryInfo": 9,
    "nvmlDeviceGetMemoryInfo_v2": 9,
    "nvmlDeviceGetUtilizationRates": 2,
    "nvmlDeviceGetTemperature": 2,
    "nvmlDeviceGetPowerUsage": 2,
    "nvmlDeviceGetClockInfo": 2,
    "nvmlDeviceGetEnforcedPowerLimit": 2,
    "nvmlDeviceGetFanSpeed": 2,
}


def device(
    name: str = "Fake H100 80GB HBM3",
    uuid: str = "GPU-00000000-0000-4000-8000-000000000000",
    bus: str = "00000000:18:00.0",
    total: int = 80 * GiB,
    used: int = 0,
    **fields: Any,
) -> dict[str, Any]:
    base = {
        "reserved": 512 * MiB,
        "util": 0,
        "memutil": 0,
        "temp": 40,
        "power_mw": 100_000,
        "limit_mw": 700_000,
        "sm_clock": 1980,
        "mem_clock": 2619,
        "fan": "NA",
        "energy_mj": 5_000_000,
        "gpm": 0,
        "mig": 0,
        "acct": 0,  # accounting mode off, as NVIDIA ships it
    }
    return {"name": name, "uuid": uuid, "bus": bus, "total": total, "used": used, **base, **fields}


class FakeNvml:
    """One config file: devices, MIG devices, processes, per-process utilization, accounting records (the
    driver's, kept after a process exits) and injected errors."""

    def __init__(self, path: Path, devices: list[dict[str, Any]] | None = None) -> None:
        self.path = path
        self.devices: list[dict[str, Any]] = devices or []
        self.migs: list[dict[str, Any]] = []
        self.processes: list[dict[str, Any]] = []
        self.procutils: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.costs: dict[str, int] = {}  # C function -> CPU µs each call burns (H100_COSTS: a real H100's)
        self.accounting: list[dict[str, Any]] = []
        #: {"fn": C function, "secs": seconds each call sleeps or "hang", "after": calls answered first (optional)}
        self.stalls: list[dict[str, Any]] = []
        self.write()

    def write(self) -> None:
        lines = []
        for kind, rows in (
            ("device", self.devices),
            ("mig", self.migs),
            ("process", self.processes),
            ("procutil", self.procutils),
            ("error", self.errors),
            ("acct", self.accounting),
            ("stall", self.stalls),
        ):
            for row in rows:
                lines.append("\t".join([kind, *(f"{k}={v}" for k, v in row.items())]))
        lines += [f"cost\tfn={fn}\tus={us}" for fn, us in self.costs.items()]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, self.path)


# The same, for a tracked program to paste in (it imports nothing from the tests): its own GPU memory from now on.
HOLD_SOURCE = """
def hold(memfile, nbytes):
    import os
    tmp = memfile + ".tmp"
    with open(tmp, "w") as f:
        f.write("" if nbytes is None else f"{os.getpid()} {nbytes}")
    os.replace(tmp, memfile)
"""


def set_memory(memfile: Path, nbytes: int | None, pid: int | None = None) -> None:
    """What a `memfile=` process holds from now on (None: it leaves the list), as "PID BYTES" when `pid` is
    given; atomic (a temp file renamed over), as the fake reads it at any time."""
    tmp = memfile.with_name(memfile.name + ".tmp")
    tmp.write_text("" if nbytes is None else (f"{pid} {nbytes}" if pid is not None else str(nbytes)))
    os.replace(tmp, memfile)


def read_call_log(path: Path) -> dict[str, list[float]]:
    """FAKE_NVML_LOG as nvmlShutdown wrote it: function -> wall-clock times of its calls (the first 2048)."""
    out: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        fn, _count, times = line.split("\t")
        out[fn] = [float(t) for t in times.split(",") if t]
    return out


def call_counts(path: Path) -> dict[str, int]:
    """FAKE_NVML_LOG: function -> how many times it was called."""
    return {line.split("\t")[0]: int(line.split("\t")[1]) for line in path.read_text().splitlines()}


@contextmanager
def loaded_in_process(lib: Path, config: Path) -> Iterator[Any]:
    """Point this process's pynvml at the fake (LD_LIBRARY_PATH is read only at start-up)."""
    import ctypes

    import pynvml

    old_env = os.environ.get(CONFIG_ENV)
    os.environ[CONFIG_ENV] = str(config)
    saved = pynvml.nvmlLib
    pynvml.nvmlLib = ctypes.CDLL(str(lib))
    pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        yield pynvml
    finally:
        pynvml.nvmlLib = saved
        pynvml._nvmlGetFunctionPointer_cache.clear()
        if old_env is None:
            os.environ.pop(CONFIG_ENV, None)
        else:
            os.environ[CONFIG_ENV] = old_env
