"""The job cgroup's real memory limit (the smallest up the hierarchy) in the request, and the
memory efficiency over the smaller of it and the SLURM request; the job's GPUs resolved to UUIDs.

The reader runs on a fake cgroup tree in tmp_path (v1 and v2); where this machine lets us (root, a writable
memory cgroup) a real cgroup with a limit is made and a real run is tracked inside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import WORKLOADS

from gputop_tracker.core.gpu import GpuReading
from gputop_tracker.core.gpu.selection import resolve_job_gpus
from gputop_tracker.core.integrations import slurm
from gputop_tracker.core.proc import cgroup
from gputop_tracker.core.summary.efficiency import fractions, memory_limit

MIB = 2**20
GIB = 2**30
MB = 10**6
V1_NO_LIMIT = "9223372036854771712"


def _tree(tmp_path: Path, version: str, limits: dict[str, str], leaf: str, pid: int = 4242) -> dict[str, Path]:
    """A fake /proc/PID/cgroup and cgroup hierarchy: `limits` maps a cgroup path to its limit file's text."""
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    v1, v2 = tmp_path / "cg" / "memory", tmp_path / "cg2"
    root = v1 if version == "v1" else v2
    line = f"4:memory:{leaf}\n0::/\n" if version == "v1" else f"0::{leaf}\n"
    (proc / str(pid) / "cgroup").write_text("12:pids:/\n" + line)
    for rel, text in limits.items():
        d = root / rel.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / ("memory.limit_in_bytes" if version == "v1" else "memory.max")).write_text(text + "\n")
    leaf_dir = root / leaf.lstrip("/")
    leaf_dir.mkdir(parents=True, exist_ok=True)
    (leaf_dir / ("memory.max_usage_in_bytes" if version == "v1" else "memory.current")).write_text("0\n")
    return {"proc": proc, "v1_root": v1, "v2_root": v2}


def test_v2_smallest_ancestor_limit_binds(tmp_path: Path) -> None:
    roots = _tree(
        tmp_path,
        "v2",
        {
            "/system.slice/slurmstepd.scope": "max",
            "/system.slice/slurmstepd.scope/job_4242": str(2 * GIB),  # --mem=2G
            "/system.slice/slurmstepd.scope/job_4242/step_0": str(8 * GIB),  # looser below: the job's binds
            "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0": "max",
        },
        "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0",
    )
    found = cgroup.effective_limit(4242, **roots)
    assert found is not None
    assert found[0] == 2 * GIB and found[1].name == "job_4242"


def test_v2_no_limit_anywhere(tmp_path: Path) -> None:
    roots = _tree(tmp_path, "v2", {"/user.slice": "max", "/user.slice/session-1.scope": "max"}, "/user.slice/x")
    assert cgroup.effective_limit(4242, **roots) is None


def test_v2_hybrid_unified_mount(tmp_path: Path) -> None:
    """A hybrid machine mounts v2 at /sys/fs/cgroup/unified: the hierarchy is read there."""
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "cgroup").write_text("0::/job\n")
    job = tmp_path / "cg2" / "unified" / "job"
    job.mkdir(parents=True)
    (job / "memory.current").write_text("0\n")
    (job / "memory.max").write_text(f"{GIB}\n")
    found = cgroup.effective_limit(7, proc=proc, v1_root=tmp_path / "none", v2_root=tmp_path / "cg2")
    assert found == (GIB, job)


def test_v1_limit_and_unlimited_and_flat_parent(tmp_path: Path) -> None:
    roots = _tree(
        tmp_path,
        "v1",
        {"/slurm": str(64 * GIB), "/slurm/uid_0": V1_NO_LIMIT, "/slurm/uid_0/job_9": str(3 * GIB)},
        "/slurm/uid_0/job_9/step_batch",
    )
    assert cgroup.effective_limit(4242, **roots) == (3 * GIB, roots["v1_root"] / "slurm/uid_0/job_9")
    (roots["v1_root"] / "slurm/uid_0/job_9/memory.limit_in_bytes").write_text(V1_NO_LIMIT)
    assert cgroup.effective_limit(4242, **roots) == (64 * GIB, roots["v1_root"] / "slurm")
    # a parent without use_hierarchy does not pass its limit down
    (roots["v1_root"] / "slurm/uid_0/memory.use_hierarchy").write_text("0\n")
    assert cgroup.effective_limit(4242, **roots) is None


