"""CUDA out-of-memory records: the allocator's state at each OOM of a tracked Python process (sent by the probe's
out-of-memory half, `gputop_tracker/_probe/gputop_probe_gpu.py`), reconciled with the driver's figures, and one
plain sentence of diagnosis. Pure functions on plain values (the sampler gathers the NVML reads), so each rule is
tested with synthetic records.

The reconciliation: NVML's per-process figure = the allocator's reserved memory + what lies beyond the allocator
(the CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers, other allocators); beside it, what the allocator holds
reserved but unallocated (its cache, fragmented), and the other processes on that GPU at that moment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gputop_tracker.core.model.units import human_bytes

MAX_RECORDS = 1000  # kept per session (each process sends at most 100)
OUTSIDE_MIN = 1 << 30  # memory beyond the allocator below this is the CUDA context and libraries: no diagnosis
OTHERS_MIN = 64 << 20  # another process holding less than this is never "the" cause
HINT = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
_INTS = {
    "req": "request",
    "alloc": "allocated",
    "res": "reserved",
    "act": "active",
    "rqd": "requested",
    "isplit": "inactive_split",
    "palloc": "peak_allocated",
    "pres": "peak_reserved",
    "nseg": "segments",
    "largest": "largest_free_block",
    "nsmall": "small_segments",
    "ooms": "num_ooms",
    "retries": "num_alloc_retries",
    "dfree": "device_free",
    "dtotal": "device_total",
}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62 else None


def _text(v: Any, cap: int) -> str | None:
    return v[:cap] if isinstance(v, str) and v else None


def parse(msg: dict[str, Any], start_time: float) -> dict[str, Any] | None:
    """A record (`models.GpuOom`'s shape, before reconciliation) from the probe's line; None when malformed."""
    request = _int(msg.get("req"))
    device = _text(msg.get("dev"), 32)
    if request is None or device is None:
        return None
    rec: dict[str, Any] = {
        "time": float(msg["t"]),
        "elapsed": round(float(msg["t"]) - start_time, 3),
        "pid": msg["pid"],
        "name": str(msg.get("name") or "")[:64],
        "framework": _text(msg.get("fw"), 16) or "torch",
        "device": device,
        "n": _int(msg.get("n")) or 1,
    }
    rec.update({name: _int(msg.get(key)) for key, name in _INTS.items()})
    rec["segment_list"] = _segment_rows(msg.get("segs"))
    mgi = msg.get("mgi")
    if isinstance(mgi, list) and len(mgi) == 2 and all(_int(x) is not None for x in mgi):
        rec["device_free"] = rec["device_free"] if rec["device_free"] is not None else mgi[0]
        if rec["device_total"] is not None and rec["device_total"] < mgi[1]:
            rec["allocator_limit"] = rec["device_total"]  # set_per_process_memory_fraction: the observer's total
        rec["device_total"] = mgi[1]
    if rec["reserved"] is not None and rec["allocated"] is not None:
        rec["reserved_unallocated"] = max(0, rec["reserved"] - rec["allocated"])
    rec["gpu_uuid"] = _text(msg.get("uuid"), 80)
    rec["at_exit"] = msg.get("when") == "exit"
    return rec


def _segment_rows(raw: Any) -> list[dict[str, Any]]:
    out = []
    for row in raw[:16] if isinstance(raw, list) else []:
        if isinstance(row, list) and len(row) == 4 and all(_int(x) is not None for x in row[:3]):
            pool = {"s": "small", "l": "large"}.get(row[3], "?")
            out.append({"size": row[0], "free": row[1], "largest_free": row[2], "pool": pool})
    return out


# ------------------------------------------------------------------ the driver's side


Reads = list[tuple[dict[int, dict[int, int]], float]]  # the watcher's process lists near the OOM, and how near


def match_gpu(rec: dict[str, Any], gpus: Iterable[Any], reads: Reads) -> Any:
    """The GPU reading (`GpuReading`) of the OOM's device: by the UUID PyTorch gave (it prints without NVML's
    "GPU-"), else the one GPU where NVML lists the process (near the OOM, else at the last sample); None when
    neither tells."""
    gpus = list(gpus)
    uuid = (rec.get("gpu_uuid") or "").lower()
    if uuid:
        for g in gpus:
            if g.uuid.lower().endswith(uuid):
                return g
    holding = [g for g in gpus if any(rec["pid"] in procs.get(g.index, {}) for procs, _ in reads)]
    holding = holding or [g for g in gpus if rec["pid"] in g.processes]
    return holding[0] if len(holding) == 1 else None


def pick_read(rec: dict[str, Any], index: int, reads: Reads) -> tuple[dict[int, int], float] | None:
    """Of the watcher's reads near the OOM that list the process on GPU `index`, the one that agrees best with
    what CUDA said was in use at that very moment (total - free: every process's memory on the GPU), then the
    nearest: the read just before may miss an allocation made since, the one after hold what the program did
    once it caught the error."""
    listed = [(procs[index], gap) for procs, gap in reads if rec["pid"] in procs.get(index, {})]
    if not listed:
        return None
    total, free = rec.get("device_total"), rec.get("device_free")
    used = total - free if total is not None and free is not None else None
    return min(listed, key=lambda r: (abs(sum(r[0].values()) - used) if used is not None else 0, r[1]))


def reconcile(
    rec: dict[str, Any],
    gpu: Any,
    procs: dict[int, int] | None,
    age: float | None,
    tree: Iterable[int],
    name_of: Callable[[int], str],
) -> None:
    """NVML's figures for the OOM's GPU into `rec`: the process's own (`procs`: pid -> bytes on that GPU, read
    `age` seconds from the OOM), what lies beyond the allocator, the other processes, the GPU's memory."""
    if gpu is None:
        return
    procs = procs if procs is not None else dict(gpu.processes)
    rec.update(gpu_index=gpu.index, gpu_uuid=gpu.uuid, gpu_name=gpu.name)
    rec.update(gpu_used=gpu.memory_used, gpu_total=gpu.memory_total, nvml_age=age)
    own = procs.get(rec["pid"])
    rec["nvml_process"] = own
    if own is not None and rec.get("reserved") is not None:
        rec["beyond_allocator"] = own - rec["reserved"]
    members = set(tree)
    others = sorted(((used, pid) for pid, used in procs.items() if pid != rec["pid"]), reverse=True)[:20]
    rec["other_processes"] = [
        {"pid": pid, "name": name_of(pid), "memory": used, "tracked": pid in members} for used, pid in others
    ]


