"""The SLURM job in every session, efficiency against the request, `advise`, `sessions job`.

SLURM is simulated with environment variables and a fake `scontrol`/`squeue` on PATH; the tracked
processes are real (python holding N MB)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import json_report_to, workload_command

from gputop_tracker.core.integrations import slurm
from gputop_tracker.core.model import models
from gputop_tracker.core.model.units import human_bytes
from gputop_tracker.core.report.advise import advise, round_mem, round_time, slurm_mem, slurm_time
from gputop_tracker.core.report.job_view import job_view
from gputop_tracker.core.summary.builder import SummaryBuilder
from gputop_tracker.core.summary.efficiency import fractions, notes, with_job

MIB = 2**20
GIB = 2**30
MB = 10**6


def _clean_env(**extra: str) -> dict[str, str]:
    """Our environment without any real SLURM variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_"))}
    env.update(extra)
    return env


def _run(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputop_tracker", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _track_hold(tmp_path: Path, mb: int, env: dict[str, str], *extra: str) -> dict[str, Any]:
    """A real run holding `mb` MB for a moment; its JSON report (bytes, seconds)."""
    out = tmp_path / f"report-{mb}-{len(list(tmp_path.iterdir()))}.json"
    proc = _run(
        *json_report_to(out, "--ru", "bytes", "--tu", "seconds", "--interval", "0.1", *extra, "--"),
        *workload_command("hold", str(tmp_path / "k.json"), str(mb), "0.5"),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def _fake_bin(tmp_path: Path, name: str, stdout: str, rc: int = 0) -> Path:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    exe = d / name
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{stdout}\nEOF\nexit {rc}\n")
    exe.chmod(0o755)
    return d


# --------------------------------------------------------------------------- the request's values


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mem=16G,cpus=4,gpus=1,time=2h", {"mem_bytes": 16 * GIB, "cpus": 4, "gpus": 1, "time_limit_s": 7200}),
        ("mem=500M", {"mem_bytes": 500 * MIB}),
        ("mem=4096", {"mem_bytes": 4096 * MIB}),  # a bare number is MiB, as sbatch --mem
        ("mem=2GiB, time=1-12:00:00", {"mem_bytes": 2 * GIB, "time_limit_s": 36 * 3600}),
        ("time=90", {"time_limit_s": 90 * 60}),  # SLURM: a bare number is minutes
        ("time=01:30:00,gpus=0", {"time_limit_s": 5400, "gpus": 0}),
        ("time=45s", {"time_limit_s": 45}),
    ],
)
def test_parse_request(text: str, expected: dict[str, int]) -> None:
    assert slurm.parse_request(text) == expected


@pytest.mark.parametrize(
    "text",
    ["mem=", "mem=abc", "mem=-1G", "cpus=two", "cpus=-1", "cpus=0", "time=forever", "disk=1G", "mem16G", "time=0"],
)
def test_parse_request_rejects(text: str) -> None:
    with pytest.raises(slurm.RequestError):
        slurm.parse_request(text)


@pytest.mark.parametrize("value", ["-5m", "x-1", "1-x", "1:2:3:4"])
def test_an_invalid_time_is_quoted_whole(value: str) -> None:
    """(was: "invalid time -'5m'", the quote inside the text)"""
    with pytest.raises(slurm.RequestError, match=f"^invalid time {value!r}: "):
        slurm.parse_time(value)


def test_the_api_request_needs_a_core() -> None:
    with pytest.raises(slurm.RequestError, match="cpus=0"):
        slurm.check_request({"cpus": 0})
    assert slurm.check_request({"gpus": 0}) == {"gpus": 0}


def test_bad_request_on_the_command_line_is_one_error_line(tmp_path: Path) -> None:
    proc = _run("--headless", "--no-save", "--request", "mem=lots", "--", "true", env=_clean_env())
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("gputop-track: error: invalid memory")


