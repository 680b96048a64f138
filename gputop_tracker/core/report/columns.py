"""A session's sampled timeline as columns: what `Tracker.timeline()` returns and what the plots draw.

Standard library only; pandas is imported by `to_pandas()` alone, so nothing in core needs it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputop_tracker.core.model.models import Session

_GPU_COLUMN = re.compile(r"gpu(\d+)_(memory|util)$")

# friendly name -> the saved column (core/summary/builder.py TIMELINE_COLUMNS)
ALIASES = {
    "t": "elapsed",
    "tree_ram": "combined_total",
    "private": "combined_private",
    "shared": "combined_shared",
    "main_rss": "main_rss",
    "descendants": "descendants_total",
    "cpu_percent": "cpu_percent",
    "main_cpu_percent": "main_cpu_percent",
    "cpu_seconds": "cpu_seconds",
    "threads": "threads",
    "n_processes": "n_processes",
    "gpu_memory": "gpu_memory",
    "host_memory_used": "host_memory_used",
    "host_cpu_percent": "host_cpu_percent",
}


def _finite(value: float | None) -> float | None:
    """A stored figure, or None where it is missing or not a number (NaN and infinities read as not read)."""
    return value if value is not None and math.isfinite(value) else None


@dataclass
class TimelineColumns:
    """The samples of a session, one list per figure, all of the same length (`len()`), oldest first.

    `t` is seconds since the start (`start_time`, epoch seconds). RAM figures are bytes: `tree_ram` the
    tree's Σ PSS (shared pages counted once), `private` its Σ USS, `main_rss` and `descendants`; `cpu_percent`
    is % of one core (200 = two cores busy). Per GPU (`gpus` lists the indices): `gpu_memory_of(i)` the
    tree's bytes on it and `gpu_util_of(i)` its utilization %. A value is None where it was not read.
    Long sessions are saved with neighbouring samples merged: `stride` samples per row (peaks kept)."""

    start_time: float = 0.0
    stride: int = 1
    data: dict[str, list[float | None]] = field(default_factory=dict)

    @classmethod
    def of_session(cls, session: Session) -> TimelineColumns:
        tl = session.timeline
        index = {column: i for i, column in enumerate(tl.columns)}
        at = index.get("elapsed", 0)
        rows = [row for row in tl.rows if len(row) > at and _finite(row[at]) is not None]
        data = {column: [_finite(row[i]) if i < len(row) else None for row in rows] for column, i in index.items()}
        return cls(start_time=session.meta.start_time, stride=tl.stride, data=data)

    def __len__(self) -> int:
        return len(self.data.get("elapsed", []))

    def column(self, name: str) -> list[float | None]:
        """A column by its friendly name (`tree_ram`) or its saved name (`combined_total`); [None…] if absent."""
        values = self.data.get(ALIASES.get(name, name))
        return list(values) if values is not None else [None] * len(self)

    def __getattr__(self, name: str) -> list[float | None]:
        if name in ALIASES:
            return self.column(name)
        raise AttributeError(name)

    @property
    def gpus(self) -> list[int]:
        return sorted({int(found.group(1)) for column in self.data if (found := _GPU_COLUMN.match(column))})

    def gpu_memory_of(self, index: int) -> list[float | None]:
        return self.column(f"gpu{index}_memory")

    def gpu_util_of(self, index: int) -> list[float | None]:
        return self.column(f"gpu{index}_util")

    def as_dict(self) -> dict[str, list[float | None]]:
        """Every column under its friendly name where it has one (`t`, `tree_ram`, …), GPUs as `gpuN_memory`."""
        back = {value: key for key, value in ALIASES.items()}
        return {back.get(column, column): list(values) for column, values in self.data.items()}

    def to_pandas(self) -> Any:
        """A pandas DataFrame, one row per sample, indexed by `t` (needs pandas installed)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install pandas") from None
        frame = pd.DataFrame(self.as_dict())
        return frame.set_index("t") if "t" in frame.columns else frame
