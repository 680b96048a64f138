"""The Python API against real memory and CPU, shaped like gpu-tracker's Tracker."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import symlinked_file

from gputop_tracker import Tracker
from gputop_tracker.api.tracker import TrackerError
from gputop_tracker.core.model.models import ResourceUsage

MB = 1000 * 1000


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_with_block_measures_this_process(tmp_path: Path, store: Path) -> None:
    out = tmp_path / "usage.json"
    before = _cpu()
    t = Tracker(sleep_time=0.1, ram_unit="megabytes", time_unit="seconds", resource_usage_file=out)
    sampled = threading.Event()
    t.on_sample(lambda _s: sampled.set())
    with t:
        assert sampled.wait(60), "no sample"  # the sampler's baseline of this process is taken
        cpu0 = _cpu()
        buf = bytearray(150 * MB)
        buf[::4096] = b"1" * len(buf[::4096])
        _burn(0.5)
        time.sleep(0.3)
        cpu1 = _cpu()
    after = _cpu()
    usage = t.resource_usage
    assert isinstance(usage, ResourceUsage)
    assert usage.max_ram.unit == "megabytes"
    assert usage.max_ram.main.total_rss >= 150  # VmHWM of this process, in MB
    assert usage.max_ram.main.private_rss >= 140
    assert 0.7 < usage.compute_time.time < 10
    # CPU counted from the start of the block, not the life of the test process: at least what the block
    # used between the first sample and the stop, at most what the whole with statement used (start-up and
    # stop included); the slack is the kernel's clock tick on each of the fields read
    assert cpu1 - cpu0 - 0.05 <= usage.cpu_time.total <= after - before + 0.05, (cpu1 - cpu0, after - before)
    assert usage.mode == "attach" and usage.n_samples >= 5
    # the API's sampler runs as `python -m …sampler`: a helper defined below its `__main__` guard did not exist
    # yet when tracking ended, and every session said "tracking failed (NameError …)"
    assert not [n for n in usage.notes if n.startswith("tracking failed")], usage.notes
    text = str(t)
    assert "RAM (peaks)" in text and "megabytes" in text
    data = t.to_json()
    assert data["max_ram"]["unit"] == "megabytes" and data["compute_time"]["unit"] == "seconds"
    assert json.loads(out.read_text())["max_ram"]["main"]["total_rss"] == pytest.approx(
        data["max_ram"]["main"]["total_rss"]
    )
    assert t.session_id and list(store.glob(f"{t.session_id}.json"))
    del buf


def test_start_stop_and_another_process(store: Path) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "b = bytearray(80_000_000); b[::4096] = b'1' * len(b[::4096]); import time; time.sleep(1.5)",
        ]
    )
    try:
        t = Tracker(sleep_time=0.1, process_id=child.pid, ram_unit="bytes", save=False)
        t.start()
        child.wait()
        usage = t.stop()
    finally:
        child.kill()
    assert usage.pid == child.pid
    assert usage.max_ram.main.total_rss >= 80 * MB
    assert not list(store.glob("*.json"))  # save=False
    with pytest.raises(TrackerError):
        t.start()


def test_gpu_tracker_defaults_and_errors() -> None:
    t = Tracker()
    assert "not stopped" in str(t)
    with pytest.raises(TrackerError):
        _ = t.resource_usage
    with pytest.raises(TrackerError):
        t.stop()
    with pytest.raises(ValueError):
        Tracker(ram_unit="parsecs")
    with pytest.raises(ValueError):
        Tracker(sleep_time=0.001)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sleep_time": float("nan")},
        {"sleep_time": float("inf")},
        {"warn_at": float("nan")},
        {"critical_at": -1.0},
        {"flight_seconds": float("inf")},
        {"flight_seconds": float("nan")},
        {"oom_dump_mb": float("nan")},
        {"oom_dumps": -1},
        {"mem_limit": float("inf")},
        {"mem_limit": "1e400"},
        {"n_expected_cores": 0},
        {"simulate_gpus": -1},
        {"process_id": 0},
        {"process_id": -3},
    ],
)
def test_bad_arguments_are_value_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Tracker(**kwargs)  # type: ignore[arg-type]


def test_missing_process_raises_on_start(store: Path) -> None:
    t = Tracker(process_id=999_999_999, save=False)
    with pytest.raises(TrackerError, match="no process with PID 999999999"):
        t.start()
    dead = subprocess.Popen(["true"])
    dead.wait()
    with pytest.raises(TrackerError):
        Tracker(process_id=dead.pid).start()
    assert not list(store.glob("*.json"))


def test_resource_usage_file_through_a_symlink(tmp_path: Path) -> None:
    target, link = symlinked_file(tmp_path, "usage.json", "")
    with Tracker(sleep_time=0.1, save=False, resource_usage_file=link):
        time.sleep(0.2)
    assert link.is_symlink() and "max_ram" in json.loads(target.read_text())
    assert target.stat().st_mode & 0o777 == 0o640


def test_no_file_descriptor_is_closed_twice(tmp_path: Path) -> None:
    """The sampler's pipe is closed once: a file the script opens after the run keeps working after the
    Tracker is garbage-collected, and nothing is printed at interpreter exit."""
    user_file = tmp_path / "user.txt"
    script = f"""