def test_tracker_request() -> None:
    from gputop_tracker.api.tracker import Tracker

    t = Tracker(request="mem=1G,cpus=2", save=False)
    assert t._cfg.slurm is not None and t._cfg.slurm["requested"]["mem_bytes"] == GIB
    assert Tracker(request={"gpus": 2}, save=False)._cfg.slurm["requested"]["gpus"] == 2  # type: ignore[index]
    with pytest.raises(ValueError):
        Tracker(request="mem=lots")
    with pytest.raises(ValueError):
        Tracker(request={"disk": 1})


# --------------------------------------------------------------------------- the job's context


BASE = {"SLURM_JOB_ID": "4242", "PATH": "/nonexistent"}
NO_EXTRAS = {"gpu_ids": None, "gpu_uuids": None, "cgroup_mem_bytes": None}


def _extras() -> dict[str, Any]:
    """The request's extras a real run here records: no GPUs; the memory limit of our cgroup (the run's
    front end is our child, in our cgroup, when it reads it), if this machine sets one."""
    return {**NO_EXTRAS, "cgroup_mem_bytes": slurm.cgroup_limit(0)}


def test_outside_slurm_no_context() -> None:
    assert slurm.job_context({"PATH": "/nonexistent"}) is None


def test_request_alone_gives_the_object_without_ids() -> None:
    ctx = slurm.job_context({}, {"mem_bytes": GIB}, host="h", mem_limit=lambda _pid: None)
    assert ctx is not None and ctx["job_id"] is None and ctx["node"] == "h"
    assert ctx["requested"] == {"mem_bytes": GIB, "cpus": None, "gpus": None, "time_limit_s": None, **NO_EXTRAS}


def test_context_ids_and_request() -> None:
    env = {
        **BASE,
        "SLURM_ARRAY_JOB_ID": "77",
        "SLURM_ARRAY_TASK_ID": "3",
        "SLURM_STEP_ID": "0",
        "SLURMD_NODENAME": "n07",
        "SLURM_NODEID": "1",
        "SLURM_LOCALID": "0",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_MEM_PER_NODE": "4096",
        "SLURM_CPUS_PER_TASK": "2",
        "SLURM_GPUS_ON_NODE": "1",
        "SLURM_JOB_START_TIME": "1000",
        "SLURM_JOB_END_TIME": "4600",
        "SLURM_JOB_GPUS": "3",
    }
    ctx = slurm.job_context(env, mem_limit=lambda _pid: 8 * GIB)
    assert ctx == {
        "job_id": "4242",
        "array_job_id": "77",
        "array_task_id": "3",
        "step_id": "0",
        "node": "n07",
        "node_id": 1,
        "local_id": 0,
        "num_nodes": 2,
        "requested": {
            "mem_bytes": 4096 * MIB,
            "cpus": 2,
            "gpus": 1,
            "time_limit_s": 3600,
            "gpu_ids": ["3"],
            "gpu_uuids": None,
            "cgroup_mem_bytes": 8 * GIB,
        },
    }
    models.SlurmJob.model_validate(ctx)
    # --request overrides SLURM's values key by key
    over = slurm.job_context(env, {"mem_bytes": GIB})
    assert over is not None and over["requested"]["mem_bytes"] == GIB and over["requested"]["cpus"] == 2