# ------------------------------------------------------------------ the diagnosis


def diagnose(rec: dict[str, Any]) -> tuple[str, str]:
    """(kind, one plain sentence): what kept the request from fitting. Of the causes that alone would have made
    room (the allocator's cache in pieces, another process, memory outside the allocator), the largest; none:
    the request exceeded what was free even after the cache was released."""
    req, free = rec["request"], rec.get("device_free")
    if rec.get("at_exit"):
        return "at_exit", _at_exit(rec, req)
    if free is None:
        return "unknown", f"the request ({human_bytes(req)}) failed; the allocator gave no free figure"
    limit = rec.get("allocator_limit")
    reserved = rec.get("reserved") or 0
    if limit is not None and reserved + req > limit and free >= req:
        return "limit", (
            f"the allocator's own limit ({human_bytes(limit)}, set by torch.cuda.set_per_process_memory_fraction) "
            f"was reached: {human_bytes(reserved)} reserved + the request ({human_bytes(req)}) is more, though the "
            f"GPU had {human_bytes(free)} free"
        )
    deficit = req - free
    causes = [c for c in _causes(rec) if c[0] >= deficit]
    if causes:
        _, kind, text = max(causes, key=lambda c: c[0])
        return kind, text
    return "too_big", _too_big(rec, req, free)


def _causes(rec: dict[str, Any]) -> list[tuple[int, str, str]]:
    """(bytes, kind, sentence) of each cause that held memory the request could have used."""
    req, free = rec["request"], rec.get("device_free") or 0
    out = []
    cached = rec.get("reserved_unallocated") or 0
    if cached > 0:
        largest = rec.get("largest_free_block")
        pieces = f", its largest free block {human_bytes(largest)}" if largest is not None else ""
        out.append(
            (
                cached,
                "fragmentation",
                f"fragmentation: PyTorch held {human_bytes(cached)} reserved but unallocated{pieces}, enough with "
                f"the {human_bytes(free)} free for the request ({human_bytes(req)}) but in pieces it could not "
                f"release; try {HINT}",
            )
        )
    others = rec.get("other_processes") or []
    held = sum(o["memory"] for o in others)
    if others and held >= OTHERS_MIN:
        top = others[0]
        who = f"PID {top['pid']} ({top['name'] or '?'}{', of this job' if top['tracked'] else ''})"
        more = f" and {len(others) - 1} more" if len(others) > 1 else ""
        out.append(
            (
                held,
                "other_process",
                f"another process: {who}{more} held {human_bytes(held)} of this GPU; without it the request "
                f"({human_bytes(req)}) would have fit",
            )
        )
    beyond = rec.get("beyond_allocator")
    if beyond is not None and beyond >= OUTSIDE_MIN:
        out.append(
            (
                beyond,
                "outside_allocator",
                f"memory held outside PyTorch's allocator: this process held {human_bytes(beyond)} beyond the "
                f"{human_bytes(rec.get('reserved'))} PyTorch reserved (CUDA context, cuBLAS/cuDNN workspaces, NCCL "
                f"buffers, other allocators); without it the request ({human_bytes(req)}) would have fit",
            )
        )
    return out


