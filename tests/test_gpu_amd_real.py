"""Tracking a real ROCm workload (PyTorch built for ROCm) on a real AMD GPU. Skipped without one.

Run on an AMD GPU machine with `pytest -m amd tests/test_gpu_amd_real.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import TORCH_MATMUL_START

pytestmark = pytest.mark.amd

GiB = 1024**3


def _first_amd_uuid() -> str | None:
    """The first AMD GPU's UUID if ROCm's libamd_smi.so loads and amdsmi sees one, else None."""
    from gputop_tracker.core.gpu.amd import AmdSmiBackend, find_library, quiet_stdout

    if find_library() is None or not Path("/dev/kfd").exists():
        return None
    try:
        with quiet_stdout([]):
            import amdsmi

            b = AmdSmiBackend(amdsmi)
        try:
            readings = b.read([])
            return readings[0].uuid if readings else None
        finally:
            b.close()
    except Exception:
        return None


@pytest.fixture(scope="module")
def amd_uuid() -> str:
    uuid = _first_amd_uuid()
    if uuid is None:
        pytest.skip("no AMD GPU (libamd_smi.so absent, or amdsmi does not initialise or sees no device)")
    return uuid


def test_real_backend_fields(amd_uuid: str) -> None:
    import amdsmi

    from gputop_tracker.core.gpu.amd import AmdSmiBackend

    b = AmdSmiBackend(amdsmi)
    try:
        r = next(x for x in b.read([]) if x.uuid == amd_uuid)
        assert r.vendor == "amd" and r.name.startswith("AMD")
        assert r.memory_total and r.memory_total > GiB
        assert r.memory_used is not None and r.pci_bus_id
        assert r.utilization_gpu is not None and r.temperature_c is not None
        assert r.power_w is not None and r.power_w > 0
    finally:
        b.close()


# Allocates ~4 GiB through HIP, records what PyTorch reserved, then keeps the GPU busy with matmuls.
WORKLOAD = (
    TORCH_MATMUL_START
    + r"""
while time.time() < end:
    c = a @ b
    torch.cuda.synchronize()
json.dump({"reserved": torch.cuda.max_memory_reserved()}, open(out, "w"))
"""
)


def test_real_rocm_workload(tmp_path: Path, amd_uuid: str) -> None:
    torch = pytest.importorskip("torch")
    if not (torch.version.hip and torch.cuda.is_available()):
        pytest.skip("PyTorch has no ROCm (HIP) here")
    out, facts = tmp_path / "report.json", tmp_path / "facts.json"
    p = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(out),
         "--gpu-backend", "amd", "--gru", "bytes", "--interval", "0.2",
         "--", sys.executable, "-c", WORKLOAD, str(facts), "6"],
        env={**os.environ, "ROCR_VISIBLE_DEVICES": "0"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rep: dict[str, Any] = json.loads(out.read_text())
    reserved = json.loads(facts.read_text())["reserved"]
    main = rep["max_gpu_ram"]["main"]
    assert reserved <= main <= reserved + 2 * GiB  # what PyTorch reserved + the HIP runtime's own
    counted = [g for g in rep["gpus"] if g["counted"]]
    assert len(counted) == 1 and counted[0]["vendor"] == "amd"
    assert counted[0]["max_utilization"] > 20
