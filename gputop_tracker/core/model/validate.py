"""Checks of user input shared by the CLI and the API: numbers (finite, in range) and a PID to attach to.

Each raises ValueError with a message naming the argument as the caller spells it (`--interval` on the
command line, `sleep_time` in the API); the CLI turns it into one line on stderr and exit 2.
Light on purpose: the CLI imports it before it forks the sampler.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping

from gputop_tracker.core.model.config import MIN_INTERVAL

MAX_INTERVAL = 3600.0  # seconds between samples
MAX_WINDOW = 86400.0  # seconds of samples the OOM flight recorder keeps
MAX_SIMULATED_GPUS = 64
MAX_DUMP_MB = 1e9
GPU_BACKENDS = ("auto", "nvidia", "amd", "none")  # --gpu-backend / Tracker(gpu_backend=)
MAX_GPU_POLL = 1000.0  # Hz of the GPU memory watcher (--gpu-poll / Tracker(gpu_poll=))
MAX_CORES = 65536  # --n-expected-cores: more than any Linux kernel can run on (NR_CPUS is at most 8192)
MAX_OOM_DUMPS = 10000  # dump bundles kept in the store
MAX_GPU_INDEX = 65535  # an index of --gpus: far more GPUs than a machine holds
# One entry of a CUDA_VISIBLE_DEVICES-style list: an index (a negative one ends the list, as in CUDA), or a full or
# short UUID: GPU-<hex>, MIG-<hex>, MIG-GPU-<hex>/GI/CI (older drivers), or the bare start of one (<hex>).
_GPU_INDEX = re.compile(r"-?[0-9]+")
_GPU_UUID = re.compile(r"(?:GPU-|MIG-(?:GPU-)?)?[0-9a-f][0-9a-f-]*(?:/[0-9]+/[0-9]+)?", re.IGNORECASE)

# How each caller spells the options tracking_options checks: flags on the command line, keyword
# arguments of `Tracker` (the API keeps gpu-tracker's `sleep_time`).
CLI_NAMES = {
    "interval": "--interval",
    "n_expected_cores": "--n-expected-cores",
    "simulate_gpus": "--simulate-gpus",
    "warn_at": "--warn-at",
    "critical_at": "--critical-at",
    "flight_seconds": "--oom-window",
    "oom_dumps": "--oom-dumps",
    "oom_dump_mb": "--oom-dump-mb",
}
API_NAMES = {key: key for key in CLI_NAMES} | {"interval": "sleep_time"}


def tracking_options(
    names: Mapping[str, str],
    *,
    interval: object,
    n_expected_cores: object,
    simulate_gpus: object,
    warn_at: object,
    critical_at: object,
    flight_seconds: object,
    oom_dumps: object,
    oom_dump_mb: object,
) -> None:
    """The options the CLI and the API share, each finite and in range, the alert levels in order;
    ValueError naming the option as `names` spells it (CLI_NAMES or API_NAMES)."""
    number(names["interval"], interval, MIN_INTERVAL, MAX_INTERVAL)
    if n_expected_cores is not None:
        integer(names["n_expected_cores"], n_expected_cores, 1, MAX_CORES)
    integer(names["simulate_gpus"], simulate_gpus, 0, MAX_SIMULATED_GPUS)
    warn = number(names["warn_at"], warn_at, 0, 100, above=True)
    critical = number(names["critical_at"], critical_at, 0, 100, above=True)
    number(names["flight_seconds"], flight_seconds, 0, MAX_WINDOW)
    integer(names["oom_dumps"], oom_dumps, 0, MAX_OOM_DUMPS)
    number(names["oom_dump_mb"], oom_dump_mb, 0, MAX_DUMP_MB, above=True)
    if warn >= critical:
        raise ValueError(f"{names['warn_at']} ({warn:g}) must be below {names['critical_at']} ({critical:g})")


def number(name: str, value: object, low: float, high: float, *, above: bool = False) -> float:
    """A finite real number with low <= value <= high (low < value with `above`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, not {value!r}")
    bound = f"more than {low:g}" if above else f"at least {low:g}"
    if not math.isfinite(value) or value < low or (above and value == low) or value > high:
        raise ValueError(f"{name} must be a finite number {bound} and at most {high:g}, not {value!r}")
    return float(value)


def integer(name: str, value: object, low: int, high: int | None = None) -> int:
    """An int (not a bool) with low <= value (<= high)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, not {value!r}")
    if value < low or (high is not None and value > high):
        most = f" and at most {high}" if high is not None else ""
        raise ValueError(f"{name} must be at least {low}{most}, not {value}")
    return value


def choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """One of `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def gpu_entry(name: str, item: str) -> str:
    """One GPU of a `--gpus` list (stripped): an index or a full or short UUID, in ASCII, as CUDA_VISIBLE_DEVICES
    takes them. What could name no GPU in any form (`nan`, a newline inside, `ü€`) is refused, not skipped."""
    item = item.strip(" \t")
    if item.isascii() and _GPU_INDEX.fullmatch(item):
        if int(item) > MAX_GPU_INDEX:
            raise ValueError(f"{name}: GPU index {item} is out of range (at most {MAX_GPU_INDEX})")
        return item
    if item.isascii() and _GPU_UUID.fullmatch(item):
        return item
    raise ValueError(
        f"{name}: {item!r} is not a GPU index or UUID (as CUDA_VISIBLE_DEVICES takes them: 0,1 or GPU-8f3c…, MIG-…)"
    )


def gpu_list(name: str, value: str) -> str:
    """A comma-separated `--gpus` list, each entry checked (`gpu_entry`); empty entries (`0,,1`) are dropped, but
    a list naming no GPU at all is refused (`--gpu-backend none` reads none)."""
    named = [gpu_entry(name, item) for item in value.split(",") if item.strip(" \t")]
    if not named:
        raise ValueError(f"{name} names no GPU: {value!r} (give indices or UUIDs; --gpu-backend none reads no GPU)")
    return ",".join(named)


PF_KTHREAD = 0x00200000  # /proc/PID/stat flags: a kernel thread (kthreadd, kworkers)


def check_pid(pid: object) -> int:
    """A PID that names a live (not zombie) process we can read; ValueError otherwise."""
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise ValueError(f"a PID must be a whole number, not {pid!r}")
    if pid <= 0:
        raise ValueError(f"a PID must be positive, not {pid}")
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            head, tail = f.read().rsplit(b")", 1)
        fields = tail.split()
        state, flags = fields[0], int(fields[6])
    except FileNotFoundError:
        raise ValueError(f"no process with PID {pid}") from None
    except OSError as e:
        raise ValueError(f"cannot read process {pid}: {e.strerror}") from None
    except (IndexError, ValueError):
        raise ValueError(f"cannot read process {pid}: unexpected /proc/{pid}/stat") from None
    if state == b"Z":
        raise ValueError(f"process {pid} has already exited (zombie)")
    if flags & PF_KTHREAD:
        name = head.split(b"(", 1)[-1].decode(errors="replace")
        raise ValueError(f"process {pid} ({name}) is a kernel thread: it has no memory or CPU time of a program")
    _check_not_a_thread(pid)
    return pid


def flag(name: str, value: object) -> bool:
    """True or False (0 and 1 too): a string such as "no" is truthy, and would silently mean yes."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{name} must be True or False, not {value!r}")


def optional_text(name: str, value: object, example: str) -> str | None:
    """None or a str (a number or anything else is refused by name, not by whatever reads it first)."""
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} must be a str such as {example!r}, not {value!r}")


def optional_path(name: str, value: object) -> str | None:
    """None, or a file name (str or os.PathLike); '' counts as not given, as it always did."""
    if value is None:
        return None
    try:
        path = os.fspath(value)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"{name} must be a path (str or pathlib.Path), not {value!r}") from None
    if isinstance(path, bytes):
        raise ValueError(f"{name} must be a path as str or pathlib.Path, not bytes {value!r}")
    return path or None


def _check_not_a_thread(pid: int) -> None:
    """A thread's id (`top -H`, `ps -L`, py-spy) opens /proc/TID too, but names one thread of a process: its
    children (their parent is the process) and the other threads' time would be left out, and tracking would end
    with the thread while the process runs on."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            tgid = next((int(line.split()[1]) for line in f if line.startswith(b"Tgid:")), pid)
    except (OSError, IndexError, ValueError):
        return  # gone meanwhile, or unreadable: the tracker finds out as for any process
    if tgid != pid:
        raise ValueError(f"{pid} is a thread of process {tgid}, not a process: attach to {tgid}")


MAX_GPU_HISTORY = 10_000_000  # entries of PyTorch's allocator history (--gpu-history / Tracker(gpu_history=))


def gpu_history(name: str, value: object, probe: object) -> int:
    """Entries of the allocator history: 0 (off) or a whole number that needs the probe, which records it."""
    n = integer(name, value, 0, MAX_GPU_HISTORY)
    if n and probe is False:
        how = "a launched command, without --no-probe" if name.startswith("--") else "probe=True"
        raise ValueError(f"{name} needs the in-process probe, which records it ({how})")
    return n
