"""Units of the report, named as gpu-tracker names them (decimal bytes; seconds to days)."""

from __future__ import annotations

from dataclasses import dataclass

RAM_UNITS: dict[str, float] = {
    "bytes": 1.0,
    "kilobytes": 1e3,
    "megabytes": 1e6,
    "gigabytes": 1e9,
    "terabytes": 1e12,
}
TIME_UNITS: dict[str, float] = {
    "seconds": 1.0,
    "minutes": 60.0,
    "hours": 3600.0,
    "days": 86400.0,
}
# Short forms users type; the report always spells the unit out.
_RAM_ALIASES = {"b": "bytes", "kb": "kilobytes", "mb": "megabytes", "gb": "gigabytes", "tb": "terabytes"}
_TIME_ALIASES = {
    "s": "seconds",
    "sec": "seconds",
    "m": "minutes",
    "min": "minutes",
    "h": "hours",
    "d": "days",
}


class UnitError(ValueError):
    pass


@dataclass(frozen=True)
class Units:
    """Units asked for on the command line; None = gpu-tracker's default (JSON) or human units (text)."""

    ram: str | None = None
    gpu_ram: str | None = None
    time: str | None = None

    @classmethod
    def parse(cls, ram: str | None, gpu_ram: str | None, time: str | None) -> Units:
        # None: not given; '' (`--ram-unit ''`) was given, and is no unit: refused, never silently the default
        return cls(
            parse_ram_unit(ram) if ram is not None else None,
            parse_ram_unit(gpu_ram) if gpu_ram is not None else None,
            parse_time_unit(time) if time is not None else None,
        )


def parse_ram_unit(text: str) -> str:
    key = text.strip().lower()
    key = _RAM_ALIASES.get(key, key)
    if key not in RAM_UNITS:
        raise UnitError(f"invalid RAM unit {text!r}: choose one of {', '.join(RAM_UNITS)}")
    return key


def parse_time_unit(text: str) -> str:
    key = text.strip().lower()
    key = _TIME_ALIASES.get(key, key)
    if key not in TIME_UNITS:
        raise UnitError(f"invalid time unit {text!r}: choose one of {', '.join(TIME_UNITS)}")
    return key


def human_bytes(n: float | None) -> str:
    """Decimal units, like the rest of the report (1 MB = 10^6 bytes)."""
    if n is None:
        return "-"
    for unit, factor in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{n:.0f} B"


def human_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.2f} s"
    minutes, sec = divmod(s, 60)
    if minutes < 60:
        return f"{int(minutes)}m {sec:04.1f}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{int(hours)}h {int(minutes):02d}m {int(sec):02d}s"
    days, hours = divmod(hours, 24)
    return f"{int(days)}d {int(hours):02d}h {int(minutes):02d}m"


_SIZE_SUFFIXES = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
}


MAX_SIZE = 2**63 - 1  # what the kernel's memory limits take


def parse_byte_size(text: str | int | float) -> int:
    """'4G', '500M', '1.5GB' (decimal, like every figure of the tool), '2GiB' (binary) or bytes -> bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        value: float = text
    elif isinstance(text, float):
        value = text
    else:
        s = str(text).strip().lower().replace(" ", "")
        i = len(s)
        while i and not (s[i - 1].isdigit() or s[i - 1] == "."):
            i -= 1
        number, suffix = s[:i], s[i:]
        if suffix not in _SIZE_SUFFIXES or not number:
            raise UnitError(f"invalid size {text!r}: use e.g. 4G, 500M, 2GiB or a number of bytes")
        try:
            value = float(number) * _SIZE_SUFFIXES[suffix]
        except (ValueError, OverflowError):
            raise UnitError(f"invalid size {text!r}: use e.g. 4G, 500M, 2GiB or a number of bytes") from None
    if value != value:  # NaN (math.isnan would overflow on a huge int)
        raise UnitError(f"invalid size {text!r}: not a number")
    if value > MAX_SIZE:
        raise UnitError(f"invalid size {text!r}: too large (at most {MAX_SIZE} bytes)")
    if value < 1:
        raise UnitError(f"invalid size {text!r}: must be at least 1 byte")
    return int(value)