def test_unreadable_gives_none(tmp_path: Path) -> None:
    assert cgroup.effective_limit(99, proc=tmp_path, v1_root=tmp_path, v2_root=tmp_path) is None


def test_context_records_the_limit_and_memory_uses_the_smaller() -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_MEM_PER_NODE": "4096", "PATH": "/nonexistent"}
    seen: list[int] = []

    def limit(pid: int) -> int:
        seen.append(pid)
        return GIB

    ctx = slurm.job_context(env, pid=0, mem_limit=limit)
    assert ctx is not None and ctx["requested"]["cgroup_mem_bytes"] == GIB and seen == [0]
    assert memory_limit(ctx["requested"]) == (GIB, "cgroup")
    assert memory_limit({"mem_bytes": GIB, "cgroup_mem_bytes": 2 * GIB}) == (GIB, "request")
    assert memory_limit({"mem_bytes": None, "cgroup_mem_bytes": 2 * GIB}) == (2 * GIB, "cgroup")
    assert memory_limit({"mem_bytes": None, "cgroup_mem_bytes": None}) == (None, None)


# --------------------------------------------------------------------------- the job's GPUs


def _gpu(index: int, uuid: str, mig_parent: int | None = None) -> GpuReading:
    return GpuReading(index=index, uuid=uuid, name="x", mig_parent=mig_parent)


FOUR = [_gpu(i, f"GPU-{i}aaa-0000") for i in range(4)]


@pytest.mark.parametrize(
    ("ids", "seen", "uuids", "problems"),
    [
        (["2", "3"], FOUR, ["GPU-2aaa-0000", "GPU-3aaa-0000"], 0),  # global indices, every GPU visible
        (["2", "3"], FOUR[:2], ["GPU-0aaa-0000", "GPU-1aaa-0000"], 0),  # constrained: we see only ours
        (["GPU-1aaa"], FOUR, ["GPU-1aaa-0000"], 0),  # a short UUID
        (["MIG-abc"], [*FOUR[:1], _gpu(1, "MIG-abc-1", mig_parent=0)], ["MIG-abc-1"], 0),
        (["7", "1"], FOUR, ["GPU-1aaa-0000"], 1),  # one unknown: said in a note, the rest kept
    ],
)
def test_resolve_job_gpus(ids: list[str], seen: list[GpuReading], uuids: list[str], problems: int) -> None:
    job: dict[str, Any] = {"requested": {"gpu_ids": ids, "gpu_uuids": None}}
    said = resolve_job_gpus(job, seen)
    assert job["requested"]["gpu_uuids"] == uuids and len(said) == problems
    assert resolve_job_gpus(job, seen) == []  # once


