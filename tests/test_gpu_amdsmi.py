"""AMD GPUs end to end through a stand-in libamd_smi.so (tests/fakeamdsmi) and the real `amdsmi` package.

The stand-in is generated from the installed amdsmi wrapper (every symbol it binds; struct layouts read from
its ctypes structures), compiled with gcc, and found as under ROCm: `$ROCM_PATH/lib/libamd_smi.so`. The test
rewrites its config once the workload's real PIDs are known.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeamdsmi.fake import CONFIG_ENV, FakeAmdSmi, MiB, build, device, env_for
from fakeamdsmi.gen import wrapper_path
from helpers import build_or_skip, parent_child_workload, wait_pids

if importlib.util.find_spec("amdsmi") is None:  # not imported here: without its library it prints and fails
    pytest.skip("the amdsmi package (the `amd` / `test` extra) is not installed", allow_module_level=True)

GPU0 = "00ff74a1-0000-1000-8000-0000000000a0"
GPU1 = "00ff74a1-0000-1000-8000-0000000000a1"
HIP1 = "GPU-5bd3c2c3e1a9f0b1"

# main holds "GPU 0" memory, its child "GPU 1" memory; both wait for the test to say done
WORKLOAD = parent_child_workload(last_words='print("the job\'s own output")\n')

LOG_ENV = "FAKE_AMDSMI_LOG"  # the stand-in logs what it served: tests wait on it, not on the clock


def wait_logged(log: Path, needle: str, times: int = 2, deadline_s: float = 60) -> None:
    """Until the stand-in has logged `needle` `times` times since the log was (re)started."""
    deadline = time.monotonic() + deadline_s
    while (log.read_text().count(needle) if log.exists() else 0) < times:
        assert time.monotonic() < deadline, f"the tracker never read {needle!r} {times} times"
        time.sleep(0.05)


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_or_skip(build, tmp_path_factory.mktemp("fakeamdsmi"), "the stand-in libamd_smi.so")


def two_gpus(**gpu1: Any) -> list[dict[str, Any]]:
    return [
        device(
            uuid=GPU0, bdf="0000:0c:00.0", used=2000 * MiB, gfx=90, umc=40, power_w=300, hip_uuid="GPU-0a0a0a0a0a0a0a0a"
        ),
        device(uuid=GPU1, bdf="0000:22:00.0", used=4000 * MiB, gfx=30, umc=10, power_w=150, hip_uuid=HIP1, **gpu1),
    ]


@pytest.fixture
def fake(tmp_path: Path) -> FakeAmdSmi:
    return FakeAmdSmi(tmp_path / "amdsmi.conf", two_gpus())


def hold_memory(fake: FakeAmdSmi, main: int, child: int) -> None:
    fake.processes = [
        {"dev": 0, "pid": main, "vram": 1000 * MiB, "gtt": 5 * MiB},
        {"dev": 1, "pid": child, "vram": 3000 * MiB},
        {"dev": 1, "pid": 1, "vram": 777 * MiB},  # not ours: never counted for the tree
    ]
    fake.write()


def wrapper_binds(symbol: str) -> bool:
    """Whether the installed amdsmi binds this library function (some came with later releases)."""
    path = wrapper_path()
    return path is not None and f".{symbol}\n" in path.read_text()


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_VISIBLE_DEVICES")}
    for k in ("ROCM_PATH", "ROCM_HOME", CONFIG_ENV, "FAKE_AMDSMI_PRINT"):
        env.pop(k, None)
    return {**env, **extra}


class Run:
    """The real CLI tracking WORKLOAD, the JSON report on stdout, the stand-in found through ROCM_PATH."""

    def __init__(self, tmp_path: Path, env: dict[str, str], extra: tuple[str, ...] = ()) -> None:
        self.pidfile = tmp_path / "pids"
        self.done = tmp_path / "done"
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "--gru", "bytes",
                "--tu", "seconds", "--interval", "0.1", *extra,
                "--", sys.executable, "-c", WORKLOAD, str(self.pidfile), str(self.done),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def pids(self) -> tuple[int, int]:
        return wait_pids(self.pidfile, self.proc, timeout=30)

    def finish(self) -> tuple[int, str, dict[str, Any]]:
        self.done.write_text("")
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 7, err
        assert "Traceback" not in err
        assert "the job's own output" in err  # the job's stdout went to stderr: stdout is the report alone
        return self.proc.returncode, err, json.loads(out)  # the whole of stdout is one JSON document


def run_tracked(tmp_path: Path, fake_lib: Path, fake: FakeAmdSmi, **env: str) -> tuple[str, dict[str, Any], int, int]:
    log = tmp_path / "served.log"
    run = Run(tmp_path, clean_env(**env_for(fake_lib, fake.path), **{LOG_ENV: str(log)}, **env))
    main, child = run.pids()
    hold_memory(fake, main, child)
    wait_logged(log, "procs 0 1\n")  # two process lists read with main's memory in them
    wait_logged(log, "procs 1 2\n")
    _, err, rep = run.finish()
    return err, rep, main, child


def test_tree_gpu_memory_exact_through_stand_in_amdsmi(tmp_path: Path, fake_lib: Path, fake: FakeAmdSmi) -> None:
    # a chatty library: what amdsmi_init prints must not reach the JSON on stdout
    err, rep, main, child = run_tracked(tmp_path, fake_lib, fake, FAKE_AMDSMI_PRINT="amd-smi banner on stdout")
    g = rep["max_gpu_ram"]
    assert g["unit"] == "bytes"
    assert g["main"] == 1000 * MiB
    assert g["descendants"] == 3000 * MiB
    assert g["combined"] == 4000 * MiB
    assert g["system"] == 6000 * MiB  # Σ VRAM used of both devices, every process
    assert g["system_capacity"] == 2 * 192 * 1024**3
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    assert {x["vendor"] for x in rep["gpus"]} == {"amd"}
    assert gpus[GPU0]["name"] == "AMD Instinct MI300X"
    assert gpus[GPU0]["tree_peak_memory"] == 1000 * MiB
    assert gpus[GPU1]["tree_peak_memory"] == 3000 * MiB
    assert gpus[GPU0]["pci_bus_id"] == "0000:0c:00.0"
    assert gpus[GPU0]["max_utilization"] == 90
    assert gpus[GPU0]["max_power_w"] == 300.0
    assert gpus[GPU0]["max_temperature_c"] == 45  # no edge sensor (as on an MI300X): the hotspot
    procs = {p["pid"]: p for p in rep["processes"]}
    assert procs[main]["peak_gpu_memory"] == 1000 * MiB
    assert procs[child]["peak_gpu_memory"] == 3000 * MiB
    # energy from the counter: 300 W and 150 W over the run
    assert gpus[GPU0]["energy_j"] == pytest.approx(2 * gpus[GPU1]["energy_j"], rel=0.05)
    assert rep["gpu_utilization"]["n_expected_gpus"] == 2
    assert rep["gpu_utilization"]["gpu_percentages"]["max_sum_percent"] == 120
    assert "banner" not in err
    # the text report names the vendor of each GPU
    text = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "sessions", "show", rep["session_id"]],
        capture_output=True, text=True, timeout=30, env=clean_env(),
    )  # fmt: skip
    assert text.stdout.count("vendor AMD") == 2, text.stdout + text.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"ROCR_VISIBLE_DEVICES": "1"},
        {"HIP_VISIBLE_DEVICES": HIP1},  # the GPU-<hex> UUID HIP and ROCr print
        {"ROCR_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "0"},  # HIP picks among what ROCr left
        {"CUDA_VISIBLE_DEVICES": "1"},  # HIP honours it too
    ],
    ids=["rocr-index", "hip-uuid", "rocr-then-hip", "cuda-under-hip"],
)
def test_rocm_visible_devices_count_only_that_gpu(
    tmp_path: Path, fake_lib: Path, fake: FakeAmdSmi, env: dict[str, str]
) -> None:
    if HIP1 in env.values() and not wrapper_binds("amdsmi_get_gpu_enumeration_info"):
        pytest.skip("this amdsmi has no enumeration info (HIP's UUID): before 6.4")
    _, rep, _, _ = run_tracked(tmp_path, fake_lib, fake, **env)
    util = rep["gpu_utilization"]
    assert util["system_gpu_count"] == 2
    assert util["n_expected_gpus"] == 1
    assert util["gpu_percentages"]["max_sum_percent"] == 30  # GPU 1 only; GPU 0 runs at 90
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    assert gpus[GPU1]["counted"] is True
    assert gpus[GPU0]["counted"] is False
    assert rep["max_gpu_ram"]["combined"] == 4000 * MiB  # memory is the tree's on every GPU, counted or not
    assert not any("GPU selection:" in n for n in rep["notes"]), rep["notes"]


def test_a_gpu_lost_mid_run(tmp_path: Path, fake_lib: Path, fake: FakeAmdSmi) -> None:
    log = tmp_path / "served.log"
    run = Run(tmp_path, clean_env(**env_for(fake_lib, fake.path), **{LOG_ENV: str(log)}))
    main, child = run.pids()
    hold_memory(fake, main, child)
    wait_logged(log, "procs 1 2\n")
    fake.devices[1]["lost"] = 1
    fake.write()
    wait_logged(log, "lost 1\n", times=1)  # the sample that found it lost is folded in before the run ends
    _, _, rep = run.finish()
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    assert gpus[GPU1]["lost"] is True
    assert gpus[GPU0]["lost"] is False
    assert gpus[GPU1]["tree_peak_memory"] == 3000 * MiB  # what was seen before stays
    assert rep["max_gpu_ram"]["combined"] == 4000 * MiB
    assert any(e["type"] == "gpu_lost" for e in rep["events"])
    assert any("GPU 1" in n and "stopped answering" in n for n in rep["notes"]), rep["notes"]


def _plain_run(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", *extra, "--", "sh", "-c", "echo hi; exit 3"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_no_library_the_run_is_unchanged(tmp_path: Path) -> None:
    empty = tmp_path / "norocm"
    (empty / "lib").mkdir(parents=True)
    env = clean_env(ROCM_PATH=str(empty), LD_LIBRARY_PATH=str(empty))
    probe = [sys.executable, "-c", "import ctypes; ctypes.CDLL('libamd_smi.so')"]
    if subprocess.run(probe, env=env, capture_output=True, timeout=30).returncode == 0:
        pytest.skip("a real libamd_smi.so is installed on this machine")
    p = _plain_run(env)
    assert p.returncode == 3
    assert "Traceback" not in p.stderr
    rep = json.loads(p.stdout)  # amdsmi's "Unable to find libamd_smi.so" never reaches stdout
    assert rep["gpus"] == []
    assert "AMD" not in (rep["gpu_note"] or "")  # auto: without ROCm, only the NVIDIA line, as before
    # asked for AMD: one line saying why not, the run goes on
    p = _plain_run(env, "--gpu-backend", "amd")
    assert p.returncode == 3
    rep = json.loads(p.stdout)
    assert rep["gpu_note"] == "no AMD GPU found (ROCm library libamd_smi.so not found)"
    # the probe: no amdsmi import when the library is absent (a dlopen per place amdsmi looks)
    probe_code = (
        "import sys, time\nfrom gputop_tracker.core.gpu.choose import open_backend\n"
        "t = time.perf_counter(); b = open_backend(); dt = time.perf_counter() - t\n"
        "print(dt, 'amdsmi' in sys.modules, type(b).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", probe_code], env=env, capture_output=True, text=True, timeout=30)
    _, imported, kind = out.stdout.split()
    assert (imported, kind) == ("False", "NoGpuBackend")  # its cost: bench/bench_amdsmi.py


def test_amdsmi_import_without_library_prints_nothing_to_stdout(tmp_path: Path) -> None:
    """amdsmi prints "Unable to find libamd_smi.so ..." on stdout, then fails: captured, never shown."""
    code = (
        "from gputop_tracker.core.gpu.amd import quiet_stdout\n"
        "seen = []\n"
        "try:\n"
        "    with quiet_stdout(seen):\n"
        "        import amdsmi\n"
        "except Exception as e:\n"
        "    failed = type(e).__name__\n"
        "import sys\n"
        "print('after', file=sys.stderr)\n"
        "sys.stderr.write(repr(seen) + failed + '\\n')\n"
    )
    env = clean_env(ROCM_PATH=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert p.stdout == ""
    assert "Unable to find" in p.stderr  # amdsmi's own words ("libamd_smi.so" or "amdsmi library")
    assert "KeyError" in p.stderr


def test_driver_not_loaded_and_backend_choice(tmp_path: Path, fake_lib: Path, fake: FakeAmdSmi) -> None:
    missing = tmp_path / "missing.conf"
    p = _plain_run(clean_env(**env_for(fake_lib, missing)), "--gpu-backend", "amd")
    assert p.returncode == 3 and "Traceback" not in p.stderr
    assert json.loads(p.stdout)["gpu_note"] == "no AMD GPU found (amdgpu driver not loaded)"
    # the stand-in has GPUs, but NVIDIA is asked for; none: no GPU read at all
    for choice, note in (("nvidia", "no NVIDIA GPU found"), ("none", "GPU tracking off (--gpu-backend none)")):
        p = _plain_run(clean_env(**env_for(fake_lib, fake.path)), "--gpu-backend", choice)
        rep = json.loads(p.stdout)
        assert rep["gpus"] == [], choice
        assert rep["gpu_note"].startswith(note), rep["gpu_note"]


# ------------------------------------------------------------------ the backend in-process


@pytest.fixture
def smi(fake_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, FakeAmdSmi]]:
    """amdsmi imported in this process against the stand-in (once per session: the wrapper binds its library
    at import), its config pointed at this test's file."""
    cfg = FakeAmdSmi(tmp_path / "amdsmi.conf", two_gpus())
    for k, v in env_for(fake_lib, cfg.path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("ROCM_HOME", raising=False)
    from gputop_tracker.core.gpu.amd import quiet_stdout

    with quiet_stdout([]):
        import amdsmi
    yield amdsmi, cfg


def backend(**kw: Any) -> Any:
    import amdsmi

    from gputop_tracker.core.gpu.amd import AmdSmiBackend
    from gputop_tracker.core.gpu.pidns import PidMapper

    return AmdSmiBackend(amdsmi, pid_mapper=kw.pop("pid_mapper", PidMapper(namespaced=False)))


def test_backend_reads_every_figure(smi: tuple[Any, FakeAmdSmi]) -> None:
    _, cfg = smi
    cfg.devices[0].update(temp_edge=51, partition="CPX", partition_id=3)
    cfg.processes = [{"dev": 0, "pid": 4242, "vram": 123 * MiB}, {"dev": 0, "pid": 4242, "vram": 1 * MiB}]
    cfg.write()
    t0 = time.monotonic()
    b = backend()
    try:
        r0, r1 = b.read([4242])
        grown = 300 * (time.monotonic() - t0) * 1000  # mJ the counter may have grown since amdsmi_init
        assert (r0.vendor, r0.uuid, r0.pci_bus_id) == ("amd", GPU0, "0000:0c:00.0")
        if wrapper_binds("amdsmi_get_gpu_kfd_info"):  # 6.4 and newer: the partition's id too
            assert r0.name == "AMD Instinct MI300X (CPX partition 3)"
        else:
            assert r0.name == "AMD Instinct MI300X (CPX partition)"
        if wrapper_binds("amdsmi_get_gpu_enumeration_info"):
            assert r0.alt_ids == ("GPU-0a0a0a0a0a0a0a0a",)
        assert r0.memory_used == 2000 * MiB and r0.memory_total == 192 * 1024**3
        assert (r0.utilization_gpu, r0.utilization_memory) == (90.0, 40.0)
        assert (r0.temperature_c, r1.temperature_c) == (51.0, 45.0)  # edge where there is one, else hotspot
        assert (r0.power_w, r0.power_limit_w) == (300.0, 750.0)
        assert (r0.clock_sm_mhz, r0.clock_memory_mhz) == (2100.0, 1300.0)
        start = 1_000_000 * 15.259 / 1000  # the counter's ticks × its resolution (µJ) → mJ
        assert r0.energy_mj is not None and start - 1 <= r0.energy_mj <= start + grown + 1
        assert r0.processes == {4242: 124 * MiB}  # VRAM only (not GTT), summed per process
        assert r1.processes == {} and not r1.lost
    finally:
        b.close()


def test_backend_falls_back_to_mib_and_marks_a_lost_gpu(smi: tuple[Any, FakeAmdSmi]) -> None:
    _, cfg = smi
    cfg.errors = [{"fn": "amdsmi_get_gpu_memory_usage", "dev": -1, "code": 2}]  # an older library: MiB only
    cfg.devices[0]["used"] = 2000 * MiB + 12345
    cfg.write()
    b = backend()
    try:
        r0, r1 = b.read([])
        assert r0.memory_used == 2000 * MiB  # amdsmi_get_gpu_vram_usage counts whole MiB
        cfg.devices[1]["lost"] = 1
        cfg.write()
        r0, r1 = b.read([])
        assert r1.lost and not r0.lost and r0.memory_used == 2000 * MiB
        assert any("GPU 1" in p and "stopped answering" in p for p in b.problems)
        assert b.read([])[1].lost  # stays lost: not queried again
    finally:
        b.close()


def test_processes_outside_our_pid_namespace_are_unattributed(smi: tuple[Any, FakeAmdSmi]) -> None:
    from gputop_tracker.core.gpu.pidns import PidMapper

    _, cfg = smi
    cfg.processes = [{"dev": 1, "pid": 90001, "vram": 64 * MiB}, {"dev": 1, "pid": 90002, "vram": 32 * MiB}]
    cfg.write()
    mapper = PidMapper(namespaced=True, nspid=lambda pid: {7: [90001, 7]}.get(pid, []))
    b = backend(pid_mapper=mapper)
    try:
        r1 = b.read([7])[1]
        assert r1.processes == {7: 64 * MiB}
        assert r1.unattributed_memory == 32 * MiB
    finally:
        b.close()


def test_open_amd_reasons(smi: tuple[Any, FakeAmdSmi], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop_tracker.core.gpu.amd import AmdSmiBackend, open_amd

    _, cfg = smi
    b = open_amd()
    assert isinstance(b, AmdSmiBackend) and not b.found_none()
    b.close()
    cfg.errors = [{"fn": "amdsmi_init", "dev": -1, "code": 10}]
    cfg.write()
    assert open_amd().note == "no AMD GPU found (no permission to use amdsmi)"
    cfg.errors, cfg.devices = [], []
    cfg.write()
    empty = open_amd()
    assert empty.found_none() and empty.note == "amdsmi found no AMD GPU"
    empty.close()
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "absent"))
    assert open_amd().note == "no AMD GPU found (amdgpu driver not loaded)"


def test_tracker_api_gpu_backend(tmp_path: Path, fake_lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop_tracker import Tracker

    cfg = FakeAmdSmi(tmp_path / "amdsmi.conf", two_gpus())
    cfg.processes = [{"dev": 0, "pid": os.getpid(), "vram": 500 * MiB}]
    cfg.write()
    log = tmp_path / "served.log"
    for k, v in {**env_for(fake_lib, cfg.path), LOG_ENV: str(log)}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match="gpu_backend must be one of auto, nvidia, amd, none"):
        Tracker(gpu_backend="rocm")
    with Tracker(sleep_time=0.1, gpu_ram_unit="bytes", gpu_backend="amd") as tracker:
        wait_logged(log, "procs 0 1\n")
    data = tracker.to_json()
    assert data["max_gpu_ram"]["main"] == 500 * MiB
    assert [g["vendor"] for g in data["gpus"]] == ["amd", "amd"]
    with Tracker(sleep_time=0.1, gpu_backend="none") as tracker:
        time.sleep(0.3)
    assert tracker.to_json()["gpus"] == []
