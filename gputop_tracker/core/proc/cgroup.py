"""The exact peak memory of a whole job, from a memory cgroup that holds only the job.

cgroup v1 (memory.max_usage_in_bytes) and v2 (memory.peak) both keep the exact high-water mark of
memory charged to the group — what SLURM's --mem limit is enforced against. In launch mode we create a
child cgroup under our own and start the command in it; where that is not allowed, a SLURM job's own
cgroup is read instead. Everything here fails soft: None means "no exact tree figure".
"""

from __future__ import annotations

import os
import time
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")
PROC = Path("/proc")
UNLIMITED = 1 << 60  # v1 reads "no limit" as 9223372036854771712 (LONG_MAX rounded to a page)


def _memory_cgroup_of(
    pid: int | str, *, proc: Path = PROC, v1_root: Path = V1_ROOT, v2_root: Path = V2_ROOT
) -> tuple[str, Path] | None:
    """('v1'|'v2', directory) of the memory cgroup a process is in (the roots injectable for tests)."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    v2_path = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            d = v1_root / parts[2].lstrip("/")
            if (d / "memory.max_usage_in_bytes").exists():
                return "v1", d
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
    if v2_path is not None:
        d = _unified(v2_root) / v2_path.lstrip("/")
        if (d / "memory.current").exists():
            return "v2", d
    return None


def _unified(v2_root: Path) -> Path:
    """The v2 hierarchy: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid machine."""
    return v2_root / "unified" if (v2_root / "unified").is_dir() else v2_root


class JobCgroup:
    """A memory cgroup whose peak we read; `created` when we made it (and must remove it)."""

    def __init__(self, version: str, path: Path, created: bool) -> None:
        self.version = version
        self.path = path
        self.created = created
        self.kept_peak = 0  # the peak as it was before a block's reset (v1 resets are global): never lost

    @property
    def source(self) -> str:
        f = "memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak"
        return f"cgroup {self.version} {f} ({'own child cgroup' if self.created else self.path})"

    def _read_int(self, name: str) -> int | None:
        try:
            text = (self.path / name).read_text().strip()
        except OSError:
            return None
        return None if text in ("", "max") else int(text.split()[0])

    def peak(self) -> int | None:
        """The group's peak since it was made: the kernel's figure, or the one a block's reset cleared."""
        value = self._read_int("memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak")
        return None if value is None else max(value, self.kept_peak)

    def cache(self) -> int | None:
        """Page cache charged to the group now (memory.stat: v1 total_cache, v2 file), or None."""
        key = b"total_cache " if self.version == "v1" else b"file "
        try:
            for line in (self.path / "memory.stat").read_bytes().splitlines():
                if line.startswith(key):
                    return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None

    def limit(self) -> int | None:
        value = self._read_int("memory.limit_in_bytes" if self.version == "v1" else "memory.max")
        return value if value is not None and value < 1 << 60 else None

    def set_limit(self, limit: int) -> bool:
        """Make `limit` bytes the group's hard limit (the kernel OOM-kills inside it past that)."""
        try:
            (self.path / ("memory.limit_in_bytes" if self.version == "v1" else "memory.max")).write_text(str(limit))
        except OSError:
            return False
        return self.limit() is not None

    def join_fd(self) -> int:
        """An fd on cgroup.procs; the launched child writes its pid into it before exec."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY)

    def remove(self) -> None:
        if not self.created:
            return
        parent = self.path.parent / "cgroup.procs"
        try:
            for pid in (self.path / "cgroup.procs").read_text().split():
                parent.write_text(pid)  # leftover orphans go back to our own cgroup
        except OSError:
            pass
        try:
            self.path.rmdir()
        except OSError:
            pass


def _limit_file(d: Path, name: str) -> int | None:
    """A limit file's bytes; None for "max", v1's near-2^63 "no limit", or no file."""
    try:
        text = (d / name).read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max"
    value = int(text)
    return value if value < UNLIMITED else None


def effective_limit(
    pid: int | str, *, proc: Path = PROC, v1_root: Path = V1_ROOT, v2_root: Path = V2_ROOT
) -> tuple[int, Path] | None:
    """The memory limit that binds a process, and the cgroup that sets it: the smallest limit of its memory
    cgroup and every ancestor (v2 memory.max; v1 memory.limit_in_bytes, up while the parent is hierarchical).
    None when no cgroup up the tree has a limit, or cgroups cannot be read."""
    found = _memory_cgroup_of(pid, proc=proc, v1_root=v1_root, v2_root=v2_root)
    if found is None:
        return None
    version, d = found
    root = v1_root if version == "v1" else _unified(v2_root)
    name = "memory.limit_in_bytes" if version == "v1" else "memory.max"
    best: tuple[int, Path] | None = None
    while True:
        value = _limit_file(d, name)
        if value is not None and (best is None or value < best[0]):
            best = (value, d)
        if d == root or root not in d.parents:
            return best
        d = d.parent
        if version == "v1" and (d / "memory.use_hierarchy").exists():
            try:
                if (d / "memory.use_hierarchy").read_text().strip() == "0":
                    return best  # a flat parent: its limit does not apply to its children
            except OSError:
                return best


def create_job_cgroup(tag: str) -> JobCgroup | None:
    """A fresh child memory cgroup under our own, or None where the machine does not allow it."""
    if os.environ.get("GPUTOP_TRACKER_NO_CGROUP"):
        return None
    found = _memory_cgroup_of("self")
    if found is None:
        return None
    version, base = found
    _sweep_stale(base)
    path = base / f"gputop-{tag}"
    try:
        path.mkdir()
    except OSError:
        return None
    cg = JobCgroup(version, path, created=True)
    if cg.peak() is None:  # v2 before Linux 5.19 has no memory.peak
        cg.remove()
        return None
    return cg


def _sweep_stale(base: Path) -> None:
    """Remove empty cgroups left by a gputop-track that was killed before it could clean up."""
    try:
        children = [p for p in base.iterdir() if p.name.startswith("gputop-") and p.is_dir()]
    except OSError:
        return
    for p in children:
        try:
            if not (p / "cgroup.procs").read_text().strip() and time.time() - p.stat().st_mtime > 60:
                p.rmdir()
        except OSError:
            pass


def existing_job_cgroup(pid: int) -> JobCgroup | None:
    """The cgroup of a process that a scheduler already gave its own (a SLURM job or step)."""
    found = _memory_cgroup_of(pid)
    if found is None:
        return None
    version, path = found
    if "slurm" not in str(path) or "job_" not in str(path):
        return None
    cg = JobCgroup(version, path, created=False)
    return cg if cg.peak() is not None else None


class PeakWindows:
    """The job cgroup's exact peak over a window of time (a code block's run), where the kernel lets us reset it.

    cgroup v2 from Linux 6.12: a write to memory.peak resets it for that open file only (each window has its
    own file descriptor; the group's peak as others read it stays), so windows may nest and overlap. cgroup v1:
    a write to memory.max_usage_in_bytes resets the group's one peak: a window opens only when none is open
    (a block started inside another, or beside it in another process, gets no exact figure), and the peak the
    reset cleared is kept in `JobCgroup.kept_peak`, so the run's own peak is never lost. Only for a cgroup we
    made (a scheduler's job cgroup is read, never reset). Fails soft: None, "no exact figure".
    """

    MAX_OPEN = 64  # v2: open windows (file descriptors) at once

    def __init__(self, cg: JobCgroup) -> None:
        self.cg = cg
        self.ok = cg.created  # False once the kernel refused a reset
        self.v1_open = False
        self.n_open = 0

    @property
    def source(self) -> str:
        if self.cg.version == "v1":
            return "the run's own cgroup v1 memory.max_usage_in_bytes, reset as the block started, one block at a time"
        return "the run's own cgroup v2 memory.peak, reset for the block alone (Linux ≥ 6.12)"

    def open(self) -> int | None:
        """Start a window: a token for `close`, or None (no exact figure for this one)."""
        if not self.ok:
            return None
        if self.cg.version == "v1":
            return self._open_v1()
        if self.n_open >= self.MAX_OPEN:
            return None
        try:
            fd = os.open(self.cg.path / "memory.peak", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            self.ok = False  # before 6.12 the file is read-only
            return None
        try:
            os.write(fd, b"reset\n")
        except OSError:
            os.close(fd)
            self.ok = False
            return None
        self.n_open += 1
        return fd

    def _open_v1(self) -> int | None:
        if self.v1_open:
            return None
        before = self.cg._read_int("memory.max_usage_in_bytes")
        if before is None:
            return None
        self.cg.kept_peak = max(self.cg.kept_peak, before)
        try:
            (self.cg.path / "memory.max_usage_in_bytes").write_text("0")
        except OSError:
            self.ok = False
            return None
        self.v1_open = True
        return -1

    def close(self, token: int, read: bool = True) -> int | None:
        """End a window: the group's peak (bytes) since it opened, or None."""
        if token == -1:
            self.v1_open = False
            value = self.cg._read_int("memory.max_usage_in_bytes") if read else None
            if value is not None:
                self.cg.kept_peak = max(self.cg.kept_peak, value)
            return value
        self.n_open -= 1
        try:
            data = os.pread(token, 64, 0) if read else b""
        except OSError:
            data = b""
        finally:
            os.close(token)
        text = data.decode(errors="replace").strip()
        return int(text) if text.isdigit() else None
