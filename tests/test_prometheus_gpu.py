"""GPU series of the Prometheus endpoint through the fake libnvidia-ml.so.1 (tests/fakenvml) and the real
nvidia-ml-py: the real CLI reads the fake GPUs, the endpoint serves them per gpu and uuid in base units."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from fakenvml.fake import CONFIG_ENV, FakeNvml, MiB, device
from promutil import cli_on_free_port, parse, scrape, values, wait_until

GPU0 = "GPU-0a0a0a0a-1111-4000-8000-000000000000"
GPU1 = "GPU-1b1b1b1b-2222-4000-8000-000000000001"

WORKLOAD = r"""
import os, sys, time
pidfile, done = sys.argv[1], sys.argv[2]
with open(pidfile + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
deadline = time.monotonic() + 120
while not os.path.exists(done) and time.monotonic() < deadline:
    time.sleep(0.02)
"""


def test_gpu_series_from_the_fake_nvml(tmp_path: Path, fake_lib: Path) -> None:
    fake = FakeNvml(
        tmp_path / "nvml.conf",
        [
            device(uuid=GPU0, bus="00000000:18:00.0", used=2000 * MiB, util=90, power_mw=300_000, temp=55),
            device(uuid=GPU1, bus="00000000:3B:00.0", used=4000 * MiB, util=30, power_mw=150_000),
        ],
    )
    fake.write()
    pidfile, done = tmp_path / "pid", tmp_path / "done"
    env = {"LD_LIBRARY_PATH": str(fake_lib.parent), CONFIG_ENV: str(fake.path)}
    proc, port = cli_on_free_port(
        lambda port: ["--headless", "--no-save", "--interval", "0.1", "--prometheus", f"127.0.0.1:{port}",
                      "--", sys.executable, "-c", WORKLOAD, str(pidfile), str(done)],
        env=env,
    )  # fmt: skip
    try:
        pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text(), 30, "the workload's pid"))
        fake.processes = [{"dev": 1, "pid": pid, "mem": 3000 * MiB}, {"dev": 0, "pid": 1, "mem": 777 * MiB}]
        fake.write()
        key0, key1 = (("gpu", "0"), ("uuid", GPU0)), (("gpu", "1"), ("uuid", GPU1))

        def tree_on_gpu1() -> object:
            fams = parse(scrape(port))
            return values(fams, "gputop_tree_gpu_memory_bytes").get(key1) == 3000 * MiB and fams

        fams = wait_until(tree_on_gpu1, 30, "the tree's 3000 MiB on GPU 1")
        # another process's memory on GPU 0 is not the tree's
        assert values(fams, "gputop_tree_gpu_memory_bytes")[key0] == 0
        assert values(fams, "gputop_gpu_memory_used_bytes") == {key0: 2000 * MiB, key1: 4000 * MiB}
        assert values(fams, "gputop_gpu_memory_total_bytes") == {key0: 80 * 1024**3, key1: 80 * 1024**3}
        assert values(fams, "gputop_gpu_utilization_ratio") == {key0: pytest.approx(0.9), key1: pytest.approx(0.3)}
        assert values(fams, "gputop_gpu_power_watts") == {key0: 300.0, key1: 150.0}
        assert values(fams, "gputop_gpu_temperature_celsius")[key0] == 55
        # energy counts up from the session's first reading (∫ power)
        first = values(fams, "gputop_gpu_energy_joules", "gputop_gpu_energy_joules_total")
        time.sleep(0.5)

        def energy_grew() -> bool:
            now = values(parse(scrape(port)), "gputop_gpu_energy_joules", "gputop_gpu_energy_joules_total")
            return now[key0] > first.get(key0, 0) and now[key1] > first.get(key1, 0)

        wait_until(energy_grew, 30, "GPU energy counters growing")
    finally:
        done.write_text("")
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert os.environ.get(CONFIG_ENV) is None  # the fake was the CLI's alone
