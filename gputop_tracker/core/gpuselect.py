"""Which GPUs count for utilization: `--gpus`, else the `CUDA_VISIBLE_DEVICES` the job itself runs with.

A job often sets the variable itself (`export CUDA_VISIBLE_DEVICES=1` in a SLURM script, `env
CUDA_VISIBLE_DEVICES=… python train.py`), so our own environment is only where the choice starts. Each tracked
process's environment is read once when it appears, and again after it exec'd (a shell becoming python),
until a process of the tree uses a GPU: a process whose variable differs moves the choice to its value, and the
first process seen on a GPU settles it with its own value. Nothing is read on a machine without GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gputop_tracker.core.gpu import GpuReading
from gputop_tracker.core.procfs import Reading

VARIABLE = "CUDA_VISIBLE_DEVICES"


def read_variable(pid: int, name: str = VARIABLE) -> str | None:
    """`name` in the environment `pid` was exec'd with, or None (unset, or the process is gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    key = name.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(key):
            return item[len(key) :].decode(errors="replace")
    return None


class GpuSelection:
    """The selection as it stands: `spec` (a CUDA_VISIBLE_DEVICES list, None = every GPU) and why."""

    def __init__(self, fixed: str | None, start_env: Mapping[str, str], where: str) -> None:
        self.fixed = fixed is not None
        if fixed is not None:
            self.spec: str | None = fixed
            self.reason = "--gpus"
        else:
            self.spec = start_env.get(VARIABLE)
            self.reason = (
                f"{VARIABLE}={self.spec} ({where})"
                if self.spec is not None
                else f"every GPU: no --gpus and no {VARIABLE}"
            )
        self.settled = self.fixed
        self._names: dict[int, str] = {}  # pid -> name when its environment was read
        self._specs: dict[int, str | None] = {}
        self._decided = False

    def observe(self, readings: Iterable[Reading], gpus: Sequence[GpuReading]) -> bool:
        """Fold one sample in; True when the selection is new (the first time GPUs answer) or changed."""
        if not gpus:
            return False
        changed = not self._decided
        self._decided = True
        if self.settled:
            return changed
        on_gpu = {pid for g in gpus for pid in g.processes}
        for r in readings:
            h = r.handle
            if self._names.get(h.pid) != h.name:  # new, or exec'd since: its environment may differ
                self._names[h.pid] = h.name
                spec = self._specs[h.pid] = read_variable(h.pid)
                if spec is not None and spec != self.spec:
                    self.spec, changed = spec, True
                    self.reason = f"{VARIABLE}={spec} (set by the job: process {h.pid}, {h.name})"
            if h.pid in on_gpu:
                self.settled = True
                spec = self._specs.get(h.pid)
                if spec is not None and spec != self.spec:
                    self.spec, changed = spec, True
                    self.reason = f"{VARIABLE}={spec} (of process {h.pid}, {h.name}, the first on a GPU)"
                break
        return changed
