"""Generated sessions of SLURM jobs for the history tests and screenshots: an array of five tasks and a job on
two nodes, beside three plain sessions (tests/test_history_sessions.py). Deterministic, as those are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_history_sessions import BASE_TIME, fill_store, make_session

from gputop_tracker.core.store import sessions as store
from gputop_tracker.core.summary.efficiency import with_job

GIB = 2**30
MB = 10**6


def _job_session(i: int, job: dict[str, Any], peak: float, host: str, exit_code: int = 0) -> dict[str, Any]:
    s = make_session(
        i,
        start=BASE_TIME + 86400 + i * 60,
        duration=300 + i,
        n_gpus=1,
        peak_ram=peak,
        host=host,
        command=["python", "sweep.py", "--task", str(i)],
        exit_code=exit_code,
    )
    requested = {"mem_bytes": 4 * GIB, "cpus": 2, "gpus": 1, "time_limit_s": 3600}
    extras = {"gpu_ids": None, "gpu_uuids": None, "cgroup_mem_bytes": None}
    with_job(s["summary"], {**job, "node": host, "requested": {**requested, **extras}})
    return s


def _ids_of(job_id: str, array_job_id: str | None, task: str | None, node_id: int, nodes: int) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "array_job_id": array_job_id,
        "array_task_id": task,
        "step_id": None,
        "node_id": node_id,
        "local_id": 0,
        "num_nodes": nodes,
    }


def fill_job_store(store_dir: Path) -> None:
    """Three plain sessions, five tasks of array 77 (peaks 100–500 MB, task 4 failed) and two nodes of job 88."""
    fill_store(store_dir, 3, corrupt=False)
    for t in range(1, 6):
        job = _ids_of(str(100 + t), "77", str(t), 0, 1)
        store.save_session(store_dir, _job_session(100 + t, job, t * 100 * MB, "gpu-node-01", 1 if t == 4 else 0))
    for n, host in enumerate(("gpu-node-03", "gpu-node-04")):
        store.save_session(store_dir, _job_session(200 + n, _ids_of("88", None, None, n, 2), (n + 1) * GIB, host))
