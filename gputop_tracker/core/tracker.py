"""The Python API: `with Tracker(): ...` — the same figures as the CLI, inside a script or notebook.

Shaped like gpu-tracker's Tracker (same arguments, `resource_usage`, `str()`, `to_json()`), so its users
can switch by changing the import. The sampler runs in its own process, as for the CLI.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gputop_tracker.core import report
from gputop_tracker.core.channel import STOP_SIGNAL, Failed, SamplerHandle, Started, Summary, start_spawned
from gputop_tracker.core.models import ResourceUsage
from gputop_tracker.core.sampler import MIN_INTERVAL, EngineConfig
from gputop_tracker.core.units import Units


class TrackerError(RuntimeError):
    pass


class Tracker:
    """Tracks a process (this one by default) and all its descendants between start() and stop()."""

    def __init__(
        self,
        sleep_time: float = 1.0,
        ram_unit: str = "gigabytes",
        gpu_ram_unit: str = "gigabytes",
        time_unit: str = "hours",
        n_expected_cores: int | None = None,
        gpu_uuids: set[str] | list[str] | None = None,
        disable_logs: bool = False,
        process_id: int | None = None,
        resource_usage_file: str | os.PathLike[str] | None = None,
        n_join_attempts: int = 5,
        join_timeout: float = 10.0,
        *,
        store: str | os.PathLike[str] | None = None,
        save: bool = True,
        simulate_gpus: int = 0,
    ) -> None:
        if sleep_time < MIN_INTERVAL:
            raise ValueError(f"sleep_time must be at least {MIN_INTERVAL} s")
        self.units = Units.parse(ram_unit, gpu_ram_unit, time_unit)
        self.process_id = process_id if process_id is not None else os.getpid()
        self.resource_usage_file = Path(resource_usage_file) if resource_usage_file else None
        self.join_timeout = join_timeout * max(n_join_attempts, 1)
        self.disable_logs = disable_logs
        self._cfg = EngineConfig(
            mode="attach",
            pid=self.process_id,
            interval=sleep_time,
            n_expected_cores=n_expected_cores,
            gpus=",".join(gpu_uuids) if gpu_uuids else None,
            simulate_gpus=simulate_gpus,
            store=str(store) if store else None,
            save=save,
        )
        self._handle: SamplerHandle | None = None
        self._usage: ResourceUsage | None = None
        self.session_id: str | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Tracker:
        if self._handle is not None:
            raise TrackerError("this Tracker has already been started")
        self._handle = start_spawned(self._cfg)
        for msg in self._handle.messages():
            if isinstance(msg, Started):
                self.session_id = msg.session_id
                return self
            if isinstance(msg, Failed):
                raise TrackerError(msg.message)
        raise TrackerError("the sampler process exited before it started tracking")

    def stop(self) -> ResourceUsage:
        if self._handle is None:
            raise TrackerError("this Tracker was never started")
        if self._usage is not None:
            return self.resource_usage
        self._handle.signal(STOP_SIGNAL)
        for msg in self._handle.messages():
            if isinstance(msg, Summary):
                self._usage = msg.usage
            elif isinstance(msg, Failed):
                raise TrackerError(msg.message)
        self._handle.close()
        self._handle.wait()
        if self._usage is None:
            raise TrackerError("the sampler process ended without a summary")
        if self.resource_usage_file is not None:
            from gputop_tracker.core.store import write_atomic

            write_atomic(self.resource_usage_file, report.to_json(self._usage, self.units).encode())
        return self.resource_usage

    def __enter__(self) -> Tracker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ results

    @property
    def resource_usage(self) -> ResourceUsage:
        """The summary in the units given to the constructor (gpu-tracker's field names)."""
        if self._usage is None:
            raise TrackerError("no resource usage yet: call stop() (or leave the with block) first")
        u = self.units
        return self._usage.in_units(u.ram or "gigabytes", u.gpu_ram or "gigabytes", u.time or "hours")

    @property
    def raw_usage(self) -> ResourceUsage:
        """The summary in bytes and seconds."""
        if self._usage is None:
            raise TrackerError("no resource usage yet")
        return self._usage

    def to_json(self) -> dict[str, Any]:
        return report.to_json_dict(self.raw_usage, self.units)

    def __str__(self) -> str:
        if self._usage is None:
            return f"Tracker(process_id={self.process_id}, not stopped yet)"
        return report.to_text(self._usage, self.units)
