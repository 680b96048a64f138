"""The sources' rounding: when two readings of the kernel's counters are one figure. Which figure is exact, and
why, is derived from the evidence in `evidence.py`."""

from __future__ import annotations

AGREE = 0.02  # two readings of the same peak that differ by less than this are the same figure
PAGE_SLACK = 64 * 1024  # a few pages: statm/VmHWM and ru_maxrss round differently


def agree(a: int, b: int) -> bool:
    return abs(a - b) <= max(PAGE_SLACK, AGREE * max(a, b))
