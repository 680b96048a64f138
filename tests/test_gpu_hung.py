"""A GPU driver that hangs holds nothing: not the samples, not the report, not the exit code, not the session.

The stand-in libraries sleep or hang where told (tests/fakenvml: FAKE_NVML_SLEEP and `stall` records, holding the
library lock as a driver's lock would; tests/fakeamdsmi: FAKE_AMDSMI_SLEEP). The guard's own rules are tested with
scripted backends whose calls block on an event that is never set.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fakenvml.fake import CONFIG_ENV, SLEEP_ENV, FakeNvml, device

from gputop_tracker.core.gpu import GpuBackend, GpuReading
from gputop_tracker.core.gpu.guard import GuardedBackend

JOB = ["sh", "-c", "sleep 1; exit 5"]
# a 1 s job's report: the tracker's start-up, the job, the open's wait (guard.OPEN_WAIT) or one deadline
# (guard.DEADLINE), and the end; without the guard a 12 s call alone passes it, and a hung one never returns
REPORT_WITHIN = 10.0
PROCESS_LIST = "nvmlDeviceGetComputeRunningProcesses_v3"


def track(tmp_path: Path, env: dict[str, str], *extra: str, job: Sequence[str] = JOB) -> tuple[int, float, Any, str]:
    """The real CLI tracking `job`, headless JSON into a file: (exit code, seconds to exit, report, stderr). A tracker
    still running after a minute is killed with its process group, and the test fails."""
    out = tmp_path / "report.json"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(out), "--interval", "0.1",
         *extra, "--", *job],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    _, err = communicate_or_fail(proc, 60, "no report a minute after a 1 s job: the tracker is held by the hung driver")
    elapsed = time.monotonic() - t0
    assert out.exists(), err
    return proc.returncode, elapsed, json.loads(out.read_text()), err


def kill_session(proc: subprocess.Popen[str]) -> None:
    """SIGKILL every process of the session `proc` leads (the sampler and the job have process groups of their
    own), then reap it."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == proc.pid:  # the session id, field 6 of /proc/PID/stat
            try:
                os.kill(int(stat.parent.name), signal.SIGKILL)
            except OSError:
                pass
    proc.communicate()