def test_memory_per_cpu_and_per_gpu() -> None:
    ctx = slurm.job_context({**BASE, "SLURM_MEM_PER_CPU": "1000", "SLURM_CPUS_PER_TASK": "4"})
    assert ctx is not None and ctx["requested"]["mem_bytes"] == 4000 * MIB
    ctx = slurm.job_context({**BASE, "SLURM_MEM_PER_GPU": "8192", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert ctx is not None and ctx["requested"]["gpus"] == 2 and ctx["requested"]["mem_bytes"] == 16 * GIB


def test_cpus_default_to_affinity_and_node_to_host() -> None:
    ctx = slurm.job_context(BASE, host="myhost")
    assert ctx is not None and ctx["requested"]["cpus"] == len(os.sched_getaffinity(0)) and ctx["node"] == "myhost"
    assert ctx["requested"]["time_limit_s"] is None  # no times, no scontrol/squeue


def test_time_limit_from_fake_scontrol(tmp_path: Path) -> None:
    d = _fake_bin(tmp_path, "scontrol", "JobId=4242 JobName=x\n   RunTime=00:00:05 TimeLimit=1-02:00:00 TimeMin=N/A")
    ctx = slurm.job_context({**BASE, "PATH": str(d)})
    assert ctx is not None and ctx["requested"]["time_limit_s"] == 26 * 3600


def test_time_limit_from_fake_squeue_and_unlimited(tmp_path: Path) -> None:
    d = _fake_bin(tmp_path, "squeue", "  2:30:00")
    ctx = slurm.job_context({**BASE, "PATH": str(d)})
    assert ctx is not None and ctx["requested"]["time_limit_s"] == 9000
    _fake_bin(tmp_path, "scontrol", "JobId=4242 TimeLimit=UNLIMITED")  # scontrol first: it says unlimited
    ctx = slurm.job_context({**BASE, "PATH": str(d)})
    assert ctx is not None and ctx["requested"]["time_limit_s"] is None


def test_attach_reads_the_targets_environment() -> None:
    env = _clean_env(SLURM_JOB_ID="555", SLURM_MEM_PER_NODE="100", SLURMD_NODENAME="nx")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"], env=env, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"  # running its own image
        ctx = slurm.context_for("attach", child.pid, None)
    finally:
        child.kill()
        child.wait()
    assert ctx is not None and ctx["job_id"] == "555" and ctx["node"] == "nx"
    assert ctx["requested"]["mem_bytes"] == 100 * MIB


# --------------------------------------------------------------------------- efficiency (pure)


def _usage(peak: int, wall: float, cpu: float, gpu_peak: int = 0, gpus: list[dict[str, Any]] | None = None) -> Any:
    return {
        "max_ram": {"combined": {"total_rss": peak}},
        "max_gpu_ram": {"combined": gpu_peak},
        "compute_time": {"time": wall},
        "cpu_time": {"total": cpu},
        "gpu_utilization": {"gpu_percentages": {"mean_hardware_percent": 40.0}},
        "gpus": gpus or [],
        "notes": [],
        "command": ["python", "train.py"],
        "exit_code": 0,
        "host": "h",
    }


def test_fractions_and_notes() -> None:
    req = {"mem_bytes": 4096 * MIB, "cpus": 4, "gpus": None, "time_limit_s": 3600}
    u = _usage(500 * MB, 100.0, 40.0)
    eff = fractions(u, req)
    assert eff["memory"] == pytest.approx(500 * MB / (4096 * MIB))
    assert eff["cpu"] == pytest.approx(0.1) and eff["time"] == pytest.approx(100 / 3600)
    assert eff["gpu_memory"] is None and eff["gpu_utilization"] is None
    words = notes(u, req, eff)
    assert any("12% of the 4.29 GB" in n and "--mem=768M" in n for n in words)
    assert any("--cpus-per-task=1" in n for n in words)
    assert any("--time=00:05:00" in n for n in words)
    full = _usage(4000 * MIB, 3500.0, 14000.0)
    words = notes(full, req, fractions(full, req))
    assert any("close to the limit" in n and "memory" in n for n in words)
    assert any("close to the limit; ask for more time" in n for n in words)


def test_gpu_fractions_and_unused_gpu_note() -> None:
    gpus = [{"counted": True, "memory_total": 80 * 10**9}, {"counted": False, "memory_total": 80 * 10**9}]
    u = _usage(MB, 10.0, 1.0, gpu_peak=40 * 10**9, gpus=gpus)
    eff = fractions(u, {"gpus": 1})
    assert eff["gpu_memory"] == pytest.approx(0.5) and eff["gpu_utilization"] == pytest.approx(0.4)
    idle = _usage(MB, 10.0, 1.0, gpu_peak=0, gpus=gpus)
    assert any("did not use the GPU" in n for n in notes(idle, {"gpus": 1}, fractions(idle, {"gpus": 1})))


def test_summary_with_a_job_validates_exactly(strict_models: None) -> None:
    b = SummaryBuilder(main_pid=os.getpid(), command=["x"], mode="attach", interval=0.1, start_time=0.0)
    job = slurm.job_context({**BASE, "SLURM_MEM_PER_NODE": "10", "SLURM_CPUS_PER_TASK": "1"})
    u = models.ResourceUsage.model_validate(b.summary(job=job))
    assert u.slurm is not None and u.slurm.job_id == "4242" and u.efficiency is not None
    assert with_job({"notes": []}, None) == {"notes": [], "slurm": None, "efficiency": None}


# --------------------------------------------------------------------------- advice (pure)


def test_rounding() -> None:
    assert round_mem(600 * MB) == 768 * MIB and slurm_mem(768 * MIB) == "768M"
    assert round_mem(1.5 * GIB) == 2 * GIB and slurm_mem(2 * GIB) == "2G"
    assert round_mem(70 * GIB) == 72 * GIB
    assert round_time(10) == 300 and round_time(3700) == 5400 and round_time(90000) == 90000
    assert slurm_time(300) == "00:05:00" and slurm_time(90000) == "1-01:00:00"


def test_advise_many_sessions_bounds_and_p95() -> None:
    usages = [_usage(i * 100 * MB, 600.0 * i, 600.0 * i * 2) for i in range(1, 6)]
    a = advise(usages, headroom=20)
    peak = 500 * MB
    assert peak <= a["mem_bytes"] <= 1.5 * peak + GIB
    assert a["cpus"] == 2 and a["gpus"] == 0 and a["time_s"] >= 3000 * 1.2
    assert "over 5 sessions (p95" in a["basis"]["mem"]
    assert a["sbatch"][0] == f"#SBATCH --mem={slurm_mem(a['mem_bytes'])}"


def test_advise_gpu_and_mig_hint() -> None:
    gpus = [{"counted": True, "memory_total": 80 * 10**9, "tree_peak_memory": 5 * 10**9}]
    a = advise([_usage(MB, 10.0, 1.0, gpu_peak=5 * 10**9, gpus=gpus)])
    assert a["gpus"] == 1 and a["gpu_memory_bytes"] == 6 * 10**9
    assert "#SBATCH --gres=gpu:1" in a["sbatch"] and any("1g.10gb" in n for n in a["notes"])


# --------------------------------------------------------------------------- sessions job (pure)


def _job(u: dict[str, Any], **ctx: Any) -> dict[str, Any]:
    return {**u, "slurm": {"job_id": "9", "array_job_id": None, "array_task_id": None, "node": "n", **ctx}}


def test_job_view_array_and_failures() -> None:
    sessions = [
        (f"s{i}", {**_job(_usage(i * 100 * MB, i, i), array_job_id="77", array_task_id=str(i)), "exit_code": i % 2})
        for i in (5, 1, 2, 3, 4)
    ]
    v = job_view("77", sessions)
    assert v["kind"] == "array" and v["n"] == 5 and [r["array_task_id"] for r in v["rows"]] == list("12345")
    assert v["stats"]["peak_ram_bytes"]["max"] == 500 * MB and v["stats"]["peak_ram_bytes"]["p50"] == 300 * MB
    assert v["failures"] == {"1": 3}
    assert job_view("78", sessions)["n"] == 0


def test_job_view_nodes() -> None:
    sessions = [
        ("a", _job(_usage(100 * MB, 10.0, 5.0), node="n1", node_id=0)),
        ("b", _job(_usage(300 * MB, 20.0, 7.0), node="n2", node_id=1)),
    ]
    v = job_view("9", sessions)
    assert v["kind"] == "nodes" and [r["node"] for r in v["rows"]] == ["n1", "n2"]
    assert v["total"] == {"peak_ram_bytes": 400 * MB, "peak_gpu_ram_bytes": 0, "wall_s": 20.0, "cpu_seconds": 12.0}
    assert v["slowest_node"] == "n2"


# --------------------------------------------------------------------------- real runs (the "done means")

JOB_ENV = {
    "SLURM_JOB_ID": "4242",
    "SLURM_MEM_PER_NODE": "4096",
    "SLURM_CPUS_PER_TASK": "2",
    "SLURM_JOB_START_TIME": "1000",
    "SLURM_JOB_END_TIME": "8200",
    "SLURMD_NODENAME": "n01",
}


def test_run_under_slurm_efficiency_and_advise(tmp_path: Path, store: Path) -> None:
    env = _clean_env(**JOB_ENV, GPUTOP_TRACKER_STORE=str(store))
    u = _track_hold(tmp_path, 500, env)
    assert u["slurm"]["job_id"] == "4242" and u["slurm"]["node"] == "n01"
    asked = {"mem_bytes": 4096 * MIB, "cpus": 2, "gpus": None, "time_limit_s": 7200}
    assert u["slurm"]["requested"] == {**asked, **_extras()}
    peak = u["max_ram"]["combined"]["total_rss"]
    assert 500 * MB <= peak < 600 * MB
    limit = min(4096 * MIB, _extras()["cgroup_mem_bytes"] or 4096 * MIB)  # a machine's tighter cgroup wins
    assert u["efficiency"]["memory"] == pytest.approx(peak / limit)
    assert u["efficiency"]["memory_basis"] == ("request" if limit == 4096 * MIB else "cgroup")
    if limit == 4096 * MIB:
        assert 0.11 <= u["efficiency"]["memory"] <= 0.14
    assert any("consider --mem=" in n for n in u["notes"])
    proc = _run("advise", "--job", "4242", "-f", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    a = json.loads(proc.stdout)
    assert peak <= a["mem_bytes"] <= 1.5 * peak + GIB and a["n_sessions"] == 1
    text = _run("advise", "--job", "4242", env=env)
    assert "#SBATCH --mem=" in text.stdout and "#SBATCH --time=" in text.stdout
    shown = _run("sessions", "show", u["session_id"], env=env)
    assert "Overall utilization" in shown.stdout and "SLURM job 4242, node n01" in shown.stdout


def test_request_outside_slurm(tmp_path: Path, store: Path) -> None:
    env = _clean_env(GPUTOP_TRACKER_STORE=str(store))
    u = _track_hold(tmp_path, 50, env, "--request", "mem=1G,cpus=1,time=1h")
    assert u["slurm"]["job_id"] is None
    asked = {"mem_bytes": GIB, "cpus": 1, "gpus": None, "time_limit_s": 3600}
    assert u["slurm"]["requested"] == {**asked, **_extras()}
    limit = min(GIB, _extras()["cgroup_mem_bytes"] or GIB)
    assert u["efficiency"]["memory"] == pytest.approx(u["max_ram"]["combined"]["total_rss"] / limit)
    plain = _track_hold(tmp_path, 10, env)
    assert plain["slurm"] is None and plain["efficiency"] is None


def test_array_tasks_as_one_job(tmp_path: Path, store: Path) -> None:
    for task in range(1, 6):
        env = _clean_env(
            SLURM_JOB_ID=str(100 + task),
            SLURM_ARRAY_JOB_ID="77",
            SLURM_ARRAY_TASK_ID=str(task),
            SLURM_MEM_PER_NODE="2048",
            GPUTOP_TRACKER_STORE=str(store),
        )
        _track_hold(tmp_path, 100 * task, env)
    proc = _run("sessions", "job", "77", "-f", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    v = json.loads(proc.stdout)
    assert v["kind"] == "array" and v["n"] == 5
    assert 500 * MB <= v["stats"]["peak_ram_bytes"]["max"] < 600 * MB
    assert [r["array_task_id"] for r in v["rows"]] == ["1", "2", "3", "4", "5"]
    text = _run("sessions", "job", "77", env=env).stdout
    assert "5 array tasks" in text and "p95" in text and "failures: none" in text
    a = json.loads(_run("advise", "--job", "77", "-f", "json", env=env).stdout)
    assert a["n_sessions"] == 5 and "p95" in a["basis"]["mem"]


def test_nodes_of_one_job(tmp_path: Path, store: Path) -> None:
    for node_id, mb in ((0, 100), (1, 200)):
        env = _clean_env(
            SLURM_JOB_ID="900",
            SLURM_JOB_NUM_NODES="2",
            SLURM_NODEID=str(node_id),
            SLURMD_NODENAME=f"node{node_id}",
            GPUTOP_TRACKER_STORE=str(store),
        )
        _track_hold(tmp_path, mb, env)
    v = json.loads(_run("sessions", "job", "900", "-f", "json", env=env).stdout)
    assert v["kind"] == "nodes" and [r["node"] for r in v["rows"]] == ["node0", "node1"]
    assert v["total"]["peak_ram_bytes"] == sum(r["peak_ram_bytes"] for r in v["rows"])
    text = _run("sessions", "job", "900", env=env).stdout
    assert "2 nodes" in text and "total" in text and "slowest node:" in text
    missing = _run("sessions", "job", "901", env=env)
    assert missing.returncode == 2 and missing.stderr.startswith("gputop-track: error: no finished session of job 901")


def test_advise_a_session_held_down_by_its_limit_asks_above_the_limit() -> None:
    """A peak at the cgroup's limit (smaller than --mem) or an OOM kill is a floor of the need, not the need:
    the advice never asks for less than that limit plus headroom, and says why."""
    ok = _usage(1 * GIB, 100.0, 100.0)
    capped = {
        **_usage(int(3.9 * GIB), 100.0, 100.0),
        "slurm": {"requested": {"mem_bytes": 16 * GIB, "cgroup_mem_bytes": 4 * GIB}},
    }
    a = advise([ok, capped], headroom=20)
    assert a["mem_bytes"] >= 4 * GIB * 1.2 and a["sbatch"][0] == f"#SBATCH --mem={slurm_mem(a['mem_bytes'])}"
    assert any("1 of 2 sessions hit the memory limit" in n and human_bytes(4 * GIB) in n for n in a["notes"])
    assert "at least the limit" in a["basis"]["mem"]
    # well under the limit: the peak is the need
    roomy = {**capped, "max_ram": {"combined": {"total_rss": 2 * GIB}}}
    b = advise([ok, roomy], headroom=20)
    assert b["mem_bytes"] == round_mem(2 * GIB * 1.2) and not any("limit" in n for n in b["notes"])
    # OOM-killed with no known limit: the note alone (no figure to build on)
    oom = {**_usage(2 * GIB, 10.0, 10.0), "events": [{"type": "oom", "message": "killed", "source": "kernel"}]}
    c = advise([oom])
    assert c["mem_bytes"] == round_mem(2 * GIB * 1.2) and any("OOM-killed" in n for n in c["notes"])
    # a CUDA "out of memory" in the output is GPU memory: it says nothing of the RAM limit
    cuda = {**capped, "max_ram": {"combined": {"total_rss": 1 * GIB}},
            "events": [{"type": "oom", "message": "CUDA out of memory", "source": "output"}]}  # fmt: skip
    d = advise([cuda], headroom=20)
    assert d["mem_bytes"] == round_mem(1 * GIB * 1.2) and not any("limit" in n for n in d["notes"])
