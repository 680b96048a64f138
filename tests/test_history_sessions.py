"""Deterministic generated sessions for the history tests, the benchmark and the screenshots.

No clocks and no randomness that is not seeded: the same arguments give the same bytes, so snapshots stay
stable. The shapes are those the sampler writes (meta, summary as `models.ResourceUsage`, columnar timeline).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from gputop_tracker.core.model.models import SCHEMA_VERSION, ResourceUsage
from gputop_tracker.core.store import sessions as store
from gputop_tracker.core.summary.builder import TIMELINE_COLUMNS

BASE_TIME = 1_735_732_800.0  # 2025-01-01 12:00:00 UTC
GB = 1e9
HOSTS = ("gpu-node-01", "gpu-node-02", "laptop")
COMMANDS = (
    ["python", "train.py", "--epochs", "10", "--batch", "64"],
    ["python", "train.py", "--epochs", "10", "--batch", "128"],
    ["torchrun", "--nproc-per-node", "2", "finetune.py", "--lr", "3e-4"],
    ["python", "-m", "eval", "--model", "big"],
    ["make", "-j8"],
    ["bash", "preprocess.sh", "data/raw"],
)


def session_id(i: int, host: str, start: float) -> str:
    stamp = _utc_stamp(start)
    return f"{stamp}-{host}-{1000 + i}-{i:04x}"


def _utc_stamp(t: float) -> str:
    import time

    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(t))


def make_session(
    i: int,
    *,
    start: float | None = None,
    duration: float | None = None,
    n_gpus: int | None = None,
    peak_ram: float | None = None,
    exit_code: int | None = 0,
    running: bool = False,
    command: list[str] | None = None,
    host: str | None = None,
    rows: int | None = None,
) -> dict[str, Any]:
    """Session number `i`: a plausible training-like run (RAM ramps up, CPU busy, GPUs mostly busy)."""
    rnd = random.Random(i)
    start = BASE_TIME + i * 3917.0 if start is None else start
    duration = float(rnd.choice((42, 310, 1800, 3600, 5400))) if duration is None else duration
    n_gpus = rnd.choice((0, 1, 2)) if n_gpus is None else n_gpus
    peak_ram = rnd.uniform(0.5, 24) * GB if peak_ram is None else peak_ram
    host = host or HOSTS[i % len(HOSTS)]
    command = command or list(COMMANDS[i % len(COMMANDS)])
    sid = session_id(i, host, start)
    interval = max(1.0, duration / 240)
    n = rows if rows is not None else max(2, int(duration / interval) + 1)
    columns = list(TIMELINE_COLUMNS)
    for g in range(n_gpus):
        columns += [f"gpu{g}_memory", f"gpu{g}_util"]
    gpu_peak = [rnd.uniform(4, 70) * GB for _ in range(n_gpus)]
    timeline: list[list[float | None]] = []
    phase = rnd.uniform(0, 6)
    cpu_sec = 0.0
    for k in range(n):
        t = duration * k / (n - 1)
        x = t / duration
        ramp = 1 - math.exp(-6 * x)
        wobble = 0.06 * math.sin(phase + 25 * x)
        combined = peak_ram * min(1.0, max(0.02, ramp * (0.92 + wobble)))
        main = combined * (0.45 + 0.1 * math.sin(phase + 3 * x))
        desc = combined - main
        cpu = 100 + 250 * ramp + 60 * math.sin(phase + 17 * x)
        cpu_sec += cpu / 100 * (duration / max(1, n - 1))
        row: list[float | None] = [
            round(t, 3),
            round(combined),
            round(combined * 0.8),
            round(combined * 0.2),
            round(main),
            round(desc),
            round(cpu, 1),
            round(cpu * 0.4, 1),
            round(cpu_sec, 2),
            12 + k % 5,
            1 + (3 if x > 0.1 else 0),
            round(sum(gpu_peak) * ramp),
            round(64 * GB * 0.4),
            round(35 + 10 * math.sin(x * 9), 1),
        ]
        for g in range(n_gpus):
            row.append(round(gpu_peak[g] * min(1.0, ramp * 1.05)))
            row.append(round(min(100.0, max(0.0, 85 * ramp + 12 * math.sin(phase + g + 31 * x))), 1))
        timeline.append(row)
    col = {c: j for j, c in enumerate(columns)}

    def series(name: str) -> list[float]:
        return [float(r[col[name]] or 0) for r in timeline]

    def mean(name: str) -> float:
        s = series(name)
        return sum(s) / len(s)

    peak_main = max(series("main_rss"))
    peak_desc = max(series("descendants_total"))
    gpus = [
        {
            "index": g,
            "uuid": f"GPU-{i:04d}-{g}",
            "name": "NVIDIA H100 80GB HBM3",
            "memory_total": int(80 * GB),
            "peak_memory_used": int(gpu_peak[g] * 1.02),
            "tree_peak_memory": int(max(series(f"gpu{g}_memory"))),
            "mean_utilization": round(mean(f"gpu{g}_util"), 1),
            "max_utilization": max(series(f"gpu{g}_util")),
        }
        for g in range(n_gpus)
    ]
    gpu_util_mean = sum(gp["mean_utilization"] for gp in gpus)  # type: ignore[misc]
    pid = 4000 + i
    processes = [
        {
            "pid": pid,
            "ppid": 1,
            "name": command[0][:15],
            "cmdline": command,
            "role": "main",
            "first_seen": 0.0,
            "last_seen": duration,
            "peak_rss": int(peak_main),
            "peak_rss_source": "VmHWM",
            "peak_private": int(peak_main * 0.8),
            "peak_pss": int(peak_main * 0.9),
            "peak_threads": 12,
            "cpu_seconds": round(cpu_sec * 0.4, 2),
            "max_cpu_percent": round(max(series("main_cpu_percent")), 1),
            "peak_gpu_memory": int(sum(gpu_peak) * 0.1),
            "exit_code": exit_code,
        }
    ] + [
        {
            "pid": pid + 1 + w,
            "ppid": pid,
            "name": f"worker-{w}",
            "cmdline": [command[0], f"--worker={w}"],
            "role": "descendant",
            "first_seen": duration * 0.1,
            "last_seen": duration,
            "peak_rss": int(peak_desc / 3 * (1 + 0.1 * w)),
            "peak_rss_source": "ru_maxrss",
            "peak_private": int(peak_desc / 4),
            "peak_pss": int(peak_desc / 3.5),
            "peak_threads": 4,
            "cpu_seconds": round(cpu_sec * 0.2, 2),
            "max_cpu_percent": 99.0,
            "peak_gpu_memory": int(gpu_peak[w % n_gpus] * 0.9) if n_gpus else 0,
            "exit_code": 0,
        }
        for w in range(3)
    ]
    cpu_mean = mean("cpu_percent")
    summary = ResourceUsage.model_validate(
        {
            "max_ram": {
                "system_capacity": 64 * GB,
                "system": 40 * GB,
                "main": {"total_rss": peak_main, "private_rss": peak_main * 0.8, "shared_rss": peak_main * 0.2},
                "descendants": {"total_rss": peak_desc, "private_rss": peak_desc * 0.7, "shared_rss": peak_desc * 0.3},
                "combined": {"total_rss": peak_ram, "private_rss": peak_ram * 0.8, "shared_rss": peak_ram * 0.2},
                "peak_source": "sampled",
                "combined_sampled": peak_ram,
            },
            "max_gpu_ram": {
                "system_capacity": 80 * GB * n_gpus,
                "system": sum(gpu_peak) * 1.02,
                "main": sum(gpu_peak) * 0.1,
                "descendants": sum(gpu_peak) * 0.9,
                "combined": sum(gpu_peak),
            },
            "cpu_utilization": {
                "system_core_count": 32,
                "n_expected_cores": 32,
                "main": {"max_sum_percent": 200.0, "mean_sum_percent": cpu_mean * 0.4},
                "descendants": {"max_sum_percent": 300.0, "mean_sum_percent": cpu_mean * 0.6},
                "combined": {"max_sum_percent": max(series("cpu_percent")), "mean_sum_percent": cpu_mean},
                "system": {"max_sum_percent": 1500.0, "mean_sum_percent": 1100.0},
                "main_n_threads": 12,
                "descendants_n_threads": 12,
                "combined_n_threads": 24,
            },
            "gpu_utilization": {
                "system_gpu_count": n_gpus,
                "n_expected_gpus": n_gpus,
                "gpu_percentages": {
                    "max_sum_percent": 100.0 * n_gpus,
                    "mean_sum_percent": gpu_util_mean,
                },
            },
            "compute_time": {"time": duration},
            "cpu_time": {
                "user": round(cpu_sec * 0.9, 2),
                "system": round(cpu_sec * 0.1, 2),
                "total": round(cpu_sec, 2),
                "mean_percent": cpu_sec / duration * 100,
                "source": "exact",
            },
            "peak_threads": 24,
            "gpus": gpus,
            "gpu_note": None if n_gpus else "no GPU found",
            "processes": processes,
            "sources": {"max_ram.main.total_rss": "exact", "max_ram.combined.total_rss": "sampled"},
            "session_id": sid,
            "command": command,
            "pid": pid,
            "exit_code": None if running else exit_code,
            "status": "running" if running else "exited",
            "start_time": start,
            "end_time": start + duration,
            "host": host,
            "interval": interval,
            "n_samples": n,
            "n_processes": len(processes),
            "tool_version": "0.1.0",
        }
    ).model_dump(mode="json")
    return {
        "schema_version": SCHEMA_VERSION,
        "meta": {
            "id": sid,
            "status": "running" if running else "finished",
            "command": command,
            "mode": "launch",
            "pid": pid,
            "engine_pid": 999_999,
            "host": host,
            "start_time": start,
            "end_time": None if running else start + duration,
            "exit_code": None if running else exit_code,
            "interval": interval,
        },
        "summary": summary,
        "timeline": {"columns": columns, "rows": timeline, "stride": 1},
    }


def fill_store(store_dir: Path, n: int, *, corrupt: bool = True) -> list[str]:
    """`n` sessions (one of them running on another host), plus, with `corrupt`, three unreadable files."""
    ids = []
    for i in range(n):
        s = make_session(i, running=(i == n - 1 and n > 1), exit_code=(1 if i % 7 == 3 else 0))
        store.save_session(store_dir, s)
        ids.append(s["meta"]["id"])
    if corrupt:
        write_corrupt(store_dir)
    return ids


def write_corrupt(store_dir: Path) -> None:
    """A truncated file, a file that is not JSON and one written by a newer tool."""
    store_dir.mkdir(parents=True, exist_ok=True)
    good = json.dumps(make_session(900, start=BASE_TIME - 86400 * 3)).encode()
    # cut inside meta, so the message (and its byte offset) does not change when the summary gains fields
    (store_dir / "20241229-120000-gpu-node-01-1-trunc.json").write_bytes(good[: good.index(b'"command"')])
    (store_dir / "20241229-110000-gpu-node-01-2-junk.json").write_bytes(b"\x00\x01 not json at all")
    newer = make_session(901, start=BASE_TIME - 86400 * 4)
    newer["schema_version"] = SCHEMA_VERSION + 1
    (store_dir / "20241228-100000-gpu-node-02-3-newer.json").write_text(json.dumps(newer))


def test_generated_sessions_load(tmp_path: Path) -> None:
    ids = fill_store(tmp_path, 5)
    entries = store.list_entries(tmp_path)
    readable = [e for e in entries if e.session is not None]
    assert sorted(e.id for e in readable) == sorted(ids)
    assert len(entries) == 8
    assert make_session(3) == make_session(3)  # deterministic