def communicate_or_fail(proc: subprocess.Popen[str], timeout: float, failure: str) -> tuple[str, str]:
    """`proc`'s stdout and stderr once it has ended; if it has not within `timeout` s, its whole session is killed
    (kill_session) and the test fails saying `failure`."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc)
        pytest.fail(failure)


def nvml_env(lib: Path, fake: FakeNvml, sleep: str = "") -> dict[str, str]:
    return {**os.environ, "LD_LIBRARY_PATH": str(lib.parent), CONFIG_ENV: str(fake.path), SLEEP_ENV: sleep}


def assert_held_nothing(code: int, elapsed: float, rep: Any, err: str) -> None:
    assert code == 5, err  # the job's
    assert rep["exit_code"] == 5
    assert elapsed < REPORT_WITHIN, f"the report came {elapsed:.1f} s after the start of a 1 s job"
    assert rep["gpu_not_responding"] is True
    assert rep["gpu_note"].startswith("GPU not responding: "), rep["gpu_note"]
    assert rep["session_path"] and Path(rep["session_path"]).is_file()  # the session is saved
    assert rep["n_samples"] > 0
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("sleep", "says"),
    [
        (f"{PROCESS_LIST}=12", "NVML had not answered"),  # 12 s a process-list call (a GPU fallen off the bus)
        (f"{PROCESS_LIST}=hang", "NVML had not answered"),  # a process-list call that never returns
        ("nvmlInitWithFlags=hang", "(opening it,"),  # nvmlInit itself never returns
    ],
    ids=["process-list-12s", "process-list-hangs", "init-hangs"],
)
def test_a_hung_driver_does_not_hold_the_report(tmp_path: Path, fake_lib: Path, sleep: str, says: str) -> None:
    fake = FakeNvml(tmp_path / "nvml.conf", [device()])
    code, elapsed, rep, err = track(tmp_path, nvml_env(fake_lib, fake, sleep))
    assert_held_nothing(code, elapsed, rep, err)
    assert says in rep["gpu_note"]
    assert "no GPU figures, and the rest is measured as without a GPU" in rep["gpu_note"]
    assert rep["gpus"] == []


def test_a_driver_that_answered_then_hung_keeps_what_it_gave(tmp_path: Path, fake_lib: Path) -> None:
    """Three samples' readings, then every call waits behind one that never returns: the GPU seen until then stays
    in the report, the note says the figures stop there."""
    fake = FakeNvml(tmp_path / "nvml.conf", [device(util=70)])
    fake.stalls = [{"fn": "nvmlDeviceGetUtilizationRates", "secs": "hang", "after": 3}]
    fake.write()
    code, elapsed, rep, err = track(tmp_path, nvml_env(fake_lib, fake))
    assert_held_nothing(code, elapsed, rep, err)
    assert "NVML did not answer within 3 s (a reading," in rep["gpu_note"]
    assert "GPU figures stop there" in rep["gpu_note"]
    assert [g["max_utilization"] for g in rep["gpus"]] == [70.0]


def test_a_slow_driver_within_the_deadline_is_read_as_ever(tmp_path: Path, fake_lib: Path) -> None:
    """0.3 s a process-list call: slow, yet every call answers within the deadline, so the GPU stays read."""
    fake = FakeNvml(tmp_path / "nvml.conf", [device(util=70)])
    code, _, rep, err = track(tmp_path, nvml_env(fake_lib, fake, f"{PROCESS_LIST}=0.3"))
    assert code == 5, err
    assert rep["gpu_not_responding"] is False
    assert rep["gpu_note"] is None
    assert [g["max_utilization"] for g in rep["gpus"]] == [70.0]


def test_a_hung_amdsmi_does_not_hold_the_report(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    if importlib.util.find_spec("amdsmi") is None:
        pytest.skip("the amdsmi package (the `amd` / `test` extra) is not installed")
    from fakeamdsmi.fake import SLEEP_ENV as AMD_SLEEP
    from fakeamdsmi.fake import FakeAmdSmi, env_for
    from fakeamdsmi.fake import build as build_amd
    from fakeamdsmi.fake import device as amd_device

    lib = build_amd(tmp_path_factory.mktemp("fakeamdsmi"))
    if lib is None:
        pytest.skip("no C compiler (gcc/cc): the stand-in libamd_smi.so cannot be built")
    fake = FakeAmdSmi(tmp_path / "amdsmi.conf", [amd_device()])
    env = {**os.environ, **env_for(lib, fake.path), AMD_SLEEP: "amdsmi_get_gpu_process_list=hang"}
    code, elapsed, rep, err = track(tmp_path, env, "--gpu-backend", "amd")
    assert_held_nothing(code, elapsed, rep, err)
    assert "amdsmi did not answer within 3 s" in rep["gpu_note"]


EXIT = """
import atexit, ctypes, os, sys, threading, time
lib = ctypes.CDLL(sys.argv[1])
atexit.register(lambda: print("atexit ran", flush=True))
threading.Thread(target=lib.nvmlInitWithFlags, args=(0,), daemon=True).start()
time.sleep(0.3)  # the thread is inside the C call, which never returns
print("exiting", flush=True)
if sys.argv[2] == "os._exit":
    os._exit(4)
