"""OOM dump bundles of a session: numbered, at most one per DUMP_MIN_GAP seconds, the store pruned after each.

`DumpWriter` owns the numbering, the rate limit, the manifest and the pruning; what goes into a bundle (the
flight recorder, the processes, the GPUs, the limits) is gathered by the caller and handed over as plain
values (`DumpContents`). The bundle format itself is `events.write_dump`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputop_tracker.core.model import paths
from gputop_tracker.core.model.config import EngineConfig
from gputop_tracker.core.proc.cgroup import JobCgroup
from gputop_tracker.core.summary import events as ev

DUMP_MIN_GAP = 5.0  # seconds between two dumps: an OOM storm writes one bundle, not hundreds


@dataclass
class DumpContents:
    command: list[str]
    pid: int  # the command's
    recorder: ev.FlightRecorder
    events: list[dict[str, Any]]  # the session's events so far, the trigger last
    processes: list[dict[str, Any]]
    gpus: list[dict[str, Any]]
    limits: dict[str, Any]
    extra: dict[str, bytes] | None = None  # more files (a CUDA out-of-memory record)


class DumpWriter:
    def __init__(self, store_dir: Path, session_id: str, session_path: Path, keep: int, max_bytes: int) -> None:
        self.store_dir = store_dir
        self.session_id = session_id
        self.session_path = session_path
        self.keep = keep  # bundles kept in the store (0: never write one)
        self.max_bytes = max_bytes
        self.written = 0  # bundles attempted: numbers them
        self.last_time = -1e18  # wall time of the last bundle written
        self.last_path: Path | None = None

    @classmethod
    def for_session(cls, cfg: EngineConfig, store_dir: Path, session_id: str) -> DumpWriter:
        """What the config asks for: --oom-dumps bundles of at most --oom-dump-mb, none without a saved session."""
        session_path = paths.session_file(store_dir, session_id)
        keep = cfg.oom_dumps if cfg.save else 0
        return cls(store_dir, session_id, session_path, keep=keep, max_bytes=int(cfg.oom_dump_mb * 1e6))

    def due(self, now: float) -> bool:
        return self.keep > 0 and now - self.last_time >= DUMP_MIN_GAP

    def write(self, now: float, trigger: dict[str, Any], contents: DumpContents) -> Path | None:
        """Write a bundle for `trigger` (an oom event) and prune the store; its directory (None when pruning
        already took it). Raises OSError."""
        self.written += 1
        directory = self.store_dir / f"{self.session_id}{ev.DUMP_INFIX}{self.written}"
        manifest = {
            "kind": "gputop-tracker oom dump",
            "session_id": self.session_id,
            "session_path": str(self.session_path),
            "command": contents.command,
            "pid": contents.pid,
            "trigger": trigger,
            "environment": ev.environment(contents.limits),
        }
        path = ev.write_dump(
            directory,
            manifest=manifest,
            recorder=contents.recorder,
            events=contents.events,
            processes=contents.processes,
            gpus=contents.gpus,
            extra=contents.extra,
        )
        ev.prune_dumps(self.store_dir, self.keep, self.max_bytes)
        if not path.exists():
            return None
        self.last_time = now
        self.last_path = path
        return path

    def add(self, name: str, data: bytes | int) -> Path | None:
        """One more file (bytes, or all an open fd holds) in the latest bundle, within the budget: the store is
        pruned after it. The bundle (None when there is none, or pruning took it). Raises OSError."""
        path = self.last_path
        if path is None or not path.is_dir():
            return None
        ev.add_file(path, name, data)
        ev.list_files(path)
        ev.prune_dumps(self.store_dir, self.keep, self.max_bytes)
        return path if path.exists() else None


def dump_gpus(readings: Iterable[Any]) -> list[dict[str, Any]]:
    """The last GPU readings (`gpu.GpuReading`), per-process columns folded into one list."""
    return [
        {k: _plain(v) for k, v in vars(g).items() if not k.startswith("process_") and k != "window"}
        | {"processes": g.processes}
        for g in readings
    ]


def _plain(value: Any) -> Any:
    """A value JSON can write (sets, e.g. `attributed_pids`, as sorted lists)."""
    return sorted(value) if isinstance(value, set | frozenset) else value


def dump_limits(
    cfg: EngineConfig, cgroup: JobCgroup | None, system_memory: Any, gpu_memory: dict[str, Any]
) -> dict[str, Any]:
    return {
        "mem_limit": cfg.mem_limit,
        "mem_limit_enforced": cfg.enforce_mem_limit,
        "cgroup_limit": cgroup.limit() if cgroup else None,
        "cgroup": str(cgroup.path) if cgroup else None,
        "system_memory": system_memory,
        "gpu_memory": gpu_memory,
        "warn_at": cfg.warn_at,
        "critical_at": cfg.critical_at,
    }
