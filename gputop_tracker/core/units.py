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
        return cls(
            parse_ram_unit(ram) if ram else None,
            parse_ram_unit(gpu_ram) if gpu_ram else None,
            parse_time_unit(time) if time else None,
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
