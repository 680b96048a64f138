"""CUDA out-of-memory forensics: at each OOM of a tracked Python process the probe records the allocator's state
(PyTorch's out-of-memory observer, hooked only once the program imported torch.cuda), the session reconciles it
with NVML's per-process figure and the other processes on that GPU, and says in one sentence why it failed.

The pure rules on synthetic records first; then real processes through the real CLI, with the stand-in torch
(tests/probe_job/fakes: PyTorch's inspection API over a small caching allocator) and the stand-in NVML
(tests/fakenvml), which gives each process what the stand-in torch reserved plus a 512 MiB CUDA context: a figure
above the allocator's, as a real driver does. Each workload reads its own allocator figures to compare with.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakenvml.fake import CONFIG_ENV, FakeNvml, GiB, MiB, device
from helpers import track, track_json

from gputop_tracker.core.blocks.probe import PROBE_DIR
from gputop_tracker.core.gpu.watch import GpuWatcher
from gputop_tracker.core.model.models import GpuOom, ResourceUsage
from gputop_tracker.core.report.advise import advise
from gputop_tracker.core.summary import gpuoom

PY = sys.executable
JOB = Path(__file__).with_name("probe_job")
MAIN = JOB / "oom_main.py"
CONTEXT = 512 * MiB  # the stand-in's CUDA context: NVML counts it, the allocator does not
OTHERS = 2 * GiB  # another process on the GPU (the test's own pid stands for it)
TOTAL = 16 * GiB

# ------------------------------------------------------------------ the rules, on synthetic records


def rec(**kw: Any) -> dict[str, Any]:
    base = {"pid": 10, "name": "train", "framework": "torch", "device": "cuda:0", "request": 8 * GiB}
    base.update(allocated=60 * GiB, reserved=60 * GiB, reserved_unallocated=0, device_free=2 * GiB)
    base.update(device_total=80 * GiB, largest_free_block=0)
    return {**base, **kw}


def test_diagnosis_names_the_cause_that_alone_makes_room() -> None:
    kind, text = gpuoom.diagnose(rec())
    assert kind == "too_big" and "exceeded what was free (2.15 GB) even after PyTorch released its cache" in text
    # 7 GiB reserved but unallocated, the largest free block 1 GiB: the cache in pieces
    kind, text = gpuoom.diagnose(rec(reserved=67 * GiB, reserved_unallocated=7 * GiB, largest_free_block=GiB))
    assert kind == "fragmentation" and "expandable_segments:True" in text and "1.07 GB" in text
    other = [{"pid": 77, "name": "jupyter", "memory": 10 * GiB, "tracked": False}]
    kind, text = gpuoom.diagnose(rec(other_processes=other))
    assert kind == "other_process" and "PID 77 (jupyter) held 10.74 GB" in text
    kind, text = gpuoom.diagnose(rec(beyond_allocator=7 * GiB))
    assert kind == "outside_allocator" and "7.52 GB beyond the 64.42 GB PyTorch reserved" in text
    # the CUDA context alone (under 1 GiB) is never the cause, even when it would cover a tiny deficit
    assert gpuoom.diagnose(rec(request=2 * GiB + 1, beyond_allocator=600 * MiB))[0] == "too_big"
    # a small process beside it is not "the" cause either
    tiny = [{"pid": 77, "name": "x", "memory": 10 * MiB, "tracked": False}]
    assert gpuoom.diagnose(rec(request=2 * GiB + 1, other_processes=tiny))[0] == "too_big"
    # several causes would each make room: the largest one is named
    both = rec(reserved=63 * GiB, reserved_unallocated=7 * GiB, other_processes=other)
    assert gpuoom.diagnose(both)[0] == "other_process"
    # the allocator's own cap (set_per_process_memory_fraction), though the GPU had room
    kind, text = gpuoom.diagnose(rec(device_free=20 * GiB, allocator_limit=64 * GiB))
    assert kind == "limit" and "set_per_process_memory_fraction" in text
    assert gpuoom.diagnose(rec(request=100 * GiB))[1].startswith("the request alone (107.37 GB) is larger than")


def test_parse_keeps_the_probes_figures_and_refuses_a_malformed_line() -> None:
    msg = {"k": "o", "pid": 5, "name": "py", "t": 100.5, "fw": "torch", "n": 2, "dev": "cuda:1", "req": 8 * GiB}
    msg.update(alloc=6 * GiB, res=7 * GiB, dfree=GiB, dtotal=40 * GiB, mgi=[GiB, 80 * GiB], largest=3 * MiB)
    msg["segs"] = [[4 * GiB, GiB, 3 * MiB, "l"], ["x", 1, 2, "s"]]
    r = gpuoom.parse(msg, start_time=100.0)
    assert r is not None
    assert (r["elapsed"], r["device"], r["n"], r["request"]) == (0.5, "cuda:1", 2, 8 * GiB)
    assert r["reserved_unallocated"] == GiB
    assert (r["device_total"], r["allocator_limit"]) == (80 * GiB, 40 * GiB)  # the observer's total was the cap
    assert r["segment_list"] == [{"size": 4 * GiB, "free": GiB, "largest_free": 3 * MiB, "pool": "large"}]
    assert set(r) <= set(GpuOom.model_fields)
    for bad in ({"req": -1}, {"req": True}, {"req": None}, {"dev": 5}):
        assert gpuoom.parse({**msg, **bad}, 0.0) is None


class _G:
    def __init__(self, index: int, uuid: str, processes: dict[int, int]) -> None:
        self.index, self.uuid, self.name, self.processes = index, uuid, "H100", processes
        self.memory_used, self.memory_total = sum(processes.values()), 80 * GiB


def test_reconcile_finds_the_gpu_by_uuid_then_by_the_process() -> None:
    a, b = _G(0, "GPU-aaaa-1111", {10: 5 * GiB}), _G(1, "GPU-bbbb-2222", {10: 9 * GiB, 11: 3 * GiB, 12: GiB})
    assert gpuoom.match_gpu(rec(gpu_uuid="bbbb-2222"), [a, b], []) is b  # PyTorch's uuid, no "GPU-" prefix
    assert gpuoom.match_gpu(rec(), [a, b], []) is None  # on both at the last sample, no uuid: it cannot say
    assert gpuoom.match_gpu(rec(), [a, b], [({0: {}, 1: {10: 1}}, 0.0)]) is b  # the watcher's reads near the OOM
    r = rec(reserved=8 * GiB)
    gpuoom.reconcile(r, b, None, 0.004, {10, 11}, lambda pid: f"p{pid}")
    assert (r["nvml_process"], r["beyond_allocator"], r["gpu_index"], r["nvml_age"]) == (9 * GiB, GiB, 1, 0.004)
    assert r["other_processes"] == [
        {"pid": 11, "name": "p11", "memory": 3 * GiB, "tracked": True},
        {"pid": 12, "name": "p12", "memory": GiB, "tracked": False},
    ]


def test_at_peak_reconciles_nvmls_peak_with_the_reserved_peak() -> None:
    r = rec(peak_reserved=70 * GiB, nvml_process=65 * GiB)
    row = {"peak_gpu_memory": 71 * GiB, "gpu_allocator": [{"framework": "torch", "device": "cuda:0",
                                                            "peak_reserved": 70 * GiB}]}  # fmt: skip
    assert gpuoom.at_peak(r, row) == {"nvml_peak": 71 * GiB, "reserved_peak": 70 * GiB, "beyond": GiB}
    # NVML's sampled peak below its figure at the OOM (a spike between reads): the OOM's figure is a floor
    log = gpuoom.GpuOomLog()
    log.add(r)
    (out,) = gpuoom.section(log, [{**row, "pid": 10, "peak_gpu_memory": 0}])
    assert out["at_peak"] == {"nvml_peak": 65 * GiB, "reserved_peak": 70 * GiB, "beyond": -5 * GiB}


def test_the_read_that_agrees_with_cudas_own_figure_at_the_oom() -> None:
    """The watcher's reads near the OOM (synthetic): the one whose sum over the GPU matches what CUDA said was in
    use at that moment (total - free), not merely the nearest: the program allocated right after catching it."""
    w = GpuWatcher(lambda: None)
    w.record(1.00, {0: {9: 2 * GiB}}, {})
    w.record(1.02, {0: {9: 2 * GiB, 10: 10 * GiB}}, {})  # the 10 GiB held before the OOM (at 1.035)
    w.record(1.04, {0: {9: 2 * GiB, 10: 13 * GiB}}, {})  # 3 GiB more, right after catching it
    reads = w.reads_near(1.035, 1.0)
    assert [round(gap, 3) for _, gap in reads] == [0.005, 0.015, 0.035]  # nearest first
    r = rec(device_total=16 * GiB, device_free=4 * GiB)  # 12 GiB in use: its 10 and the other process's 2
    assert gpuoom.pick_read(r, 0, reads) == ({9: 2 * GiB, 10: 10 * GiB}, pytest.approx(0.015))
    assert gpuoom.pick_read(rec(device_free=None), 0, reads)[0][10] == 13 * GiB  # no CUDA figure: the nearest
    assert gpuoom.pick_read(rec(pid=11), 0, reads) is None  # never listed
    assert w.reads_near(5.0, 1.0) == []


def _usage(gpu_total: int, peak: int, ooms: list[dict[str, Any]], events: list[dict[str, Any]] | None = None) -> Any:
    u = ResourceUsage.model_validate(
        {
            "max_gpu_ram": {"combined": peak},
            "compute_time": {"time": 600.0},
            "gpus": [{"index": 0, "uuid": "GPU-a", "name": "H100", "memory_total": gpu_total,
                      "tree_peak_memory": peak, "counted": True}],
            "gpu_ooms": ooms,
            "events": events or [],
        }
    )  # fmt: skip
    return u.model_dump()


def test_advise_never_asks_for_a_smaller_gpu_after_a_gpu_oom() -> None:
    fine = advise([_usage(80 * GiB, 9 * GiB, [])])
    assert fine["gpu_memory_bytes"] == pytest.approx(9 * GiB * 1.2, rel=1e-6)
    assert any("MIG slice" in n for n in fine["notes"])
    oom = {"time": 1.0, "pid": 1, "device": "cuda:0", "request": 8 * GiB, "gpu_total": 80 * GiB}
    # its peak (9 GiB, all NVML saw) would suggest a MIG slice: it needed more than the 80 GiB it had
    out = advise([_usage(80 * GiB, 9 * GiB, [oom])])
    assert out["gpu_memory_bytes"] >= 80 * GiB * 1.2 and out["gpus"] == 1
    assert not any("MIG slice" in n for n in out["notes"])
    assert any("ran out of GPU memory" in n and "never a smaller one" in n for n in out["notes"])
    # a CUDA OOM seen only in the output (no probe record): the same floor, from the GPU it used
    seen = [{"time": 1.0, "type": "oom", "source": "output", "message": "torch.OutOfMemoryError: CUDA out of memory."}]
    assert advise([_usage(80 * GiB, 9 * GiB, [], seen)])["gpu_memory_bytes"] >= 80 * GiB * 1.2


# ------------------------------------------------------------------ real processes, stand-in torch and NVML


@pytest.fixture
def nvml(tmp_path: Path, fake_lib: Path) -> dict[str, str]:
    """A 16 GiB GPU whose processes are the stand-in torch's (ranks 0-3, each its own memfile) and the test's own
    process holding OTHERS; the environment a tracked job needs to see both stand-ins."""
    fake = FakeNvml(tmp_path / "nvml.conf", [device(total=TOTAL, used=0)])
    fake.processes = [{"dev": 0, "memfile": str(tmp_path / f"gpu{r}.mem")} for r in range(4)]
    fake.processes.append({"dev": 0, "pid": os.getpid(), "mem": OTHERS})
    fake.write()
    return {
        "LD_LIBRARY_PATH": str(fake_lib.parent),
        CONFIG_ENV: str(fake.path),
        "PYTHONPATH": str(JOB / "fakes"),
        "FAKE_TORCH_GPU_TOTAL": str(TOTAL),
        "FAKE_TORCH_OTHERS": str(OTHERS),
        "FAKE_TORCH_OTHER_PID": str(os.getpid()),
        "FAKE_TORCH_NVML_MEMFILE": str(tmp_path / "gpu{rank}.mem"),
        "TMPDIR": str(tmp_path),  # the session's FIFO directory apart from other runs'
        "GPUTOP_TRACKER_NO_CGROUP": "1",
    }


def run(tmp_path: Path, env: dict[str, str], mode: str, *args: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    facts = tmp_path / f"{mode}.facts.json"
    proc, rep = track_json(tmp_path, *args, "--", PY, str(MAIN), mode, str(facts), env=env)
    return proc, rep, json.loads(facts.read_text())


def figures(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("allocated", "reserved", "active", "num_ooms", "device_free", "device_total")}


def workload(state: dict[str, Any], ooms: int | None = None) -> dict[str, Any]:
    s = state["stats"]
    return {
        "allocated": s["allocated_bytes.all.current"],
        "reserved": s["reserved_bytes.all.current"],
        "active": s["active_bytes.all.current"],
        "num_ooms": s["num_ooms"] if ooms is None else ooms,
        "device_free": state["free"],
        "device_total": state["total"],
    }


def test_caught_then_uncaught_oom_recorded_reconciled_and_unchanged(tmp_path: Path, nvml: dict[str, str]) -> None:
    proc, rep, facts = run(tmp_path, nvml, "caught_uncaught")
    assert proc.returncode == 1  # the uncaught error ended the program as it would have: its exit status
    first, second = rep["gpu_ooms"]
    # the figures the workload read itself (after catching; just before the uncaught one, which adds one OOM)
    assert figures(first) == workload(facts["caught"])
    assert figures(second) == workload(facts["uncaught_before"], ooms=2)
    assert (first["request"], second["request"]) == (8 * GiB, 2 * GiB)
    for r in (first, second):
        # NVML's figure for the process = what the allocator reserved + the context beyond it
        assert r["nvml_process"] == r["reserved"] + CONTEXT and r["beyond_allocator"] == CONTEXT
        assert r["other_processes"] == [{"pid": os.getpid(), "name": r["other_processes"][0]["name"],
                                         "memory": OTHERS, "tracked": False}]  # fmt: skip
        assert r["gpu_index"] == 0 and r["pid"] == facts["pid"] and r["dump"]
    assert first["diagnosis"] == "too_big"  # 8 GiB asked, 3.5 GiB free, nothing else would have made room
    assert second["diagnosis"] == "other_process"  # 2 GiB asked, 0.5 GiB free: the other process's 2 GiB
    events = [e for e in rep["events"] if e["type"] == "gpu_oom"]
    assert [e["value"] for e in events] == [8 * GiB, 2 * GiB] and events[0]["resource"] == "gpu0"
    # what reached the program: PyTorch's own text, caught; uncaught, the same traceback as without the tracker
    assert facts["caught"]["type"] == "OutOfMemoryError"
    assert facts["caught"]["text"].startswith("CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total")
    plain = subprocess.run([PY, str(MAIN), "caught_uncaught", str(tmp_path / "plain.json")], capture_output=True,
                           text=True, env={**os.environ, **nvml, "PYTHONPATH": str(JOB / "fakes")})  # fmt: skip
    assert plain.returncode == 1
    job_lines = [line for line in proc.stderr.splitlines() if not line.startswith("gputop-track:")]
    assert job_lines == plain.stderr.splitlines()


def test_a_program_that_retries_smaller_keeps_every_record(tmp_path: Path, nvml: dict[str, str]) -> None:
    proc, rep, facts = run(tmp_path, nvml, "retry")
    assert proc.returncode == 0, proc.stderr
    errors = facts["errors"]
    assert [e["size"] for e in errors] == [12 * GiB, 6 * GiB] and facts["fitted"] == 3 * GiB
    got = rep["gpu_ooms"]
    assert [(r["n"], r["request"], r["num_ooms"]) for r in got] == [(1, 12 * GiB, 1), (2, 6 * GiB, 2)]
    assert [figures(r) for r in got] == [workload(e) for e in errors]
    # one burst, one bundle: both records (and their states) in it
    (bundle,) = {r["dump"] for r in got}
    names = sorted(p.name for p in Path(bundle).iterdir())
    assert {f"gpu_oom-{facts['pid']}-1.json", f"gpu_oom-{facts['pid']}-2.json"} <= set(names)
    manifest = json.loads((Path(bundle) / "manifest.json").read_text())
    assert sorted(manifest["files"]) == names
    kept = json.loads((Path(bundle) / f"gpu_oom-{facts['pid']}-2.json").read_text())
    assert kept["request"] == 6 * GiB and kept["diagnosis"] == got[1]["diagnosis"]
    # `sessions events -t gpu_oom` lists both
    out = track("sessions", "events", rep["session_id"], "-t", "gpu_oom", "-f", "json")
    assert out.returncode == 0, out.stderr
    assert [e["value"] for e in json.loads(out.stdout)] == [12 * GiB, 6 * GiB]


def test_fragmentation_diagnosed_with_every_segment_in_the_bundle(tmp_path: Path, nvml: dict[str, str]) -> None:
    proc, rep, facts = run(tmp_path, nvml, "frag")
    assert proc.returncode == 0, proc.stderr
    (r,) = rep["gpu_ooms"]
    assert figures(r) == workload(facts["caught"])
    assert r["reserved_unallocated"] == 20 * 212 * MiB and r["largest_free_block"] == 212 * MiB
    assert r["segments"] == facts["segments"] == 20
    assert r["diagnosis"] == "fragmentation" and "expandable_segments:True" in r["diagnosis_text"]
    assert len(r["segment_list"]) == 12  # the line holds the most free; the rest are in the state file
    kept = json.loads(Path(r["state_file"]).read_text())
    assert kept["segments_state"]["total"] == kept["segments_state"]["kept"] == 20
    assert all(row[:4] == [512 * MiB, 212 * MiB, 212 * MiB, "l"] for row in kept["segments_state"]["segments"])
    assert (Path(r["state_file"]).stat().st_mode & 0o777) == 0o600
    # the text report: the allocator beside the driver, and the diagnosis
    text = track("sessions", "show", rep["session_id"]).stdout
    assert "GPU out of memory (1 error" in text
    assert "driver     NVML: this process 11.27 GB = reserved 10.74 GB + 536.87 MB beyond the allocator" in text
    assert "diagnosis  fragmentation: PyTorch held 4.45 GB reserved but unallocated" in text


def test_many_processes_each_recorded_with_its_own_figures(tmp_path: Path, nvml: dict[str, str]) -> None:
    proc, rep, facts = run(tmp_path, nvml, "many")
    assert proc.returncode == 0, proc.stderr
    workers = facts["workers"]
    by_pid = {r["pid"]: r for r in rep["gpu_ooms"]}
    assert sorted(by_pid) == sorted(w["pid"] for w in workers)
    for w in workers:
        r = by_pid[w["pid"]]
        assert figures(r) == workload(w) and r["request"] == 15 * GiB
        assert r["nvml_process"] == (w["rank"] + 1) * GiB + CONTEXT
        siblings = {o["pid"] for o in r["other_processes"] if o["tracked"]}
        assert siblings <= {x["pid"] for x in workers} - {w["pid"]}  # the others seen at that moment, of this job


def test_torch_used_without_an_oom_leaves_only_the_observer(tmp_path: Path, nvml: dict[str, str]) -> None:
    proc, rep, facts = run(tmp_path, nvml, "quiet")
    assert proc.returncode == 0, proc.stderr
    assert facts["observers"] == 1  # hooked once, through the program's own import of torch
    assert facts["loader"] == facts["spec_loader"] == "SourceFileLoader"  # torch.cuda knows only its own loader
    assert "gputop_probe_torch_cuda" not in facts["finders"]  # the finder left once torch.cuda was imported
    assert facts["history"] is None and facts["allocated"] == GiB
    assert rep["gpu_ooms"] == [] and not [e for e in rep["events"] if e["type"] == "gpu_oom"]


def test_an_observer_that_fails_inside_changes_nothing(tmp_path: Path, nvml: dict[str, str]) -> None:
    proc, rep, facts = run(tmp_path, nvml, "broken")
    assert proc.returncode == 0, proc.stderr
    caught = facts["caught"]
    assert caught["type"] == "OutOfMemoryError" and caught["text"].startswith("CUDA out of memory.")
    assert caught["context"] == "None"  # no error of ours chained to it
    assert rep["gpu_ooms"] == []  # nothing could be read: nothing sent, nothing printed
    assert "Traceback" not in proc.stderr


def test_a_process_without_torch_imports_nothing_and_sends_nothing(tmp_path: Path) -> None:
    code = "import json, sys; print(json.dumps([sorted(sys.modules), [getattr(f, '__name__', type(f).__name__) for f in sys.meta_path]]))"
    env = {**os.environ, "PYTHONPATH": PROBE_DIR, "GPUTOP_TRACKER_BLOCKS": str(tmp_path / "nowhere" / "blocks")}
    with_probe = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, check=True)
    plain = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})  # fmt: skip
    (mods, finders), (plain_mods, plain_finders) = json.loads(with_probe.stdout), json.loads(plain.stdout)
    assert set(mods) - set(plain_mods) <= {"sitecustomize", "atexit"}  # the probe itself, and nothing it loaded
    assert not any(m.startswith(("torch", "gputop")) for m in mods)
    assert finders == ["gputop_probe_torch_cuda", *plain_finders]  # waiting for torch.cuda, answering nothing else
    proc, rep = track_json(tmp_path, "--", PY, "-c", "import json, email.parser", env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0 and rep["gpu_ooms"] == [] and rep["probe"]["reported"] == [rep["pid"]]
    assert not list(tmp_path.glob("gputop-blocks-*"))  # the FIFO's directory went, with nothing left in it


def test_gpu_history_snapshot_kept_in_the_bundle_and_named(tmp_path: Path, nvml: dict[str, str]) -> None:
    proc, rep, _ = run(tmp_path, nvml, "retry", "--gpu-history", "1000")
    assert proc.returncode == 0, proc.stderr
    first = rep["gpu_ooms"][0]
    path = Path(first["snapshot"])
    assert path.parent == Path(first["dump"]) and (path.stat().st_mode & 0o777) == 0o600
    snap = pickle.loads(path.read_bytes())  # what memory_viz opens: torch.cuda.memory._snapshot()
    assert set(snap) == {"segments", "device_traces", "allocator_settings", "external_annotations"}
    actions = [t["action"] for t in snap["device_traces"][0]]
    assert actions[-1] == "oom" and actions.count("alloc") == 1  # recorded from CUDA's start: the 9 GiB
    assert snap["device_traces"][0][-1]["frames"]  # Python stacks
    text = track("sessions", "show", rep["session_id"]).stdout
    assert f"allocator history {path} (open it at https://pytorch.org/memory_viz)" in text
    # over the dump budget: not kept, and said
    (tmp_path / "small").mkdir()
    proc, rep, _ = run(tmp_path / "small", nvml, "retry", "--gpu-history", "1000", "--oom-dump-mb", "0.0005")
    assert rep["gpu_ooms"][0]["snapshot"] is None
    assert "allocator history not kept: over 500 bytes" in rep["gpu_ooms"][0]["snapshot_note"]


def test_an_uncaught_cupy_oom_is_recorded_at_exit(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(JOB / "fakes"), "TMPDIR": str(tmp_path)}
    proc, rep = track_json(tmp_path, "--", PY, "-c", "import cupy; cupy.zeros(8_000_000_000)", env=env)
    assert proc.returncode == 1 and "cupy.cuda.memory.OutOfMemoryError" in proc.stderr
    (r,) = rep["gpu_ooms"]
    assert (r["framework"], r["device"], r["request"], r["at_exit"]) == ("cupy", "cuda:0", 8_000_000_000, True)
    assert (r["allocated"], r["reserved"], r["device_free"]) == (3_000_000_000, 3_500_000_000, 1_000_000_000)
    assert r["diagnosis"] == "at_exit" and "CuPy has no hook" in r["diagnosis_text"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--gpu-history", "-1"], "--gpu-history must be at least 0"),
        (["--gpu-history", "5", "--no-probe"], "--gpu-history needs the in-process probe"),
    ],
)
def test_gpu_history_bad_input_one_line_exit_2(args: list[str], says: str) -> None:
    proc = track("--headless", "--no-save", *args, "--", "true")
    assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr


def test_tracker_gpu_history_needs_the_probe() -> None:
    from gputop_tracker import Tracker

    with pytest.raises(ValueError, match="gpu_history needs the in-process probe"):
        Tracker(gpu_history=5, probe=False)
    with pytest.raises(ValueError, match="gpu_history must be a whole number"):
        Tracker(gpu_history=1.5)


def test_inbox_takes_only_the_probes_own_files(tmp_path: Path) -> None:
    from gputop_tracker.core.blocks.inbox import BlockInbox

    box = BlockInbox.create()
    assert box is not None
    try:
        d = Path(box.directory)
        (d / "oom-12-1.json").write_text('{"a": 1}')
        (tmp_path / "secret").write_text("theirs")
        (d / "oom-12-2.json").symlink_to(tmp_path / "secret")
        (d / "other.json").write_text("x")
        assert box.claim("oom-12-1.json", 100) == b'{"a": 1}' and not (d / "oom-12-1.json").exists()
        assert box.claim("oom-12-2.json", 100) is None  # a link: never followed
        assert box.claim("other.json", 100) is None and box.claim("../secret", 100) is None
        (d / "oom-12-3.pickle").write_bytes(b"x" * 200)
        assert box.take("oom-12-3.pickle", 100) == (-1, 200)  # over the cap: refused, and gone
        (d / "oom-12-4.json").write_text("left")
        (d / "other.json").unlink()
    finally:
        box.close()
    assert not d.exists() and (tmp_path / "secret").read_text() == "theirs"  # leftovers removed, nothing else


async def test_the_live_view_raises_a_gpu_oom_as_an_alert() -> None:
    import asyncio

    from fakesource import MAIN_PID, FakeSource

    from gputop_tracker.core.model.models import Event
    from gputop_tracker.core.sampling.channel import EventMessage
    from gputop_tracker.tui.live.app import LiveApp

    src = FakeSource(2)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    text = "CUDA out of memory in PID 7 (python) torch cuda:0: fragmentation: …"
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(400):
            if app.n_messages >= src.n_scripted:
                break
            await asyncio.sleep(0.01)
        src.push(EventMessage(Event(time=1.0, type="gpu_oom", message=text, pid=MAIN_PID, dump="/s/x.oom-1")))
        for _ in range(400):
            if app.alert == "gpu_oom":
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        assert app.alert == "gpu_oom"
        shown = [(n.title, n.message) for n in app._notifications]
        assert ("GPU_OOM", f"{text}\ndump: /s/x.oom-1") in shown


def test_tracker_of_its_own_process_records_an_oom_with_history(tmp_path: Path) -> None:
    """Tracker(gpu_history=N) in the program itself: torch imported while it tracks is hooked in this process,
    the history recorded from CUDA's start, the OOM kept with its snapshot."""
    script = tmp_path / "api.py"
    script.write_text(
        "import json, sys\n"
        "from gputop_tracker import Tracker\n"
        f"with Tracker(sleep_time=0.2, store={str(tmp_path / 'store')!r}, gpu_history=500) as t:\n"
        "    import torch\n"
        "    x = torch.empty(10 << 30, dtype=torch.uint8, device='cuda')\n"
        "    try:\n"
        "        torch.empty(8 << 30, dtype=torch.uint8, device='cuda')\n"
        "    except torch.OutOfMemoryError:\n"
        "        stats = torch.cuda.memory_stats(0)\n"
        "u = t.resource_usage\n"
        f"json.dump({{'ooms': [o.model_dump() for o in u.gpu_ooms], 'stats': stats}}, open({str(tmp_path / 'out.json')!r}, 'w'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(JOB / "fakes"), "FAKE_TORCH_GPU_TOTAL": str(TOTAL), "TMPDIR": str(tmp_path)}
    env.pop("GPUTOP_TRACKER_BLOCKS", None)
    proc = subprocess.run([PY, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    (r,) = out["ooms"]
    assert (r["allocated"], r["num_ooms"]) == (out["stats"]["allocated_bytes.all.current"], 1)
    assert r["pid"] and r["request"] == 8 * GiB and r["snapshot"]
    snap = pickle.loads(Path(r["snapshot"]).read_bytes())
    assert [t["action"] for t in snap["device_traces"][0]][-1] == "oom"
