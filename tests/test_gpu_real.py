"""Tracking a real CUDA workload (PyTorch) on a real NVIDIA GPU. Skipped without one.

Run on a GPU machine with `pytest -m gpu tests/test_gpu_real.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

GiB = 1024**3


def _first_gpu_uuid() -> str | None:
    """The first GPU's UUID if NVML initialises and sees one, else None."""
    if shutil.which("nvidia-smi") is None and not Path("/proc/driver/nvidia").exists():
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() < 1:
                return None
            return str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)))
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


@pytest.fixture(scope="module")
def gpu_uuid() -> str:
    uuid = _first_gpu_uuid()
    if uuid is None:
        pytest.skip("no NVIDIA GPU (NVML does not initialise or sees no device)")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return uuid


# Allocates ~4 GiB, records what PyTorch reserved, then keeps the GPU busy with matmuls.
WORKLOAD = r"""
import json, sys, time, torch
out, seconds = sys.argv[1], float(sys.argv[2])
x = torch.empty(4 * 1024**3 // 4, dtype=torch.float32, device="cuda")
a = torch.randn(8192, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")
torch.cuda.synchronize()
end = time.time() + seconds
n = 0
while time.time() < end:
    c = a @ b
    n += 1
    if n % 10 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
json.dump({"reserved": torch.cuda.max_memory_reserved(), "matmuls": n, "device_used": total - free}, open(out, "w"))
"""


def track_cuda(tmp_path: Path, gpu_uuid: str, seconds: float = 6.0) -> tuple[dict[str, Any], dict[str, Any]]:
    out = tmp_path / "report.json"
    facts = tmp_path / "facts.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu_uuid}
    p = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(out),
         "--gru", "bytes", "--tu", "seconds", "--interval", "0.2",
         "--", sys.executable, "-c", WORKLOAD, str(facts), str(seconds)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text()), json.loads(facts.read_text())


def test_real_cuda_workload(tmp_path: Path, gpu_uuid: str) -> None:
    rep, facts = track_cuda(tmp_path, gpu_uuid)
    print("report GPU figures:", json.dumps({k: rep[k] for k in ("max_gpu_ram", "gpu_utilization", "gpu_energy_j")}))
    print("workload:", facts)
    gpus = {g["uuid"]: g for g in rep["gpus"]}
    g = gpus[gpu_uuid]
    assert g["vendor"] == "nvidia"
    # per-process memory = what PyTorch reserved + the CUDA context (a few hundred MiB; < 1.5 GiB)
    main = rep["max_gpu_ram"]["main"]
    assert facts["reserved"] <= main <= facts["reserved"] + 1.5 * GiB
    assert g["tree_peak_memory"] == main
    # only the GPU named by CUDA_VISIBLE_DEVICES counts, resolved by UUID
    assert rep["gpu_utilization"]["n_expected_gpus"] == 1
    assert g["counted"] is True
    assert g["max_utilization"] > 50  # a matmul loop keeps a kernel running
    assert rep["gpu_utilization"]["gpu_percentages"]["max_sum_percent"] > 0
    assert g["energy_j"] is not None and g["energy_j"] > 0
    assert rep["gpu_energy_j"] == pytest.approx(g["energy_j"])
    assert rep["gpu_energy_wh"] == pytest.approx(g["energy_j"] / 3600)
    if g["tree_peak_sm_utilization"] is not None:
        assert g["tree_peak_sm_utilization"] > 0
    if g["mean_sm_activity"] is not None:  # GPM (Hopper and newer)
        assert g["max_sm_activity"] > 0


def test_real_backend_fields(gpu_uuid: str) -> None:
    from gputop_tracker.core.gpu.backend import NvmlBackend

    b = NvmlBackend()
    try:
        r = next(x for x in b.read([]) if x.uuid == gpu_uuid)
        assert r.memory_total and r.memory_total > GiB
        assert r.memory_used is not None and r.pci_bus_id
        assert r.utilization_gpu is not None and r.temperature_c is not None
        assert r.power_w is not None and r.power_w > 0
        assert r.clock_sm_mhz is not None and r.clock_sm_mhz > 0
    finally:
        b.close()
