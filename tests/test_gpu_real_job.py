"""The truth the real-GPU workloads (tests/gpu_real_job.py) read for themselves, checked here through the stand-in
libnvidia-ml: NVML's figure for the workload's own PID on the GPU it was given, and the accounting mode and record,
so that a run on a real GPU (tests/test_gpu_real.py, one short lease) compares with the right figure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakenvml.fake import FakeNvml, GiB, MiB, loaded_in_process
from gpu_real_job import OwnGpuMemory, accounting_state
from test_gpu_fakenvml import GPU1, two_gpus


def test_own_figure_is_this_pids_on_the_gpu_named(fake_lib: Path, tmp_path: Path) -> None:
    me = os.getpid()
    fake = FakeNvml(tmp_path / "nvml.conf", two_gpus())
    fake.processes = [
        {"dev": 0, "pid": me, "mem": 300 * MiB},
        {"dev": 1, "pid": me, "mem": 700 * MiB},
        {"dev": 1, "pid": 1, "mem": 5 * GiB},  # someone else's, on the same GPU
    ]
    fake.write()
    seen = []
    with loaded_in_process(fake_lib, fake.path):
        for step in range(2):
            if step:  # no figure for this PID (as under MIG), and none listed on GPU 1: no truth, not 0
                fake.processes = [{"dev": 0, "pid": me, "mem": "NA"}, {"dev": 1, "pid": 1, "mem": 5 * GiB}]
                fake.write()
            for uuid in (GPU1, ""):  # the UUID named; nothing named: every GPU
                nv = OwnGpuMemory(uuid)
                seen.append(nv.read())
                nv.close()
    assert seen == [700 * MiB, 1000 * MiB, None, None]


@pytest.mark.parametrize(
    ("acct", "records", "state"),
    [
        (0, [], (False, None)),  # as NVIDIA ships it
        (1, [{"dev": 1, "pid": 4242, "maxmem": 3 * GiB, "running": 0}], (True, 3 * GiB)),  # exited: kept
        (1, [{"dev": 0, "pid": 4242, "maxmem": 3 * GiB, "running": 0}], (True, None)),  # another GPU's record
        ("NA", [], (None, None)),  # no mode (MIG)
    ],
)
def test_accounting_state_reads_the_gpu_named(
    fake_lib: Path,
    tmp_path: Path,
    acct: int | str,
    records: list[dict[str, int]],
    state: tuple[bool | None, int | None],
) -> None:
    fake = FakeNvml(tmp_path / "nvml.conf", two_gpus(acct=acct))
    fake.devices[0]["acct"] = 1
    fake.accounting = records
    fake.write()
    with loaded_in_process(fake_lib, fake.path):
        assert accounting_state(GPU1, 4242) == state