import gc
from gputop_tracker import Tracker
with Tracker(sleep_time=0.1) as t:
    pass
files = [open({str(user_file)!r} + str(i), "w") for i in range(20)]  # one takes the pipe's old number
del t
gc.collect()
for f in files:
    f.write("still open")
    f.close()
with Tracker(sleep_time=0.1) as t2:
    pass
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr and "Bad file descriptor" not in proc.stderr, proc.stderr
    assert all((tmp_path / f"user.txt{i}").read_text() == "still open" for i in range(20))


def test_a_sampler_stuck_past_the_join_timeout_is_killed_with_a_clear_error(store: Path) -> None:
    """Past join_timeout × n_join_attempts the pipe was closed under the reader (the summary lost on the way,
    or an AttributeError from the exporter it fed) and stop() still waited for the sampler, unbounded. Now the
    stuck sampler is killed, stop() ends, and the error says so."""
    import os
    import signal
    import threading

    t = Tracker(sleep_time=0.1, join_timeout=0.5, n_join_attempts=1)
    t.start()
    handle = t._handle
    assert handle is not None
    os.kill(handle.pid, signal.SIGSTOP)  # stuck: it cannot take the stop request
    began = time.monotonic()
    with pytest.raises(TrackerError, match=r"sampler was killed: it did not finish within .*\(0\.5 s\)"):
        t.stop()
    assert time.monotonic() - began < 15
    assert handle.exit_status == -signal.SIGKILL
    assert not any(th.name == "gputop-tracker-events" and th.is_alive() for th in threading.enumerate())


def test_a_slow_sampler_within_the_join_timeout_still_gives_its_summary(store: Path) -> None:
    """A sampler that takes a while to finish (paused 1 s here, as by a slow disk) is waited for: the summary
    arrives whole."""
    import os
    import signal
    import threading

    t = Tracker(sleep_time=0.1, join_timeout=30, n_join_attempts=1)
    t.start()
    handle = t._handle
    assert handle is not None
    os.kill(handle.pid, signal.SIGSTOP)
    threading.Timer(1.0, os.kill, (handle.pid, signal.SIGCONT)).start()
    usage = t.stop()
    assert usage.pid == os.getpid() and handle.exit_status == 0  # 1: the sampler had crashed at its end
    assert not [n for n in usage.notes if n.startswith("tracking failed")], usage.notes


def test_the_default_text_report_reads_in_units_that_fit(store: Path) -> None:
    """gpu-tracker's defaults (gigabytes, hours) stay those of the figures; the text report of a short run read
    "wall time 0.0005 hours" and "0.000 gigabytes". Units given explicitly are kept in both."""
    with Tracker(sleep_time=0.1, save=False) as t:
        buf = bytearray(30 * MB)
        buf[::4096] = b"1" * len(buf[::4096])
    text = str(t)
    assert " hours" not in text and "gigabytes" not in text, text
    assert re.search(r"wall time\s+\d+\.\d+ s\b", text), text
    assert t.resource_usage.max_ram.unit == "gigabytes" and t.resource_usage.compute_time.unit == "hours"
    with Tracker(sleep_time=0.1, save=False, time_unit="hours") as t2:
        pass
    assert re.search(r"wall time\s+[\d.]+ hours", str(t2)), str(t2)
    del buf
