"""The cluster job a session runs in: SLURM's context and what the job asked for (the request).

Read once by the front end before the sampler starts, from gputop-track's own environment (launch) or the
target's /proc/PID/environ (attach), and carried to the sampler in `EngineConfig.slurm`. Outside SLURM the
context is None, unless `--request mem=16G,cpus=4,gpus=1,time=2h` (or `Tracker(request=...)`) gives a
request: then the same object with no job ids. Plain functions on a mapping, so tests pass any environment.

Sizes follow SLURM's own convention: K, M, G, T are binary (1G = 1 GiB) and a bare number is MiB.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from gputop_tracker.core.proc import cgroup
from gputop_tracker.core.proc.procfs import read_environ

REQUEST_KEYS = ("mem_bytes", "cpus", "gpus", "time_limit_s")
_MEM_SUFFIX = {"": 2**20, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_TIME_SUFFIX = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SCONTROL_TIMEOUT = 5.0


class RequestError(ValueError):
    """A bad --request value (one line, for `gputop-track: error: …`)."""


# --------------------------------------------------------------------------- values


def parse_mem(text: str) -> int:
    """'4096' (MiB, as SLURM), '16G', '500M', '1.5T', '16GB', '16GiB' -> bytes (binary units, as SLURM)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise RequestError(f"invalid memory {text!r}: use e.g. 16G, 500M or a number of MiB")
    return int(float(m.group(1)) * _MEM_SUFFIX[m.group(2)])


def parse_time(text: str) -> int:
    """A time limit in seconds: '2h', '90m', '45s', '1d', SLURM's 'MM', 'MM:SS', 'HH:MM:SS', 'D-HH[:MM[:SS]]'."""
    s = text.strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", s)
    value = int(float(m.group(1)) * _TIME_SUFFIX[m.group(2)]) if m else _slurm_time(s)
    if value is None or value <= 0:  # the text as given, quoted whole
        raise RequestError(f"invalid time {text!r}: use e.g. 2h, 90m, 1-12:00:00 or HH:MM:SS")
    return value


def _slurm_time(s: str) -> int | None:
    """SLURM's time formats (sbatch --time): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; None if not."""
    days = 0
    if "-" in s:
        d, _, s = s.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
        parts = s.split(":")
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            return None
        h, mi, sec = ([int(p) for p in parts] + [0, 0])[:3]
        return days * 86400 + h * 3600 + mi * 60 + sec
    parts = s.split(":")
    if not s or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    nums = [int(p) for p in parts]
    if len(nums) == 1:
        return nums[0] * 60  # SLURM: a bare number is minutes
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]


def _count(key: str, text: str) -> int:
    try:
        n = int(text.strip())
    except ValueError:
        raise RequestError(f"invalid {key} {text!r}: a whole number") from None
    low = 1 if key == "cpus" else 0  # a job runs on one core at least; it may ask for no GPU
    if n < low or n > 1_000_000:
        raise RequestError(f"invalid {key} {text!r}: between {low} and 1000000")
    return n


def parse_request(text: str) -> dict[str, int]:
    """`mem=16G,cpus=4,gpus=1,time=2h` (any subset, any order) -> {mem_bytes, cpus, gpus, time_limit_s}."""
    out: dict[str, int] = {}
    names = {"mem": "mem_bytes", "cpus": "cpus", "gpus": "gpus", "time": "time_limit_s"}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip().lower()
        if not sep or key not in names or not value.strip():
            raise RequestError(f"invalid --request item {item.strip()!r}: use mem=SIZE,cpus=N,gpus=N,time=LIMIT")
        if key == "mem":
            out["mem_bytes"] = parse_mem(value)
        elif key == "time":
            out["time_limit_s"] = parse_time(value)
        else:
            out[names[key]] = _count(key, value)
    return out


def check_request(request: Mapping[str, Any] | str) -> dict[str, int]:
    """A request given as a mapping (the API): known keys, whole non-negative numbers; or a string."""
    if isinstance(request, str):
        return parse_request(request)
    out = {}
    for key, value in request.items():
        if key not in REQUEST_KEYS:
            raise RequestError(f"unknown request key {key!r}: use {', '.join(REQUEST_KEYS)}")
        if value is None:
            continue
        low = 0 if key == "gpus" else 1  # no job asks for no memory, no core or no time
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise RequestError(f"invalid request {key}={value!r}: a whole number >= {low}")
        out[key] = value
    return out


# --------------------------------------------------------------------------- the job


def _int(env: Mapping[str, str], key: str) -> int | None:
    raw = env.get(key, "").strip()
    m = re.match(r"\d+", raw)  # SLURM_CPUS_PER_TASK may read "4", SLURM_JOB_NUM_NODES "2"; tolerate "4(x2)"
    return int(m.group(0)) if m else None


def _gpus(env: Mapping[str, str]) -> int | None:
    n = _int(env, "SLURM_GPUS_ON_NODE")
    if n is not None:
        return n
    for key in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        raw = env.get(key, "").strip()
        if raw and raw != "NoDevFiles":
            return len([x for x in raw.split(",") if x.strip()])
    return None


GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")


def gpu_ids(env: Mapping[str, str]) -> list[str] | None:
    """The GPUs the job was given, as the first of GPU_VARIABLES set says: indices, UUIDs or MIG ids."""
    for key in GPU_VARIABLES:
        raw = env.get(key, "").strip()
        if raw and raw != "NoDevFiles":
            return [x.strip() for x in raw.split(",") if x.strip()]
    return None


def cgroup_limit(pid: int) -> int | None:
    """The memory limit of the cgroup `pid` (0: ourselves) runs in, the smallest up the hierarchy."""
    found = cgroup.effective_limit(pid or "self")
    return found[0] if found else None


def _affinity(pid: int) -> int | None:
    try:
        return len(os.sched_getaffinity(pid))
    except OSError:
        return None


def _time_limit(env: Mapping[str, str], job_id: str | None, which: Any = shutil.which) -> int | None:
    start, end = _int(env, "SLURM_JOB_START_TIME"), _int(env, "SLURM_JOB_END_TIME")
    if start is not None and end is not None and end > start:
        return end - start
    if job_id is None:
        return None
    return scontrol_time_limit(job_id, env, which)


def scontrol_time_limit(job_id: str, env: Mapping[str, str], which: Any = shutil.which) -> int | None:
    """TimeLimit of `scontrol show job ID`, else `squeue -h -j ID -o %l`; None when neither says (UNLIMITED)."""
    path = env.get("PATH", os.defpath)
    for argv, pattern in (
        (["scontrol", "show", "job", job_id], r"\bTimeLimit=(\S+)"),
        (["squeue", "-h", "-j", job_id, "-o", "%l"], r"^\s*(\S+)"),
    ):
        exe = which(argv[0], path=path)
        if exe is None:
            continue
        try:
            proc = subprocess.run(
                [exe, *argv[1:]], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT, check=False
            )
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.search(pattern, proc.stdout, re.MULTILINE) if proc.returncode == 0 else None
        if m:
            try:
                return parse_time(m.group(1))
            except RequestError:
                return None  # UNLIMITED, NOT_SET, INVALID
    return None


def _mem(env: Mapping[str, str], cpus: int | None, gpus: int | None) -> int | None:
    per_node = _int(env, "SLURM_MEM_PER_NODE")
    if per_node is not None:
        return per_node * 2**20
    per_cpu = _int(env, "SLURM_MEM_PER_CPU")
    if per_cpu is not None and cpus:
        return per_cpu * 2**20 * cpus
    per_gpu = _int(env, "SLURM_MEM_PER_GPU")
    if per_gpu is not None and gpus:
        return per_gpu * 2**20 * gpus
    return None


def job_context(
    env: Mapping[str, str],
    request: Mapping[str, int] | None = None,
    *,
    pid: int = 0,
    host: str | None = None,
    which: Any = shutil.which,
    mem_limit: Callable[[int], int | None] = cgroup_limit,
) -> dict[str, Any] | None:
    """The `slurm` object of the report: the job's ids and its request (a `request` overrides key by key).
    None outside SLURM without a request. `pid` is whose CPU affinity and cgroup count (0: ourselves, whose
    child the launched command becomes)."""
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None
    if job_id is None and not request:
        return None
    requested: dict[str, Any] = dict.fromkeys(REQUEST_KEYS)
    if job_id is not None:
        cpus = _int(env, "SLURM_CPUS_PER_TASK") or _affinity(pid)
        gpus = _gpus(env)
        requested.update(mem_bytes=_mem(env, cpus, gpus), cpus=cpus, gpus=gpus)
        if not (request and "time_limit_s" in request):
            requested["time_limit_s"] = _time_limit(env, job_id, which)
    requested.update(request or {})
    requested["gpu_ids"] = gpu_ids(env) if job_id is not None else None
    requested["gpu_uuids"] = None  # resolved by the sampler once NVML answers (`gpu.selection.resolve_job_gpus`)
    requested["cgroup_mem_bytes"] = mem_limit(pid)
    return {
        "job_id": job_id,
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID") or None,
        "array_task_id": env.get("SLURM_ARRAY_TASK_ID") or None,
        "step_id": env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or None,
        "node": env.get("SLURMD_NODENAME") or host or socket.gethostname(),
        "node_id": _int(env, "SLURM_NODEID"),
        "local_id": _int(env, "SLURM_LOCALID"),
        "num_nodes": _int(env, "SLURM_JOB_NUM_NODES") or _int(env, "SLURM_NNODES"),
        "requested": requested,
    }


def context_for(mode: str, pid: int, request: Mapping[str, int] | None) -> dict[str, Any] | None:
    """The job context of a run: our own environment when we launch, the target's when we attach."""
    if mode == "attach" and pid and pid != os.getpid():
        return job_context(read_environ(pid), request, pid=pid)
    return job_context(os.environ, request, pid=0)