sys.exit(3)
"""


@pytest.mark.parametrize(("how", "code"), [("exit", 3), ("os._exit", 4)])
def test_a_process_exits_with_a_daemon_thread_stuck_in_the_driver(fake_lib: Path, how: str, code: int) -> None:
    env = {**os.environ, SLEEP_ENV: "nvmlInitWithFlags=hang"}
    proc = subprocess.Popen(
        [sys.executable, "-c", EXIT, str(fake_lib), how],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    out, err = communicate_or_fail(proc, 30, f"{how} waited for the thread stuck in the C call")
    assert proc.returncode == code, err
    assert "exiting" in out
    assert ("atexit ran" in out) == (how == "exit")


# --------------------------------------------------------------------------- the guard's rules, scripted


class Scripted(GpuBackend):
    """A backend whose `read` blocks on `gate` (never set: a call that never returns)."""

    vendor = "nvidia"

    def __init__(self, gate: threading.Event | None = None, lines: Sequence[set[str]] = ()) -> None:
        super().__init__()
        self.gate = gate
        self.reads = 0
        self.closed = False
        self.lines = list(lines)

    def read(self, pids: Sequence[int]) -> list[GpuReading]:
        self.reads += 1
        if self.lines:
            self.problems.clear()
            self.problems |= self.lines.pop(0)
        if self.gate is not None:
            self.gate.wait()
        return [GpuReading(index=0, uuid="GPU-0", name="Scripted", vendor="nvidia")]

    def read_energy(self) -> dict[int, int]:
        if self.gate is not None:
            self.gate.wait()
        return {0: 1}

    def close(self) -> None:
        self.closed = True


def guarded(opener: Any, **kw: Any) -> GuardedBackend:
    return GuardedBackend(opener, 0.0, "NVML", **{"deadline": 0.2, "open_wait": 5.0, **kw})


def test_a_call_past_its_deadline_makes_the_gpu_not_responding() -> None:
    inner = Scripted(gate=threading.Event())
    gpu = guarded(lambda: inner)
    assert not gpu.not_responding and gpu.vendor == "nvidia"
    assert gpu.read([1]) == []
    assert gpu.not_responding
    assert gpu.changed() and not gpu.changed()  # once
    assert gpu.note is not None
    assert gpu.note.startswith("GPU not responding: NVML did not answer within 0.2 s (a reading, ")
    assert gpu.note.endswith("GPU figures stop there, and the rest is measured as without a GPU")
    assert gpu.read([1]) == [] and gpu.read_energy() == {}
    assert inner.reads == 1  # nothing more is asked of a driver that hangs
    gpu.close()
    assert not inner.closed


def test_an_open_that_answers_late_joins_the_run() -> None:
    gate = threading.Event()
    inner = Scripted()

    def opener() -> GpuBackend:
        gate.wait()
        return inner

    gpu = guarded(opener, open_wait=0.05)
    assert gpu.note == "waiting for NVML to answer (opening it): no GPU figures until it does"
    assert gpu.read([1]) == [] and not gpu.changed() and not gpu.not_responding
    gate.set()
    assert gpu._starting.done.wait(10)
    assert [r.uuid for r in gpu.read([1])] == ["GPU-0"]
    assert gpu.changed() and gpu.note is None and not gpu.not_responding
    assert any(line.startswith("NVML took ") and "GPU figures begin" in line for line in gpu.problems)
    gpu.close()
    assert inner.closed


def test_an_open_still_pending_when_tracking_ends_is_not_responding() -> None:
    gate = threading.Event()
    gpu = guarded(lambda: (gate.wait(), Scripted())[1], open_wait=0.05)
    gpu.stop_watch()
    assert gpu.not_responding and gpu.changed()
    assert gpu.note is not None and "NVML had not answered after " in gpu.note and "(opening it, " in gpu.note
    assert "no GPU figures" in gpu.note
    gpu.close()  # returns at once: nothing waits for the open


def test_the_backends_notes_reach_the_report_as_they_change() -> None:
    inner = Scripted(lines=[{"a", "b"}, {"b", "c"}])
    gpu = guarded(lambda: inner)
    problems = gpu.problems  # the set the summary holds
    gpu.read([1])
    assert problems == {"a", "b"}
    gpu.read([1])
    assert problems == {"b", "c"} and gpu.problems is problems
    gpu.close()
    assert inner.closed


def test_a_failing_call_fails_in_the_caller_as_before() -> None:
    class Failing(Scripted):
        def read(self, pids: Sequence[int]) -> list[GpuReading]:
            raise RuntimeError("boom")

    gpu = guarded(Failing)
    with pytest.raises(RuntimeError, match="boom"):
        gpu.read([1])
    assert not gpu.not_responding
    gpu.close()