def test_gpu_ids_from_the_environment() -> None:
    assert slurm.gpu_ids({"SLURM_STEP_GPUS": "1", "SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0"}) == ["1"]
    assert slurm.gpu_ids({"SLURM_JOB_GPUS": "0, 1"}) == ["0", "1"]
    assert slurm.gpu_ids({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) is None
    assert slurm.gpu_ids({}) is None


def test_gpu_fractions_over_the_jobs_gpus_only() -> None:
    g = 80 * GIB
    u = {
        "compute_time": {"time": 10.0},
        "cpu_time": {"total": 5.0},
        "max_ram": {"combined": {"total_rss": GIB}},
        "max_gpu_ram": {"combined": 4 * GIB},
        "gpu_utilization": {"gpu_percentages": {"mean_hardware_percent": 60.0}},
        "gpus": [
            {"uuid": "A", "memory_total": g, "tree_peak_memory": GIB, "mean_utilization": 90.0, "counted": True},
            {"uuid": "B", "memory_total": g, "tree_peak_memory": 3 * GIB, "mean_utilization": 30.0, "counted": True},
        ],
    }
    every = fractions(u, {"gpu_uuids": None})
    assert every["gpu_memory"] == pytest.approx(4 * GIB / (2 * g)) and every["gpu_utilization"] == pytest.approx(0.6)
    one = fractions(u, {"gpu_uuids": ["B"]})
    assert one["gpu_memory"] == pytest.approx(3 * GIB / g) and one["gpu_utilization"] == pytest.approx(0.3)


# --------------------------------------------------------------------------- a real cgroup


@pytest.fixture
def limited_cgroup() -> Iterator[Path]:
    """A real memory cgroup under ours limited to 300 MiB, with an unlimited child (where the task goes)."""
    found = cgroup._memory_cgroup_of("self")
    if found is None:
        pytest.skip("no memory cgroup readable here")
    version, base = found
    name = "memory.limit_in_bytes" if version == "v1" else "memory.max"
    top = base / f"gputop-test-limit-{os.getpid()}"
    try:
        top.mkdir()
    except OSError as e:
        pytest.skip(f"cannot create a cgroup under {base}: {e.strerror} (needs root and a writable cgroup)")
    try:
        (top / name).write_text(str(300 * MIB))
        if version == "v2":  # a new v2 cgroup gives its children no controller until told
            (top / "cgroup.subtree_control").write_text("+memory")
        (top / "task").mkdir()
    except OSError as e:
        top.rmdir()
        pytest.skip(f"cannot set a memory limit in {top}: {e.strerror}")
    yield top / "task"
    for d in (top / "task", top):
        for _ in range(100):  # the tracked processes leave as they are reaped
            try:
                d.rmdir()
                break
            except OSError:
                time.sleep(0.05)


def test_real_cgroup_limit_of_a_process_in_a_child(limited_cgroup: Path) -> None:
    child = subprocess.Popen(
        ["sh", "-c", f'echo $$ > "{limited_cgroup}/cgroup.procs" && exec sleep 30'],
    )
    try:
        deadline = time.monotonic() + 20
        while str(child.pid) not in (limited_cgroup / "cgroup.procs").read_text().split():
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.02)
        found = cgroup.effective_limit(child.pid)
        assert found == (300 * MIB, limited_cgroup.parent)
        assert slurm.cgroup_limit(child.pid) == 300 * MIB
    finally:
        child.kill()
        child.wait()


def test_real_run_in_a_limited_cgroup_uses_the_smaller_limit(tmp_path: Path, limited_cgroup: Path) -> None:
    """SLURM asks 4096 MiB but the job's cgroup allows 300 MiB: memory is a fraction of 300 MiB, said so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_"))}
    env.update(SLURM_JOB_ID="4343", SLURM_MEM_PER_NODE="4096", SLURM_CPUS_PER_TASK="1")
    out = tmp_path / "r.json"
    script = f'echo $$ > "{limited_cgroup}/cgroup.procs" && exec "$@"'
    proc = subprocess.run(
        ["sh", "-c", script, "sh", sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "-o",
         str(out), "--interval", "0.1", "--ru", "bytes", "--", sys.executable, WORKLOADS, "hold",
         str(tmp_path / "k.json"), "100", "0.3"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    u = json.loads(out.read_text())
    assert u["slurm"]["requested"]["cgroup_mem_bytes"] == 300 * MIB
    assert u["slurm"]["requested"]["mem_bytes"] == 4096 * MIB
    peak = u["max_ram"]["combined"]["total_rss"]
    assert 100 * MB <= peak < 200 * MB
    assert u["efficiency"]["memory_basis"] == "cgroup"
    assert u["efficiency"]["memory"] == pytest.approx(peak / (300 * MIB))
    shown = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "sessions", "show", u["session_id"]],
        capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip
    assert "cgroup limit" in shown.stdout, shown.stdout + shown.stderr
