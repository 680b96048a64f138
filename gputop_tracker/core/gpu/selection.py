"""Which GPUs count for utilization: `--gpus`, else the `CUDA_VISIBLE_DEVICES` the job itself runs with.

A job often sets the variable itself (`export CUDA_VISIBLE_DEVICES=1` in a SLURM script, `env
CUDA_VISIBLE_DEVICES=… python train.py`), so our own environment is only where the choice starts. Each tracked
process's environment is read once when it appears, and again after it exec'd (a shell becoming python),
until a process of the tree uses a GPU: a process whose variable differs moves the choice to its value, and the
first process seen on a GPU settles it with its own value (unset: every GPU). Nothing is read on a machine without GPUs.

On AMD GPUs the variables are ROCm's: `ROCR_VISIBLE_DEVICES` filters first, then `HIP_VISIBLE_DEVICES` (or
`CUDA_VISIBLE_DEVICES`, which HIP honours when HIP_VISIBLE_DEVICES is unset) picks among what ROCr left. Their
choice is kept as one layered spec, `ROCR_VISIBLE_DEVICES=0,2; HIP_VISIBLE_DEVICES=1`, that
`gpu.resolve_gpu_selection` applies layer by layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gputop_tracker.core.gpu.backend import GpuReading, resolve_gpu_selection
from gputop_tracker.core.proc.procfs import Reading

VARIABLE = "CUDA_VISIBLE_DEVICES"
ROCR = "ROCR_VISIBLE_DEVICES"
HIP = "HIP_VISIBLE_DEVICES"
#: AMD: in the order ROCr and HIP apply them
AMD_VARIABLES = (ROCR, HIP, VARIABLE)


def variables_for(vendor: str | None) -> tuple[str, ...]:
    """The variables that choose GPUs for a backend's vendor."""
    return AMD_VARIABLES if vendor == "amd" else (VARIABLE,)


def layered_spec(values: Mapping[str, str | None]) -> str | None:
    """AMD's variables as one spec (None when none is set): ROCr's list, then HIP's (else CUDA's) on top."""
    layers = []
    if values.get(ROCR) is not None:
        layers.append(f"{ROCR}={values[ROCR]}")
    hip = HIP if values.get(HIP) is not None else VARIABLE
    if values.get(hip) is not None:
        layers.append(f"{hip}={values[hip]}")
    return "; ".join(layers) or None


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


def environ_readable(pid: int) -> bool:
    """Whether /proc/PID/environ can be read (a variable found unset there is unset, not unknown)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False


class GpuSelection:
    """The selection as it stands: `spec` (a CUDA_VISIBLE_DEVICES list, None = every GPU) and why."""

    def __init__(
        self, fixed: str | None, start_env: Mapping[str, str], where: str, variables: tuple[str, ...] = (VARIABLE,)
    ) -> None:
        self.fixed = fixed is not None
        self.variables = variables
        if fixed is not None:
            self.spec: str | None = fixed
            self.reason = "--gpus"
        else:
            self.spec = self._from(lambda name: start_env.get(name))
            self.reason = (
                f"{self._label(self.spec)} ({where})"
                if self.spec is not None
                else f"every GPU: no --gpus and no {' / '.join(variables)}"
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
                spec = self._specs[h.pid] = self._read(h.pid)
                if spec is not None and spec != self.spec:
                    self.spec, changed = spec, True
                    self.reason = f"{self._label(spec)} (set by the job: process {h.pid}, {h.name})"
            if h.pid in on_gpu:
                self.settled = True
                spec = self._specs.get(h.pid)
                # unset in its environment (a CPU-only child moved the choice, e.g. to ""): it sees every GPU
                if spec != self.spec and (spec is not None or environ_readable(h.pid)):
                    self.spec, changed = spec, True
                    self.reason = (
                        f"{self._label(spec)} (of process {h.pid}, {h.name}, the first on a GPU)"
                        if spec is not None
                        else f"every GPU: process {h.pid} ({h.name}), the first on a GPU, has no "
                        f"{' / '.join(self.variables)}"
                    )
                break
        return changed

    def _from(self, get: Callable[[str], str | None]) -> str | None:
        if self.variables == (VARIABLE,):
            return get(VARIABLE)
        return layered_spec({name: get(name) for name in self.variables})

    def _read(self, pid: int) -> str | None:
        if self.variables == (VARIABLE,):
            return read_variable(pid)
        return self._from(lambda name: read_variable(pid, name))

    def _label(self, spec: str) -> str:
        return spec if "=" in spec else f"{VARIABLE}={spec}"


def resolve_job_gpus(job: dict[str, Any] | None, readings: Sequence[GpuReading]) -> list[str]:
    """Fill `requested.gpu_uuids` of `job` from its `gpu_ids` and the GPUs NVML sees; the problems, if any.

    SLURM gives global indices (SLURM_JOB_GPUS=2,3); a job whose devices are constrained by its cgroup sees
    only its own GPUs, renumbered from 0. So when the ids are indices and NVML sees exactly as many physical
    GPUs as the job was given, those are its GPUs; otherwise each id is resolved as CUDA_VISIBLE_DEVICES is
    (NVML indices, full or short UUIDs, MIG UUIDs: `resolve_gpu_selection`). The job is the SLURM facts the
    front end found (`integrations.slurm.context_for`), handed to the sampler as data."""
    requested = (job or {}).get("requested") or {}
    ids = requested.get("gpu_ids")
    if not ids or not readings or requested.get("gpu_uuids"):
        return []
    physical = [r.uuid for r in readings if r.mig_parent is None]
    if all(i.isdigit() for i in ids) and len(physical) == len(ids):
        requested["gpu_uuids"] = physical
        return []
    chosen, problems = resolve_gpu_selection(readings, ",".join(ids))
    if chosen:
        requested["gpu_uuids"] = [r.uuid for r in readings if r.uuid in chosen]  # in NVML's order
    return [f"the job's GPUs ({','.join(ids)}): {p}" for p in problems]
