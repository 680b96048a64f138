"""NVML end to end through a fake libnvidia-ml.so.1 (tests/fakenvml/fakenvml.c) and the real nvidia-ml-py.

The fake is compiled with gcc and found through LD_LIBRARY_PATH by the real CLI, or loaded in-process
for backend tests; the test rewrites its config once the workload's real PIDs are known.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakenvml.fake import CONFIG_ENV, FakeNvml, MiB, device, loaded_in_process
from helpers import PARENT_CHILD_WORKLOAD, wait_pids

from gputop_tracker.core.report.advise import advise
from gputop_tracker.core.summary import efficiency

GPU0 = "GPU-0a0a0a0a-1111-4000-8000-000000000000"
GPU1 = "GPU-1b1b1b1b-2222-4000-8000-000000000001"

# main holds "GPU 0" memory, its child "GPU 1" memory; both wait for the test to say done
WORKLOAD = PARENT_CHILD_WORKLOAD


def two_gpus(**gpu1: Any) -> list[dict[str, Any]]:
    return [
        device(uuid=GPU0, bus="00000000:18:00.0", used=2000 * MiB, util=90, power_mw=300_000),
        device(uuid=GPU1, bus="00000000:3B:00.0", used=4000 * MiB, util=30, power_mw=150_000, **gpu1),
    ]


class Run:
    """The real CLI tracking WORKLOAD with the fake library on LD_LIBRARY_PATH."""

    def __init__(
        self,
        tmp_path: Path,
        lib: Path,
        fake: FakeNvml,
        env: dict[str, str] | None = None,
        wrap: list[str] | None = None,
        command_prefix: list[str] | None = None,
    ) -> None:
        self.tmp = tmp_path
        self.pidfile = tmp_path / "pids"
        self.done = tmp_path / "done"
        self.out = tmp_path / "report.json"
        full_env = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent), CONFIG_ENV: str(fake.path), **(env or {})}
        self.proc = subprocess.Popen(
            [
                *(wrap or []), sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(self.out),
                "--ru", "bytes", "--gru", "bytes", "--tu", "seconds", "--interval", "0.1",
                "--", *(command_prefix or []), sys.executable, "-c", WORKLOAD, str(self.pidfile), str(self.done),
            ],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def pids(self) -> tuple[int, int]:
        return wait_pids(self.pidfile, self.proc, timeout=20)

    def finish(self) -> tuple[int, str, dict[str, Any]]:
        self.done.write_text("")
        _, err = self.proc.communicate(timeout=30)
        assert self.out.exists(), err
        return self.proc.returncode, err, json.loads(self.out.read_text())


# the running-processes query runs at most once a second (NvmlBackend.PROCESS_PERIOD): let two happen
SETTLE = 2.3


@pytest.fixture
def fake(tmp_path: Path) -> FakeNvml:
    return FakeNvml(tmp_path / "nvml.conf", two_gpus())


def hold_memory(fake: FakeNvml, main: int, child: int) -> None:
    fake.processes = [
        {"dev": 0, "pid": main, "mem": 1000 * MiB},
        {"dev": 1, "pid": child, "mem": 3000 * MiB},
        {"dev": 1, "pid": 1, "mem": 777 * MiB},  # not ours: never counted for the tree
    ]
    fake.procutils = [{"dev": 0, "pid": main, "sm": 64, "mem": 20}, {"dev": 1, "pid": child, "sm": 41, "mem": 9}]
    fake.write()


def run_holding_memory(
    tmp_path: Path, lib: Path, fake: FakeNvml, **run_kw: Any
) -> tuple[str, dict[str, Any], int, int]:
    """A Run (`run_kw` its options) whose main and child hold hold_memory's figures for SETTLE s; after checking it
    exited 7: its stderr, report, and main's and the child's PIDs."""
    run = Run(tmp_path, lib, fake, **run_kw)
    main, child = run.pids()
    hold_memory(fake, main, child)
    time.sleep(SETTLE)
    code, err, rep = run.finish()
    assert code == 7, err
    return err, rep, main, child


def test_tree_gpu_memory_exact_through_fake_nvml(tmp_path: Path, fake_lib: Path, fake: FakeNvml) -> None:
    err, rep, main, child = run_holding_memory(tmp_path, fake_lib, fake)
    assert rep["exit_code"] == 7
    assert "Traceback" not in err
    g = rep["max_gpu_ram"]
    assert g["unit"] == "bytes"
    assert g["main"] == 1000 * MiB
    assert g["descendants"] == 3000 * MiB
    assert g["combined"] == 4000 * MiB
    assert g["system"] == 6000 * MiB  # Σ memory used of both devices, every process
    assert g["system_capacity"] == 2 * 80 * 1024**3
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    assert {x["vendor"] for x in rep["gpus"]} == {"nvidia"}
    assert gpus[GPU0]["tree_peak_memory"] == 1000 * MiB
    assert gpus[GPU1]["tree_peak_memory"] == 3000 * MiB
    assert gpus[GPU0]["pci_bus_id"] == "00000000:18:00.0"
    assert gpus[GPU0]["tree_peak_sm_utilization"] == 64
    assert gpus[GPU1]["tree_peak_sm_utilization"] == 41
    assert gpus[GPU0]["max_power_w"] == 300.0
    assert gpus[GPU0]["mean_sm_activity"] is None  # no GPM on these fakes: absent, not zero
    procs = {p["pid"]: p for p in rep["processes"]}
    assert procs[main]["peak_gpu_memory"] == 1000 * MiB
    assert procs[child]["peak_gpu_memory"] == 3000 * MiB
    # energy = ∫ power: 300 W + 150 W over the run, first to last reading
    wall = rep["compute_time"]["time"]
    assert rep["gpu_energy_j"] == pytest.approx(450 * wall, rel=0.25)
    assert rep["gpu_energy_wh"] == pytest.approx(rep["gpu_energy_j"] / 3600)
    assert gpus[GPU0]["energy_j"] == pytest.approx(2 * gpus[GPU1]["energy_j"], rel=0.05)
    # every GPU counts when nothing selects them
    assert rep["gpu_utilization"]["n_expected_gpus"] == 2
    assert rep["gpu_utilization"]["gpu_percentages"]["max_sum_percent"] == 120


def test_cuda_visible_devices_uuid_counts_only_that_gpu(tmp_path: Path, fake_lib: Path, fake: FakeNvml) -> None:
    _, rep, _, _ = run_holding_memory(tmp_path, fake_lib, fake, env={"CUDA_VISIBLE_DEVICES": GPU1})
    util = rep["gpu_utilization"]
    assert util["system_gpu_count"] == 2
    assert util["n_expected_gpus"] == 1
    assert util["gpu_percentages"]["max_sum_percent"] == 30  # GPU 1 only; GPU 0 runs at 90
    assert util["gpu_percentages"]["max_hardware_percent"] == 30
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    assert gpus[GPU1]["counted"] is True
    assert gpus[GPU0]["counted"] is False
    assert any(f"GPUs counted for utilization: 1 (CUDA_VISIBLE_DEVICES={GPU1} (" in n for n in rep["notes"])
    # memory is the tree's on every GPU, counted or not
    assert rep["max_gpu_ram"]["combined"] == 4000 * MiB
    text = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "sessions", "show", rep["session_id"]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "not counted" in text.stdout + text.stderr


@pytest.mark.parametrize(
    ("prefix", "counted", "util"),
    [
        # a job script that exports the variable, then execs the program (the SLURM pattern)
        (["bash", "-c", f'export CUDA_VISIBLE_DEVICES={GPU1}; exec "$@"', "bash"], [False, True], 30),
        # env(1) setting it for the program
        (["env", "CUDA_VISIBLE_DEVICES=0"], [True, False], 90),
    ],
    ids=["bash-export", "env"],
)
def test_gpus_counted_follow_the_jobs_own_cuda_visible_devices(
    tmp_path: Path,
    fake_lib: Path,
    fake: FakeNvml,
    prefix: list[str],
    counted: list[bool],
    util: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Our own environment has no CUDA_VISIBLE_DEVICES; the job sets it for itself."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _, rep, _, _ = run_holding_memory(tmp_path, fake_lib, fake, command_prefix=prefix)
    assert [g["counted"] for g in rep["gpus"]] == counted
    assert rep["gpu_utilization"]["n_expected_gpus"] == 1
    assert rep["gpu_utilization"]["gpu_percentages"]["max_sum_percent"] == util
    note = next(n for n in rep["notes"] if n.startswith("GPUs counted for utilization"))
    assert "set by the job" in note or "first on a GPU" in note, note


@pytest.mark.parametrize(
    ("job_env", "what"),
    [
        ({"SLURM_JOB_GPUS": "1"}, "index"),  # SLURM's global index (NVML sees both GPUs: no device constraint)
        ({"SLURM_STEP_GPUS": GPU1, "SLURM_JOB_GPUS": "0,1"}, "uuid"),  # the step's own GPUs win over the job's
    ],
    ids=["job-gpus-index", "step-gpus-uuid"],
)
def test_job_given_one_of_two_gpus_efficiency_over_that_one(
    tmp_path: Path, fake_lib: Path, fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, job_env: dict[str, str], what: str
) -> None:
    """The request records the GPUs SLURM gave the job by UUID, and gpu_memory / gpu_utilization are
    fractions of exactly those, whatever the tree holds on others (here 1000 MiB on GPU 0, 3000 MiB on GPU 1)."""
    for k in [k for k in os.environ if k.startswith("SLURM")] + ["CUDA_VISIBLE_DEVICES"]:
        monkeypatch.delenv(k, raising=False)
    env = {"SLURM_JOB_ID": "4242", "SLURM_MEM_PER_NODE": "4096", "SLURM_CPUS_PER_TASK": "1", **job_env}
    _, rep, _, _ = run_holding_memory(tmp_path, fake_lib, fake, env={**env, "PATH": os.environ["PATH"]})
    requested = rep["slurm"]["requested"]
    assert requested["gpu_ids"] == job_env.get("SLURM_STEP_GPUS", job_env.get("SLURM_JOB_GPUS")).split(",")
    assert requested["gpu_uuids"] == [GPU1]
    assert [g["counted"] for g in rep["gpus"]] == [True, True]  # utilization counts both: nothing selects
    eff = rep["efficiency"]
    assert eff["gpu_memory"] == pytest.approx(3000 * MiB / (80 * 1024**3))  # GPU 1's tree peak of its 80 GiB
    assert eff["gpu_utilization"] == pytest.approx(0.30)  # GPU 1 runs at 30 %, GPU 0 at 90
    shown = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "sessions", "show", rep["session_id"]],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert f"job's GPUs    {GPU1}" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.parametrize(("flag", "counted"), [([], [True, False]), (["--gpus", "0,7,1"], [True, True])])
def test_invalid_entry_of_cuda_visible_devices_hides_the_rest(
    tmp_path: Path, fake_lib: Path, fake: FakeNvml, flag: list[str], counted: list[bool]
) -> None:
    """CUDA sees only the devices before an entry that names none: `0,7,1` on two GPUs is GPU 0 alone, and GPU 1
    (another job's, perhaps) is not counted; `--gpus 0,7,1` is the user's own list: the bad item is skipped."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_lib.parent), CONFIG_ENV: str(fake.path)}
    env["CUDA_VISIBLE_DEVICES"] = "0,7,1"
    out = tmp_path / "r.json"
    p = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(out), "--interval", "0.1",
         *flag, "--", "sleep", "0.3"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rep = json.loads(out.read_text())
    assert [g["counted"] for g in rep["gpus"]] == counted
    assert any("'7' matches no GPU" in n for n in rep["notes"]), rep["notes"]


def test_short_uuid_and_gpus_flag(tmp_path: Path, fake_lib: Path, fake: FakeNvml) -> None:
    """--gpus takes the short UUID form CUDA_VISIBLE_DEVICES takes, and wins over the variable."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_lib.parent), CONFIG_ENV: str(fake.path)}
    env["CUDA_VISIBLE_DEVICES"] = GPU1
    out = tmp_path / "r.json"
    p = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(out), "--interval", "0.1",
         "--gpus", "0a0a0a0a", "--", "sleep", "0.3"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rep = json.loads(out.read_text())
    assert [g["counted"] for g in rep["gpus"]] == [True, False]
    assert rep["gpu_utilization"]["gpu_percentages"]["max_sum_percent"] == 90


def test_gpu_lost_mid_run_is_reported_and_run_completes(tmp_path: Path, fake_lib: Path, fake: FakeNvml) -> None:
    run = Run(tmp_path, fake_lib, fake)
    main, child = run.pids()
    hold_memory(fake, main, child)
    time.sleep(SETTLE)
    fake.devices[1]["lost"] = 1
    fake.write()
    time.sleep(0.5)
    code, err, rep = run.finish()
    assert code == 7, err
    assert "Traceback" not in err
    assert rep["status"] == "exited"
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    assert gpus[GPU1]["lost"] is True
    assert gpus[GPU0]["lost"] is False
    assert gpus[GPU1]["tree_peak_memory"] == 3000 * MiB  # what was seen before it fell off the bus
    assert rep["max_gpu_ram"]["main"] == 1000 * MiB
    assert any("was lost during the run" in n and GPU1 in n for n in rep["notes"])
    assert any("GPU is lost" in n for n in rep["notes"])
    assert rep["n_samples"] > 20  # tracking went on at 0.1 s after the loss


def test_no_nvidia_library_costs_nothing_and_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "nolib"
    empty.mkdir()
    env = {**os.environ, "LD_LIBRARY_PATH": str(empty)}
    env.pop(CONFIG_ENV, None)
    probe_lib = [sys.executable, "-c", "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"]
    if subprocess.run(probe_lib, env=env, capture_output=True, timeout=30).returncode == 0:
        pytest.skip("a real libnvidia-ml.so.1 is installed on this machine")
    p = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "--headless", "--", "sh", "-c", "exit 3"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert p.returncode == 3
    assert "Traceback" not in p.stderr
    assert "no NVIDIA GPU found (NVIDIA driver library libnvidia-ml.so.1 not found)" in p.stderr
    # the probe itself: no pynvml import, no NVML call when the library is absent
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys, time\nfrom gputop_tracker.core.gpu.nvidia import open_nvidia as open_backend\n"
         "t = time.perf_counter(); b = open_backend(); dt = time.perf_counter() - t\n"
         "print(dt, 'pynvml' in sys.modules, type(b).__name__)"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    dt, imported, kind = probe.stdout.split()
    assert kind == "NoGpuBackend"
    assert imported == "False"
    assert float(dt) < 0.01


def test_driver_not_loaded_is_a_one_line_note(tmp_path: Path, fake_lib: Path) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_lib.parent), CONFIG_ENV: str(tmp_path / "missing.conf")}
    p = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "--headless", "--", "true"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert p.returncode == 0
    assert "no NVIDIA GPU found (NVIDIA driver not loaded)" in p.stderr
    assert "Traceback" not in p.stderr


# ------------------------------------------------------------------ the backend in-process


@pytest.fixture
def nvml(fake_lib: Path, tmp_path: Path) -> Iterator[tuple[Any, FakeNvml]]:
    cfg = FakeNvml(tmp_path / "nvml.conf", two_gpus())
    with loaded_in_process(fake_lib, cfg.path) as pynvml:
        yield pynvml, cfg


def backend(**kw: Any) -> Any:
    from gputop_tracker.core.gpu.nvidia import NvmlBackend
    from gputop_tracker.core.gpu.pidns import PidMapper

    b = NvmlBackend(pid_mapper=PidMapper(namespaced=False), **kw)
    b._procs_due = 0.0
    return b


def test_backend_reads_every_device_field(nvml: tuple[Any, FakeNvml]) -> None:
    _, cfg = nvml
    cfg.devices[1].update(fan=55, temp=61, reserved=300 * MiB, memutil=12)
    cfg.devices[0]["fan"] = "NA"
    cfg.write()
    b = backend()
    try:
        r0, r1 = b.read([])
        assert (r0.index, r0.uuid, r0.name) == (0, GPU0, "Fake H100 80GB HBM3")
        assert r1.pci_bus_id == "00000000:3B:00.0"
        assert r1.memory_total == 80 * 1024**3
        assert r1.memory_used == 4000 * MiB
        assert r1.memory_reserved == 300 * MiB  # the v2 struct
        assert (r1.utilization_gpu, r1.utilization_memory) == (30.0, 12.0)
        assert r1.temperature_c == 61.0
        assert (r1.power_w, r1.power_limit_w) == (150.0, 700.0)
        assert (r1.clock_sm_mhz, r1.clock_memory_mhz) == (1980.0, 2619.0)
        assert r1.fan_percent == 55.0
        assert r0.fan_percent is None  # NotSupported: absent
        assert r1.energy_mj is not None and r1.energy_mj >= 5_000_000
        assert r1.sm_activity is None
    finally:
        b.close()


def test_backend_energy_grows_with_power(nvml: tuple[Any, FakeNvml]) -> None:
    b = backend()
    try:
        e0 = b.read([])[0].energy_mj
        time.sleep(0.3)
        assert b.read([])[0].energy_mj is None  # a slow counter: read at most every ENERGY_PERIOD
        assert b.read_energy()[0] > e0
        b._energy_due = 0.0
        e1 = b.read([])[0].energy_mj
        assert e0 is not None and e1 is not None
        assert (e1 - e0) / 1000 == pytest.approx(300 * 0.3, rel=0.3)  # 300 W for 0.3 s
    finally:
        b.close()


def test_backend_gpm_metrics_where_supported(nvml: tuple[Any, FakeNvml]) -> None:
    _, cfg = nvml
    cfg.devices[0].update(gpm=1, sm_act=37, sm_occ=21, tensor=8, dram_bw="NA")
    cfg.write()
    b = backend()
    try:
        first = b.read([])[0]
        assert first.sm_activity is None  # GPM needs two samples
        b._procs_due = 0.0  # GPM is read at most once a second
        r0, r1 = b.read([])
        assert (r0.sm_activity, r0.sm_occupancy, r0.tensor_activity) == (37.0, 21.0, 8.0)
        assert r0.dram_bandwidth is None  # the metric failed: absent, not zero
        assert r1.sm_activity is None and r1.sm_occupancy is None  # no GPM on this GPU
    finally:
        b.close()


def test_backend_processes_and_process_utilization_last_seen(nvml: tuple[Any, FakeNvml]) -> None:
    _, cfg = nvml
    me = os.getpid()
    cfg.processes = [{"dev": 0, "pid": me, "mem": 1000 * MiB}, {"dev": 1, "pid": me, "mem": 24 * MiB, "graphics": 1}]
    cfg.procutils = [{"dev": 0, "pid": me, "sm": 77, "mem": 5}]
    cfg.write()
    b = backend()
    try:
        r, r1 = b.read([me])
        assert r.processes == {me: 1000 * MiB}
        assert r1.processes == {me: 24 * MiB}  # the graphics list is read too
        assert r.process_sm_util == {me: 77.0}
        assert r.process_memory_util == {me: 5.0}
        b._procs_due = 0.0
        again = b.read([me])[0]
        assert again.process_sm_util == {}  # nothing newer than the kept timestamp (NOT_FOUND)
        assert again.processes == {me: 1000 * MiB}
        time.sleep(0.01)
        cfg.procutils = [{"dev": 0, "pid": me, "sm": 12, "mem": 1}]
        cfg.write()
        b._procs_due = 0.0
        assert b.read([me])[0].process_sm_util == {me: 12.0}
    finally:
        b.close()


def test_running_processes_query_runs_at_its_own_rate(nvml: tuple[Any, FakeNvml]) -> None:
    _, cfg = nvml
    b = backend()
    try:
        me = os.getpid()
        b.read([me])  # the slow queries ran; next due in PROCESS_PERIOD
        cfg.processes = [{"dev": 0, "pid": me, "mem": 5 * MiB}]
        cfg.write()
        assert b.read([me])[0].processes == {}  # too soon: the cached list
        b._procs_due = 0.0
        assert b.read([me])[0].processes == {me: 5 * MiB}
        assert b.process_query_s > 0
    finally:
        b.close()


def test_backend_errors_degrade_cleanly(nvml: tuple[Any, FakeNvml]) -> None:
    pynvml, cfg = nvml
    cfg.devices[1]["lost_after"] = 40
    cfg.errors = [
        {"fn": "nvmlDeviceGetPowerUsage", "dev": 0, "code": pynvml.NVML_ERROR_NO_PERMISSION},
        {"fn": "nvmlDeviceGetUtilizationRates", "dev": 0, "code": pynvml.NVML_ERROR_NOT_SUPPORTED},
        {"fn": "nvmlDeviceGetTemperature", "dev": 0, "code": pynvml.NVML_ERROR_UNKNOWN},
    ]
    cfg.write()
    b = backend()
    try:
        r0, r1 = b.read([])
        assert r0.power_w is None and r0.utilization_gpu is None and r0.temperature_c is None
        assert r0.memory_used == 2000 * MiB  # the rest of the device still reads
        assert any("no permission" in p and "PowerUsage" in p for p in b.problems)
        assert not r1.lost
        lost_at = None
        for i in range(40):
            if b.read([])[1].lost:
                lost_at = i
                break
        assert lost_at is not None
        r0, r1 = b.read([])
        assert r1.lost and r1.memory_used is None
        assert not r0.lost and r0.memory_used == 2000 * MiB
        assert any("GPU is lost" in p for p in b.problems)
    finally:
        b.close()


def test_library_mismatch_is_not_an_nvml_error(nvml: tuple[Any, FakeNvml]) -> None:
    pynvml, _ = nvml
    b = backend()

    def unversioned(_h: object) -> None:
        raise pynvml.NVMLLibraryMismatchError("unversioned wrapper")

    try:
        assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)
        assert b._get(unversioned, None) is None
    finally:
        b.close()


def test_init_failure_gives_a_note(nvml: tuple[Any, FakeNvml]) -> None:
    from gputop_tracker.core.gpu import NoGpuBackend
    from gputop_tracker.core.gpu.nvidia import open_nvidia as open_backend

    pynvml, cfg = nvml
    cfg.errors = [{"fn": "nvmlInitWithFlags", "dev": -1, "code": pynvml.NVML_ERROR_NO_PERMISSION}]
    cfg.write()
    b = open_backend()
    assert isinstance(b, NoGpuBackend)
    assert b.note == "no NVIDIA GPU found (no permission to use NVML)"
    cfg.errors = [{"fn": "nvmlInitWithFlags", "dev": -1, "code": pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH}]
    cfg.write()
    b = open_backend()
    assert isinstance(b, NoGpuBackend)
    assert b.note is not None and "driver was updated and the machine not rebooted" in b.note


def test_mig_devices_have_their_own_memory_and_instance_ids(nvml: tuple[Any, FakeNvml]) -> None:
    from gputop_tracker.core.gpu import resolve_gpu_selection

    _, cfg = nvml
    me = os.getpid()
    cfg.devices[0]["mig"] = 1
    cfg.migs = [
        {"parent": 0, "uuid": "MIG-aaaa-0", "total": 10 * 1024**3, "used": 600 * MiB, "gi": 1, "ci": 0},
        {"parent": 0, "uuid": "MIG-aaaa-1", "total": 20 * 1024**3, "used": 100 * MiB, "gi": 2, "ci": 0},
    ]
    cfg.processes = [{"dev": 0, "mig": 0, "pid": me, "mem": 500 * MiB}]
    cfg.write()
    b = backend()
    try:
        readings = b.read([me])
        assert [r.index for r in readings] == [0, 1, 2, 3]
        parent, _gpu1, m0, m1 = readings
        assert parent.processes == {}  # read on the MIG device, not twice
        assert (m0.mig_parent, m0.gpu_instance_id, m0.compute_instance_id) == (0, 1, 0)
        assert (m0.memory_total, m0.memory_used) == (10 * 1024**3, 600 * MiB)
        assert m0.processes == {me: 500 * MiB}
        assert m0.process_instances == {me: (1, 0)}
        assert m1.memory_total == 20 * 1024**3 and m1.processes == {}
        assert m0.utilization_gpu is None  # not supported on MIG: absent
        chosen, problems = resolve_gpu_selection(readings, "MIG-aaaa-1")
        assert chosen == {"MIG-aaaa-1"} and not problems
        chosen, _ = resolve_gpu_selection(readings, "2")  # indices name physical GPUs only
        assert chosen == set()
    finally:
        b.close()


def test_process_in_both_lists_counts_once(nvml: tuple[Any, FakeNvml]) -> None:
    """A process with a compute and a graphics context (nvidia-smi's C+G) is in both lists with its whole figure:
    summed, the tree's "lower bound" would be twice the truth."""
    _, cfg = nvml
    me = os.getpid()
    cfg.processes = [{"dev": 0, "pid": me, "mem": 1000 * MiB, "graphics": 2}, {"dev": 0, "pid": 1, "mem": MiB}]
    cfg.write()
    b = backend()
    try:
        b.start_watch(50)
        assert b.read([me])[0].processes == {me: 1000 * MiB, 1: MiB}
        b.stop_watch()
        b.watcher = None
        b._procs_due = 0.0
        assert b.read([me])[0].processes == {me: 1000 * MiB, 1: MiB}
    finally:
        b.close()


def test_memory_not_available_is_noted_not_a_silent_zero(nvml: tuple[Any, FakeNvml]) -> None:
    """usedGpuMemory = NVML_VALUE_NOT_AVAILABLE (MIG, some containers, WDDM): the process is on the GPU, its
    figure unknown; the report says so for that GPU (only for the tree's processes)."""
    _, cfg = nvml
    me = os.getpid()
    cfg.processes = [{"dev": 0, "pid": me, "mem": "NA"}, {"dev": 1, "pid": me, "mem": 3000 * MiB},
                     {"dev": 1, "pid": 1, "mem": "NA"}]  # fmt: skip
    cfg.write()
    b = backend()
    try:
        r0, r1 = b.read([me])
        assert r0.processes == {me: 0} and r1.processes[me] == 3000 * MiB
        assert r0.no_figure == {me} and r1.no_figure == {1}
        lines = [p for p in b.problems if "N/A" in p]
        assert len(lines) == 1 and lines[0].startswith("GPU 0:") and "lower bound" in lines[0], b.problems
    finally:
        b.close()


def test_the_label_says_which_gpus_the_watcher_does_not_read(nvml: tuple[Any, FakeNvml]) -> None:
    """`--gpus 0` while the job also holds memory on GPU 1: the watcher reads GPU 0 at 50 Hz, GPU 1 once a second;
    the figures' label must not promise 50 Hz for GPU 1."""
    b = backend()
    try:
        b.start_watch(50)
        assert "not counted" not in b.memory_source()
        b.set_counted({GPU0})
        assert b.memory_source().endswith("; GPU 1 (not counted): at most every 1 s")
    finally:
        b.close()


def test_a_gpu_without_process_lists_is_noted_not_a_silent_zero(nvml: tuple[Any, FakeNvml]) -> None:
    """An old GPU (or a driver that refuses) answers NOT_SUPPORTED to both running-process queries: the tree's
    memory there is unknown, and the report says so for that GPU only."""
    _, cfg = nvml
    me = os.getpid()
    cfg.processes = [{"dev": 0, "pid": me, "mem": 100 * MiB}, {"dev": 1, "pid": me, "mem": 3000 * MiB}]
    cfg.errors = [
        {"fn": f"nvmlDeviceGet{kind}RunningProcesses_v3", "dev": 1, "code": 3} for kind in ("Compute", "Graphics")
    ]
    cfg.write()
    b = backend()
    try:
        r0, r1 = b.read([me])
        assert r0.processes == {me: 100 * MiB} and r1.processes == {}
        lines = [p for p in b.problems if "no list of the processes" in p]
        assert len(lines) == 1 and lines[0].startswith("GPU 1:") and "lower bound" in lines[0], b.problems
    finally:
        b.close()


def test_container_pids_unmapped_are_reported_unattributed(nvml: tuple[Any, FakeNvml]) -> None:
    from gputop_tracker.core.gpu.nvidia import NvmlBackend
    from gputop_tracker.core.gpu.pidns import PidMapper

    _, cfg = nvml
    cfg.processes = [
        {"dev": 0, "pid": 4242, "mem": 900 * MiB},  # host PID of our process, visible through NSpid
        {"dev": 1, "pid": 5353, "mem": 700 * MiB},  # a host PID nothing here maps
    ]
    cfg.write()
    nspid = {12: [4242, 12], 13: [13]}
    b = NvmlBackend(pid_mapper=PidMapper(namespaced=True, nspid=lambda pid: nspid.get(pid, [])))
    try:
        r0, r1 = b.read([12, 13])
        assert r0.processes == {12: 900 * MiB}
        assert r0.unattributed_memory is None
        assert r1.processes == {}
        assert r1.unattributed_memory == 700 * MiB
        assert any("PID namespace" in p for p in b.problems)
    finally:
        b.close()


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=10)
    return p.returncode == 0


def _host_pid(ns_pid: int, marker: str) -> int:
    """The host PID of a process in a child PID namespace: NSpid ends with its namespace PID."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if len(nspid) > 1 and int(nspid[-1]) == ns_pid and marker.encode() in cmdline:
            return int(entry.name)
    raise AssertionError(f"no host process for namespace pid {ns_pid}")


def test_in_a_pid_namespace_host_pids_are_unattributed_not_zero(tmp_path: Path, fake_lib: Path, fake: FakeNvml) -> None:
    """The tracker in a container (its own PID namespace and /proc): NVML's host PIDs cannot be mapped."""
    if not _unshare_works():
        pytest.skip("cannot create a PID namespace here (unshare needs root or user namespaces)")
    run = Run(tmp_path, fake_lib, fake, wrap=["unshare", "--pid", "--fork", "--mount-proc"])
    main, child = run.pids()
    host_main, host_child = _host_pid(main, str(run.pidfile)), _host_pid(child, str(run.done))
    assert (host_main, host_child) != (main, child)
    hold_memory(fake, host_main, host_child)
    time.sleep(SETTLE)
    code, err, rep = run.finish()
    assert code == 7, err
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    assert rep["max_gpu_ram"]["combined"] == 0
    assert gpus[GPU0]["peak_unattributed_memory"] == 1000 * MiB
    assert gpus[GPU1]["peak_unattributed_memory"] == (3000 + 777) * MiB
    assert any("PID namespace" in n and "unattributed" in n for n in rep["notes"])


def test_a_job_whose_gpu_memory_nvml_does_not_give_is_advised_a_gpu(
    tmp_path: Path, fake_lib: Path, fake: FakeNvml
) -> None:
    """Under MIG or in some containers NVML lists the job's processes with usedGpuMemory N/A: its GPU memory
    counts 0. `advise` took 0 for 'no GPU used' and told the user to request none (the job would then fail).
    The report now says the tree was on the GPU with no figure, and the advice keeps the GPU."""
    run = Run(tmp_path, fake_lib, fake)
    main, _child = run.pids()
    fake.processes = [{"dev": 0, "pid": main, "mem": "NA"}, {"dev": 1, "pid": 1, "mem": 777 * MiB}]
    fake.write()
    time.sleep(SETTLE)
    code, err, rep = run.finish()
    assert code == 7, err
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    assert gpus[GPU0]["tree_used"] is True and gpus[GPU0]["tree_memory_unknown"] is True
    assert gpus[GPU1]["tree_used"] is False and gpus[GPU1]["tree_memory_unknown"] is False  # pid 1 is not ours
    assert rep["max_gpu_ram"]["combined"] == 0
    a = advise([rep])
    assert a["gpus"] == 1 and "#SBATCH --gres=gpu:1" in a["sbatch"], a
    assert not any("request none" in n or "MIG slice would do" in n for n in a["notes"]), a["notes"]
    assert any("floor" in n for n in a["notes"]) and a["basis"]["gpu_memory"].endswith("a lower bound")
    eff = efficiency.fractions(rep, {"gpus": 1})
    assert not any("did not use the GPU" in n for n in efficiency.notes(rep, {"gpus": 1}, eff))
