"""A code block's GPU allocator figures, without ever resetting the program's own peak statistics.

A block's start and end messages carry, per framework and device, the allocator's current and peak figures
(`api.blocks._allocators`: PyTorch's allocated/reserved bytes, JAX's bytes in use). The process's peak is a
high-water mark nobody resets here (users and libraries read it), so a run's own peak is known exactly only
when that mark rose during the run: then the new mark is the run's peak. Otherwise the run never went above the
mark set before it, and all that is known is a bracket: at least the figures at its boundaries, at most the
mark. Plain Python: it runs in the sampler.
"""

from __future__ import annotations

from typing import Any

MAX_OPEN = 10_000  # runs whose start figures are kept
MAX_KEYS = 64  # (framework, device) pairs per block name

EXACT = "exact (the allocator's peak rose during every run that set it: the new peak is the run's)"
BRACKET = (
    "bracket: at least the allocator's figures at the runs' starts and ends (peak_allocated, peak_reserved), "
    "at most its peak so far (*_max); the program's own peak statistics are never reset"
)

Figures = tuple[int, int, int | None, int | None]  # allocated, peak allocated, reserved, peak reserved


def _parse(raw: Any) -> dict[tuple[str, str], Figures]:
    out: dict[tuple[str, str], Figures] = {}
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, list) or len(entry) != 6 or not all(isinstance(x, str) for x in entry[:2]):
            continue
        values = [x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None for x in entry[2:]]
        if values[0] is None or values[1] is None:
            continue
        out[(entry[0][:32], entry[1][:32])] = (values[0], values[1], values[2], values[3])
    return out


def run_range(start: Figures, end: Figures, at: int) -> tuple[int, int] | None:
    """(at least, at most) of one run's peak of one figure: `at` 0 = allocated, 2 = reserved; equal when exact."""
    cur0, peak0, cur1, peak1 = start[at], start[at + 1], end[at], end[at + 1]
    if peak1 is None or cur1 is None:
        return None
    if peak0 is not None and peak1 > peak0:
        return peak1, peak1  # the mark rose during the run: the new mark is its peak
    return max(cur0 or 0, cur1), peak1


class _Range:
    """Every run of one block name on one device: the largest run peak lies between `low` and `high`."""

    __slots__ = ("high", "low", "r_high", "r_low")

    def __init__(self) -> None:
        self.low = self.high = 0
        self.r_low: int | None = None
        self.r_high: int | None = None

    def add(self, start: Figures, end: Figures) -> None:
        if (got := run_range(start, end, 0)) is not None:
            self.low, self.high = max(self.low, got[0]), max(self.high, got[1])
        if (got := run_range(start, end, 2)) is not None:
            self.r_low, self.r_high = max(self.r_low or 0, got[0]), max(self.r_high or 0, got[1])

    def as_dict(self, framework: str, device: str) -> dict[str, Any]:
        exact = self.low == self.high and self.r_low == self.r_high
        return {
            "framework": framework,
            "device": device,
            "peak_allocated": self.low,
            "peak_allocated_max": self.high,
            "peak_reserved": self.r_low,
            "peak_reserved_max": self.r_high,
            "exact": exact,
        }


class BlockAllocators:
    """Allocator figures of the session's blocks: start figures of open runs, ranges per block name."""

    def __init__(self) -> None:
        self.open: dict[tuple[int, int], dict[tuple[str, str], Figures]] = {}
        self.ranges: dict[str, dict[tuple[str, str], _Range]] = {}

    def start(self, m: dict[str, Any]) -> None:
        figures = _parse(m.get("ga"))
        if figures and len(self.open) < MAX_OPEN:
            self.open[(m["pid"], int(m.get("id", 0)))] = figures

    def end(self, m: dict[str, Any], name: str) -> None:
        start = self.open.pop((m["pid"], int(m.get("id", 0))), None)
        if start is None:
            return
        ranges = self.ranges.setdefault(name, {})
        for key, end in _parse(m.get("ga")).items():
            if key in start and (key in ranges or len(ranges) < MAX_KEYS):
                ranges.setdefault(key, _Range()).add(start[key], end)

    def summary(self, name: str) -> list[dict[str, Any]]:
        return [r.as_dict(fw, dev) for (fw, dev), r in sorted(self.ranges.get(name, {}).items())]
