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
        return self._read_int("memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak")

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
