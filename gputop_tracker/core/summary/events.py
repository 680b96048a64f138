"""Alerts, the event timeline and the out-of-memory flight recorder (sampler side, plain Python).

`EventLog` keeps the session's events (plain dicts in the shape of `models.Event`) and hands each new one to
a sink (the sampler sends it to the front end). `LevelWatch` turns a figure and its limit into warning /
critical events, once per crossing. `FlightRecorder` is a ring buffer of the last N seconds of compact
samples, written out as a dump bundle when a tracked process dies of an out-of-memory error.
`OomCounters` reads the kernel's oom_kill counters; `OutputWatch` spots CUDA / PyTorch OOM messages.
Nothing here imports pydantic: it runs in the sampler, every sample.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gputop_tracker._version import __version__

EVENT_TYPES = (
    "start",
    "stop",
    "peak",
    "process_started",
    "process_exited",
    "warning",
    "critical",
    "oom",
    "gpu_oom",
    "gpu_lost",
    "block_start",
    "block_end",
    "mark",
)
ALERT_TYPES = ("warning", "critical", "oom", "gpu_oom", "gpu_lost")  # what the headless front end prints
MAX_EVENTS = 5000  # kept per session; alerts always kept, process/peak events dropped (and counted) past it
PEAK_STEP_FRACTION = 0.10  # a new peak event needs +10% over the last reported peak ...
PEAK_STEP_BYTES = 64 * 1024 * 1024  # ... and at least +64 MiB, so growth never floods the timeline
HYSTERESIS = 5.0  # percentage points below a level before crossing it again counts as a new crossing
REARM_SECONDS = 30.0  # and at least this long after the last event of that level and resource
OOM_PATTERNS = (
    b"CUDA out of memory",
    b"OutOfMemoryError",
    b"CUDA error: out of memory",
    b"CUBLAS_STATUS_ALLOC_FAILED",
)
DUMP_INFIX = ".oom-"  # <store>/<session id>.oom-<n>/


class EventLog:
    def __init__(self, start_time: float) -> None:
        self.start_time = start_time
        self.events: list[dict[str, Any]] = []
        self.sink: Callable[[dict[str, Any]], None] | None = None
        self.dropped = 0

    def add(self, type_: str, now: float, message: str, **fields: Any) -> dict[str, Any] | None:
        if len(self.events) >= MAX_EVENTS and type_ not in ALERT_TYPES and type_ not in ("start", "stop"):
            self.dropped += 1
            return None
        ev = {"time": now, "elapsed": round(now - self.start_time, 3), "type": type_, "message": message}
        ev.update((k, v) for k, v in fields.items() if v is not None)
        self.events.append(ev)
        if self.sink is not None:
            self.sink(ev)
        return ev


class LevelWatch:
    """Warning/critical level of one figure against its limit; an event only when a level is crossed upward."""

    __slots__ = ("critical", "last_event", "level", "warn")

    def __init__(self, warn: float, critical: float) -> None:
        self.warn = warn
        self.critical = critical
        self.level = 0  # 0 ok, 1 warning, 2 critical
        self.last_event = [-1e18, -1e18, -1e18]

    def check(self, percent: float, now: float) -> int:
        """The level newly crossed (1 or 2) when an event is due, else 0."""
        level = 2 if percent >= self.critical else 1 if percent >= self.warn else 0
        if level > self.level:
            self.level = level
            if now - self.last_event[level] >= REARM_SECONDS or self.last_event[level] < 0:
                self.last_event[level] = now
                return level
            return 0
        # fall back only well below a level, so a figure hovering at the line does not flap
        if self.level == 2 and percent < self.critical - HYSTERESIS:
            self.level = 1 if percent >= self.warn else 0
        if self.level == 1 and percent < self.warn - HYSTERESIS:
            self.level = 0
        return 0


# --------------------------------------------------------------------------- flight recorder


class FlightRecorder:
    """The last `seconds` of samples, full resolution, in a ring buffer of compact tuples.

    One entry per sample: (time, elapsed, tree, processes, gpus) where tree = (combined_total,
    combined_private, gpu_memory, n_processes, cpu_percent), each process = (pid, rss, private, pss, peak_rss,
    cpu_percent, threads, gpu_memory) and each GPU = (index, memory_used, memory_total, utilization, tree_memory).
    """

    TREE = ("combined_total", "combined_private", "gpu_memory", "n_processes", "cpu_percent")
    PROC = ("pid", "rss", "private", "pss", "peak_rss", "cpu_percent", "threads", "gpu_memory")
    GPU = ("index", "memory_used", "memory_total", "utilization_gpu", "tree_memory")

    def __init__(self, seconds: float, interval: float) -> None:
        self.seconds = seconds
        self.ring: deque[tuple[Any, ...]] = deque(maxlen=max(2, int(seconds / interval) + 1))

    def add(self, entry: tuple[Any, ...]) -> None:
        self.ring.append(entry)

    def samples_jsonl(self) -> bytes:
        lines = []
        for t, elapsed, tree, procs, gpus in self.ring:
            lines.append(
                json.dumps(
                    {
                        "time": t,
                        "elapsed": elapsed,
                        "tree": dict(zip(self.TREE, tree, strict=False)),
                        "processes": [dict(zip(self.PROC, p, strict=False)) for p in procs],
                        "gpus": [dict(zip(self.GPU, g, strict=False)) for g in gpus],
                    },
                    separators=(",", ":"),
                )
            )
        return ("\n".join(lines) + "\n").encode() if lines else b""


def environment(limits: dict[str, Any]) -> dict[str, Any]:
    uname = os.uname()  # platform.uname()'s figures, without loading platform into the sampler
    return {
        "host": socket.gethostname(),
        "kernel": f"{uname.sysname} {uname.release}",
        "machine": uname.machine,
        "python": sys.version.split()[0],
        "gputop_tracker": __version__,
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "limits": limits,
    }


def write_dump(
    directory: Path,
    *,
    manifest: dict[str, Any],
    recorder: FlightRecorder,
    events: list[dict[str, Any]],
    processes: list[dict[str, Any]],
    gpus: list[dict[str, Any]],
    extra: dict[str, bytes] | None = None,
) -> Path:
    """A dump bundle: manifest.json, samples.jsonl, events.json, processes.json, gpus.json (and `extra`'s files:
    a CUDA out-of-memory record, gpu_oom-PID-N.json).

    Written into a hidden temporary directory and renamed, so a reader never sees half a bundle."""
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp.mkdir(mode=0o700)  # command lines and environment-derived figures: the user's alone, like sessions
    samples = recorder.samples_jsonl()
    files = {
        "samples.jsonl": samples,
        "events.json": json.dumps(events, indent=1).encode(),
        "processes.json": json.dumps(processes, indent=1).encode(),
        "gpus.json": json.dumps(gpus, indent=1).encode(),
        **(extra or {}),
    }
    manifest = {
        **manifest,
        "n_samples": len(recorder.ring),
        "window_seconds": recorder.seconds,
        "files": sorted([*files, "manifest.json"]),
        "written_at": time.time(),
    }
    files["manifest.json"] = json.dumps(manifest, indent=2).encode()
    for name, data in files.items():
        add_file(tmp, name, data)
    os.replace(tmp, directory)
    return directory


def add_file(directory: Path, name: str, data: bytes | int) -> None:
    """A new file of the bundle (0600, never replacing one): `data`'s bytes, or all an open fd holds."""
    fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        if isinstance(data, bytes):
            f.write(data)
            return
        with os.fdopen(os.dup(data), "rb") as src:
            shutil.copyfileobj(src, f, 1 << 20)


