"""Checks of user input shared by the CLI and the API: numbers (finite, in range) and a PID to attach to.

Each raises ValueError with a message naming the argument as the caller spells it (`--interval` on the
command line, `sleep_time` in the API); the CLI turns it into one line on stderr and exit 2.
Light on purpose: the CLI imports it before it forks the sampler.
"""

from __future__ import annotations

import math

MAX_INTERVAL = 3600.0  # seconds between samples
MAX_WINDOW = 86400.0  # seconds of samples the OOM flight recorder keeps
MAX_SIMULATED_GPUS = 64


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


def check_pid(pid: object) -> int:
    """A PID that names a live (not zombie) process we can read; ValueError otherwise."""
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise ValueError(f"a PID must be a whole number, not {pid!r}")
    if pid <= 0:
        raise ValueError(f"a PID must be positive, not {pid}")
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        raise ValueError(f"no process with PID {pid}") from None
    except OSError as e:
        raise ValueError(f"cannot read process {pid}: {e.strerror}") from None
    except IndexError:
        raise ValueError(f"cannot read process {pid}: unexpected /proc/{pid}/stat") from None
    if state == b"Z":
        raise ValueError(f"process {pid} has already exited (zombie)")
    return pid