def _at_exit(rec: dict[str, Any], req: int) -> str:
    fw = {"jax": "JAX", "cupy": "CuPy"}.get(rec["framework"], rec["framework"])
    limit = rec.get("reserved")
    held = f" of the {human_bytes(limit)} it may use" if limit is not None and rec["framework"] == "jax" else ""
    return (
        f"an uncaught {fw} out-of-memory error ended the program: the request ({human_bytes(req)}) with "
        f"{human_bytes(rec.get('allocated'))} in use{held} ({fw} has no hook at the moment itself: its allocator "
        "as it stood at exit)"
    )


def _too_big(rec: dict[str, Any], req: int, free: int) -> str:
    total = rec.get("device_total")
    if total is not None and req > total:
        return f"the request alone ({human_bytes(req)}) is larger than the whole GPU ({human_bytes(total)})"
    return (
        f"the request ({human_bytes(req)}) exceeded what was free ({human_bytes(free)}) even after PyTorch released "
        f"its cache: the program's own tensors held {human_bytes(rec.get('allocated'))}; it needs more memory than "
        "this GPU has (a smaller batch, activation checkpointing, or a larger GPU)"
    )


def message(rec: dict[str, Any]) -> str:
    """The event's text: where, and the diagnosis (which says what was asked and what was free)."""
    where = f"PID {rec['pid']} ({rec['name'] or '?'}) {rec['framework']} {rec['device']}"
    return f"CUDA out of memory in {where}: {rec['diagnosis_text']}"


# ------------------------------------------------------------------ the session's records


class GpuOomLog:
    """The session's records (fed by the sampler; read by the summary)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.bad = 0
        self.dropped = 0

    def add(self, rec: dict[str, Any]) -> bool:
        if len(self.records) >= MAX_RECORDS:
            self.dropped += 1
            return False
        self.records.append(rec)
        return True


def log_note(log: GpuOomLog) -> str:
    parts = []
    if log.dropped:
        parts.append(f"{log.dropped} more CUDA out-of-memory records not kept (at most {MAX_RECORDS} a session)")
    if log.bad:
        parts.append(f"{log.bad} malformed CUDA out-of-memory records ignored")
    return "; ".join(parts)


def section(log: GpuOomLog | None, processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's `gpu_ooms`: each record, with the process's figures at its GPU peak beside it (NVML's peak
    and the allocator's reserved peak, when the report lists the process)."""
    if log is None:
        return []
    rows = {p["pid"]: p for p in processes}
    at_oom: dict[int, int] = {}  # NVML's figure at an OOM: a floor of the process's peak (a spike between samples)
    for rec in log.records:
        if rec.get("nvml_process") is not None:
            at_oom[rec["pid"]] = max(at_oom.get(rec["pid"], 0), rec["nvml_process"])
    out = []
    for rec in log.records:
        r = dict(rec)
        p = rows.get(rec["pid"])
        if p is not None:
            r["at_peak"] = at_peak(rec, p, at_oom.get(rec["pid"], 0))
        out.append(r)
    return out


def at_peak(rec: dict[str, Any], row: dict[str, Any], floor: int = 0) -> dict[str, Any] | None:
    """NVML's peak of the process = its allocator's reserved peak + what lay beyond (None: a figure missing)."""
    nvml = max(row.get("peak_gpu_memory") or 0, floor) or None
    reserved = [
        a.get("peak_reserved")
        for a in row.get("gpu_allocator") or []
        if a.get("framework") == rec["framework"] and a.get("device") == rec["device"]
    ]
    peak = max([r for r in reserved if r is not None] + [rec.get("peak_reserved") or 0]) or None
    if nvml is None or peak is None:
        return None
    return {"nvml_peak": nvml, "reserved_peak": peak, "beyond": nvml - peak}