def list_files(directory: Path) -> None:
    """The manifest's list of files brought up to date (a file added to the bundle after it was written)."""
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"] = sorted(p.name for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    tmp = directory / ".manifest.json.tmp"
    tmp.unlink(missing_ok=True)
    add_file(directory, tmp.name, json.dumps(manifest, indent=2).encode())
    os.replace(tmp, path)


def dump_dirs(store: Path) -> list[Path]:
    """Every dump bundle in the store, oldest first."""
    try:
        found = [p for p in store.iterdir() if DUMP_INFIX in p.name and not p.name.startswith(".") and p.is_dir()]
    except OSError:
        return []
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.iterdir() if f.is_file())


def prune_dumps(store: Path, keep: int, max_bytes: int) -> list[Path]:
    """Delete the oldest dump bundles until at most `keep` remain and they hold at most `max_bytes`."""
    dirs = dump_dirs(store)
    sizes = {d: _size(d) for d in dirs}
    removed = []
    while dirs and (len(dirs) > keep or sum(sizes[d] for d in dirs) > max_bytes):
        d = dirs.pop(0)
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


# --------------------------------------------------------------------------- OOM signals


class _CounterFile:
    """One `key value` line of a kernel file, kept open: a pread a sample, no file object, no line split."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = b"\n" + key.encode() + b" "
        self.fd = -1

    def read(self) -> int | None:
        """The value, or None when the file (or the line) cannot be read."""
        if self.fd < 0:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return None
        try:
            data = b"\n" + os.pread(self.fd, 1 << 16, 0)
        except OSError:
            return None
        i = data.find(self.key)
        if i < 0:
            return None
        i += len(self.key)
        try:
            return int(data[i : data.find(b"\n", i)])
        except ValueError:
            return None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class OomCounters:
    """The kernel's oom_kill counters. With a job cgroup whose counter we can read (v1 memory.oom_control,
    v2 memory.events), only that one: it counts kills inside the job and nothing else. Without one, the
    machine's (/proc/vmstat), which also counts every unrelated kill on the machine — so the caller must
    match a rise with a death of its own, close in time. A rise between two reads means the OOM killer killed
    something; every read (`rose`) moves the baseline, so call it every sample. `close` once done."""

    def __init__(self, cgroup_dir: Path | None, version: str | None, machine: Path = Path("/proc/vmstat")) -> None:
        self.sources: list[tuple[str, _CounterFile]] = []
        if cgroup_dir is not None:
            name = "memory.oom_control" if version == "v1" else "memory.events"
            counter = _CounterFile(cgroup_dir / name, "oom_kill")
            if counter.read() is not None:
                self.sources.append((f"cgroup {name} oom_kill", counter))
            else:
                counter.close()
        if not self.sources:
            self.sources.append((f"{machine} oom_kill", _CounterFile(machine, "oom_kill")))
        self.last = [c.read() for _, c in self.sources]

    def rose(self) -> str | None:
        """The counter's rise since the last call ("<label> <before> -> <now>"), or None."""
        found = None
        for i, (label, counter) in enumerate(self.sources):
            now = counter.read()
            before = self.last[i]
            if now is not None and before is not None and now > before and found is None:
                found = f"{label} {before} -> {now}"
            if now is not None:
                self.last[i] = now
        return found

    def close(self) -> None:
        for _, counter in self.sources:
            counter.close()


class OutputWatch:
    """Scans the command's output for CUDA / PyTorch out-of-memory messages, across chunk boundaries."""

    def __init__(self) -> None:
        self._tail = b""
        self.matched: str | None = None

    def feed(self, data: bytes) -> str | None:
        """The first line (text) holding an OOM message in `data`, or None."""
        if not data:
            return None
        buf = self._tail + data
        self._tail = buf[-256:]
        for pat in OOM_PATTERNS:
            i = buf.find(pat)
            if i >= 0:
                start = buf.rfind(b"\n", 0, i) + 1
                end = buf.find(b"\n", i)
                line = buf[start : end if end >= 0 else len(buf)].decode(errors="replace").strip()
                self._tail = b""  # one message reported once
                self.matched = line[:500]
                return self.matched
        return None


def is_oom_exception(exc: BaseException) -> bool:
    """MemoryError, torch.OutOfMemoryError (torch.cuda.OutOfMemoryError) or a CUDA 'out of memory' error."""
    if isinstance(exc, MemoryError):
        return True
    if any(c.__name__ == "OutOfMemoryError" for c in type(exc).__mro__):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text.lower() or "ALLOC_FAILED" in text)
