"""The whole machine's RAM and CPU, from kept-open /proc files (the report's `system` figures)."""

from __future__ import annotations

import os
import time


def _meminfo_kb(mem: bytes, key: bytes) -> int:
    """One `Key:   N kB` line of /proc/meminfo (among its first nine lines, as the kernel orders them), or 0."""
    i = mem.find(key, 0, 1024)
    if i < 0 or (i > 0 and mem[i - 1] != 0x0A):
        return 0
    i += len(key)
    return int(mem[i : mem.index(b"k", i)])


class HostReader:
    """Whole-machine RAM (MemTotal - MemAvailable) and CPU busy %, from kept-open /proc files."""

    def __init__(self) -> None:
        self._meminfo = os.open("/proc/meminfo", os.O_RDONLY)
        self._stat = os.open("/proc/stat", os.O_RDONLY)
        self.cpu_count = os.cpu_count() or 1
        self._last: tuple[int, int] | None = None
        self._cpu_due = 0.0
        self._cpu_pct = 0.0

    def read(self) -> tuple[int, int, float]:
        """(memory_total, memory_used, cpu_percent with 100 = every core busy)."""
        mem = os.pread(self._meminfo, 4096, 0)
        total, avail = _meminfo_kb(mem, b"MemTotal:") * 1024, _meminfo_kb(mem, b"MemAvailable:") * 1024
        now = time.monotonic()
        if now >= self._cpu_due:  # /proc/stat grows with the core count: once a second is plenty
            self._cpu_due = now + 1.0
            first = os.pread(self._stat, 256, 0).split(b"\n", 1)[0].split()[1:]
            ticks = [int(x) for x in first]
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
            busy = sum(ticks[:8]) - idle
            if self._last is not None:
                d_busy, d_idle = busy - self._last[0], idle - self._last[1]
                if d_busy + d_idle > 0:
                    self._cpu_pct = 100.0 * d_busy / (d_busy + d_idle)
            self._last = (busy, idle)
        return total, total - avail, self._cpu_pct

    def close(self) -> None:
        os.close(self._meminfo)
        os.close(self._stat)
