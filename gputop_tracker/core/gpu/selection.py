"""Which GPUs count for utilization: `--gpus`, else the `CUDA_VISIBLE_DEVICES` the job itself runs with.

A job often sets the variable itself (`export CUDA_VISIBLE_DEVICES=1` in a SLURM script, `env
CUDA_VISIBLE_DEVICES=… python train.py`), so our own environment is only where the choice starts. Each tracked
process's environment is read once when it appears, and again after it exec'd (a shell becoming python),
until a process of the tree uses a GPU: a process whose variable differs moves the choice to its value, and the
first process seen on a GPU settles it with its own value (unset: every GPU). Nothing is read on a machine without GPUs.

On AMD GPUs the variables are ROCm's: `ROCR_VISIBLE_DEVICES` filters first, then `HIP_VISIBLE_DEVICES` (or
`CUDA_VISIBLE_DEVICES`, which HIP honours when HIP_VISIBLE_DEVICES is unset) picks among what ROCr left. Their
choice is kept as one layered spec, `ROCR_VISIBLE_DEVICES=0,2; HIP_VISIBLE_DEVICES=1`, that
`resolve_gpu_selection` applies layer by layer. The rules that turn a list into GPUs (indices, full or short
UUIDs, MIG UUIDs; CUDA's stop at a bad entry) are here too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gputop_tracker.core.gpu.base import GpuReading
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


# --------------------------------------------------------------------------- a list -> GPUs


def resolve_gpu_selection(
    readings: Sequence[GpuReading], spec: str, *, as_runtime: bool = False, cuda_order: bool = False
) -> tuple[set[str], list[str]]:
    """UUIDs chosen by a CUDA_VISIBLE_DEVICES-style list: indices, full or short UUIDs, MIG UUIDs.

    `as_runtime`: the list is the variable the job's runtime reads, so it is read as CUDA (and ROCm) read it: an
    entry that names no GPU (or several) hides it and every entry after it (`0,9,1` on 8 GPUs is GPU 0 alone).
    Otherwise (`--gpus`, a scheduler's list) such an entry is skipped and the others kept. `cuda_order`: the
    indices are meant as CUDA's (a user's list, the job's variable; not a scheduler's): say where they may differ.

    Returns (uuids, problems). NVML orders GPUs by PCI bus, not as CUDA does, so indices are taken as
    NVML indices of physical GPUs (MIG devices are chosen by UUID only); everything is resolved to a UUID.
    A layered spec (`ROCR_VISIBLE_DEVICES=0,2; HIP_VISIBLE_DEVICES=1`, see gpuselect) applies each list to
    what the one before it left, as ROCr and HIP do: an index is a position in that list.
    """
    if "=" in spec:
        return _resolve_layers(readings, spec, as_runtime)
    picked, problems = _pick(spec, readings, by_position=False, stop=as_runtime)
    return {r.uuid for r in picked}, problems + (_order_caveat(readings, spec) if cuda_order else [])


def _order_caveat(readings: Sequence[GpuReading], spec: str) -> list[str]:
    """Indices are NVML's (PCI bus order); CUDA numbers the fastest GPU first unless CUDA_DEVICE_ORDER=PCI_BUS_ID.
    The two agree where every GPU is the same model; elsewhere an index may name another GPU than the job's."""
    models = {r.name for r in readings if r.mig_parent is None}
    has_index = any(x.strip().lstrip("-").isdigit() for x in spec.split(","))
    if len(models) < 2 or not has_index or os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return []
    return [
        "indices are taken in PCI bus order (NVML's); with different GPU models here CUDA numbers the fastest first "
        "unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so an index may be another GPU for the job (UUIDs name one for sure)"
    ]


def _pick(
    value: str, pool: Sequence[GpuReading], *, by_position: bool, stop: bool = False
) -> tuple[list[GpuReading], list[str]]:
    """The GPUs of `pool` a comma-separated list names, in the list's order, and the items that name none or
    several. An index is a position in `pool` (by_position) or an NVML index of a physical GPU; other items are
    full or short UUIDs. A negative index ends the list, as in CUDA; so does any bad item when `stop`."""
    picked: list[GpuReading] = []
    problems: list[str] = []
    items = value.split(",")
    for n, raw in enumerate(items):
        item = raw.strip()
        if not item:
            continue
        if item.lstrip("-").isdigit():
            idx = int(item)
            if idx < 0:
                break  # CUDA stops at the first invalid index
            if by_position:
                found = [pool[idx]] if idx < len(pool) else []
            else:
                found = [r for r in pool if r.index == idx and r.mig_parent is None]
        else:
            uuids = set(_match_id(pool, item))
            found = [r for r in pool if r.uuid in uuids]
        if len(found) == 1:
            if found[0] not in picked:
                picked.append(found[0])
            continue
        problem = f"{item!r} matches {'no' if not found else 'more than one'} GPU"
        rest = ",".join(x.strip() for x in items[n + 1 :] if x.strip())
        if stop:
            problems.append(
                f"{problem}: the job's GPU runtime sees no GPU from there on"
                + (f" ({rest} not counted)" if rest else "")
            )
            break
        problems.append(problem)
    return picked, problems


def _match_id(readings: Sequence[GpuReading], item: str) -> list[str]:
    """UUIDs of the readings a full or short UUID (or an alternative id, AMD's GPU-<hex>) names."""
    key = item.lower()

    def ids(r: GpuReading) -> list[str]:
        return [x.lower() for x in (r.uuid, *r.alt_ids)]

    match = [r.uuid for r in readings if any(x == key or x.startswith(key) for x in ids(r))]
    if not match and not key.startswith(("gpu-", "mig-")):
        match = [r.uuid for r in readings if any(x.startswith("gpu-" + key) for x in ids(r))]
    return match


def _resolve_layers(readings: Sequence[GpuReading], spec: str, stop: bool) -> tuple[set[str], list[str]]:
    pool = sorted((r for r in readings if r.mig_parent is None), key=lambda r: r.index)
    problems: list[str] = []
    for layer in spec.split(";"):
        name, _, value = layer.strip().partition("=")
        pool, missed = _pick(value, pool, by_position=True, stop=stop)
        problems += [f"{name}: {p}" for p in missed]
    return {r.uuid for r in pool}, problems
