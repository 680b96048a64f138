"""The stand-in libamd_smi.so (built by gen.py) and its config (the line format is described in fakeamdsmi.c).

A test describes GPUs as plain dicts; `FakeAmdSmi.write()` replaces the config atomically (temp file + rename)
and the library re-reads it on its next call, so PIDs of real children can be added, or a GPU lost, while a
tracker runs. The real `amdsmi` package finds the library as it would under ROCm: `$ROCM_PATH/lib/libamd_smi.so`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fakeamdsmi.gen import build as build  # re-exported: build(dest) -> dest/lib/libamd_smi.so or None

CONFIG_ENV = "FAKE_AMDSMI_CONFIG"
SLEEP_ENV = "FAKE_AMDSMI_SLEEP"  # "SYMBOL=SECONDS|hang,...": those calls sleep, or never return
MiB = 1024**2
GiB = 1024**3


def device(
    name: str = "AMD Instinct MI300X",
    uuid: str = "00ff74a1-0000-1000-8000-000000000000",
    bdf: str = "0000:0c:00.0",
    total: int = 192 * GiB,
    used: int = 0,
    **fields: Any,
) -> dict[str, Any]:
    base = {
        "gfx": 0,
        "umc": 0,
        "mm": "NA",
        "temp_edge": "NA",  # an MI300X has no edge sensor: the hotspot is read
        "temp_hotspot": 45,
        "power_w": 150,
        "avg_power_w": "NA",
        "limit_w": 750,
        "gfx_clock": 2100,
        "mem_clock": 1300,
        "energy": 1_000_000,
    }
    return {"name": name, "uuid": uuid, "bdf": bdf, "total": total, "used": used, **base, **fields}


def env_for(lib: Path, config: Path) -> dict[str, str]:
    """What a process needs to load the stand-in: amdsmi looks in $ROCM_PATH/lib first."""
    return {"ROCM_PATH": str(lib.parent.parent), CONFIG_ENV: str(config)}


class FakeAmdSmi:
    """One config file: devices, processes and injected errors."""

    def __init__(self, path: Path, devices: list[dict[str, Any]] | None = None) -> None:
        self.path = path
        self.devices: list[dict[str, Any]] = devices or []
        self.processes: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.write()

    def write(self) -> None:
        lines = []
        for kind, rows in (("device", self.devices), ("process", self.processes), ("error", self.errors)):
            for row in rows:
                lines.append("\t".join([kind, *(f"{k}={v}" for k, v in row.items())]))
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, self.path)
