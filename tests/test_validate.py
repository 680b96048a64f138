"""The input checks the CLI and the API share (core/model/validate.py), called directly: numbers and choices at
and past their bounds, the shared tracking options named as each caller spells them, and the PIDs `--attach`
refuses (a gone process, a zombie, a kernel thread, a PID that is not a positive whole number)."""

from __future__ import annotations

import math
import os
import threading
from typing import Any

import pytest

from gputop_tracker.core.model import validate
from gputop_tracker.core.model.config import MIN_INTERVAL
from gputop_tracker.core.model.validate import API_NAMES, CLI_NAMES, check_pid, choice, integer, number

# --------------------------------------------------------------------------- number / integer / choice


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_number_refuses_nan_and_infinities(value: float) -> None:
    with pytest.raises(ValueError, match=r"^--x must be a finite number at least 0 and at most 10, not"):
        number("--x", value, 0, 10)


@pytest.mark.parametrize("value", [True, False, "3", None, [1.0], 1j])
def test_number_refuses_what_is_not_a_real_number(value: object) -> None:
    with pytest.raises(ValueError, match=r"^--x must be a number, not "):
        number("--x", value, 0, 10)


def test_number_takes_both_bounds_exactly_and_returns_a_float() -> None:
    assert number("--x", 0, 0, 10) == 0.0
    assert number("--x", 10, 0, 10) == 10.0
    assert type(number("--x", 7, 0, 10)) is float
    assert number("--x", 2.5, 0, 10) == 2.5


@pytest.mark.parametrize("value", [-1e-9, 10 + 1e-9, -5, 11])
def test_number_refuses_just_outside_the_bounds(value: float) -> None:
    with pytest.raises(ValueError, match=r"at least 0 and at most 10, not"):
        number("--x", value, 0, 10)


def test_number_above_refuses_the_low_bound_itself_but_not_just_above() -> None:
    with pytest.raises(ValueError, match=r"^--x must be a finite number more than 0 and at most 100, not 0\b"):
        number("--x", 0, 0, 100, above=True)
    with pytest.raises(ValueError, match="more than 0"):
        number("--x", 0.0, 0, 100, above=True)
    assert number("--x", 1e-12, 0, 100, above=True) == 1e-12
    assert number("--x", 100, 0, 100, above=True) == 100.0  # the high bound stays inclusive


def test_integer_bounds_and_no_upper_bound() -> None:
    assert integer("--n", 1, 1) == 1
    assert integer("--n", 10**12, 1) == 10**12  # no high bound: any size
    assert integer("--n", 64, 0, 64) == 64
    with pytest.raises(ValueError, match=r"^--n must be at least 1, not 0$"):
        integer("--n", 0, 1)
    with pytest.raises(ValueError, match=r"^--n must be at least 0 and at most 64, not 65$"):
        integer("--n", 65, 0, 64)
    with pytest.raises(ValueError, match=r"at least 0 and at most 64, not -1$"):
        integer("--n", -1, 0, 64)


@pytest.mark.parametrize("value", [True, False, 2.0, math.nan, "2", None])
def test_integer_refuses_bools_floats_and_strings(value: object) -> None:
    with pytest.raises(ValueError, match=r"^--n must be a whole number, not "):
        integer("--n", value, 0)


def test_choice_takes_only_one_of_the_choices() -> None:
    assert choice("--gpu-backend", "amd", validate.GPU_BACKENDS) == "amd"
    for bad in ("AMD", "", " nvidia", None, 1, ("amd",)):
        with pytest.raises(ValueError, match=r"^--gpu-backend must be one of auto, nvidia, amd, none, not "):
            choice("--gpu-backend", bad, validate.GPU_BACKENDS)


# --------------------------------------------------------------------------- tracking_options

GOOD: dict[str, Any] = {
    "interval": 1.0,
    "n_expected_cores": None,
    "simulate_gpus": 0,
    "warn_at": 80.0,
    "critical_at": 95.0,
    "flight_seconds": 30.0,
    "oom_dumps": 3,
    "oom_dump_mb": 100.0,
}
# one bad value per option, each past a different rule
BAD = [
    ("interval", MIN_INTERVAL / 2),
    ("interval", validate.MAX_INTERVAL + 1),
    ("interval", math.nan),
    ("n_expected_cores", 0),
    ("n_expected_cores", 2.0),
    ("simulate_gpus", validate.MAX_SIMULATED_GPUS + 1),
    ("simulate_gpus", True),
    ("warn_at", 0),
    ("warn_at", 100.5),
    ("critical_at", math.inf),
    ("flight_seconds", -1),
    ("flight_seconds", validate.MAX_WINDOW + 1),
    ("oom_dumps", -1),
    ("oom_dump_mb", 0),
    ("oom_dump_mb", "100"),
]


def test_good_options_pass_both_ways() -> None:
    validate.tracking_options(CLI_NAMES, **GOOD)
    validate.tracking_options(API_NAMES, **{**GOOD, "n_expected_cores": 4, "simulate_gpus": 64, "interval": 3600})


@pytest.mark.parametrize(("names", "spelling"), [(CLI_NAMES, "cli"), (API_NAMES, "api")])
@pytest.mark.parametrize(("key", "value"), BAD)
def test_a_bad_option_is_named_as_the_caller_spells_it(
    names: dict[str, str], spelling: str, key: str, value: object
) -> None:
    with pytest.raises(ValueError) as err:
        validate.tracking_options(names, **{**GOOD, key: value})
    msg = str(err.value)
    assert msg.startswith(names[key] + " must be "), msg
    other = API_NAMES if spelling == "cli" else CLI_NAMES
    if other[key] != names[key]:
        assert other[key] not in msg


def test_the_two_spellings_differ_where_the_api_keeps_its_own_names() -> None:
    assert CLI_NAMES["interval"] == "--interval" and API_NAMES["interval"] == "sleep_time"
    assert CLI_NAMES["flight_seconds"] == "--oom-window" and API_NAMES["flight_seconds"] == "flight_seconds"
    assert set(CLI_NAMES) == set(API_NAMES)
    assert all(v.startswith("--") for v in CLI_NAMES.values())
    assert not any(v.startswith("-") for v in API_NAMES.values())


@pytest.mark.parametrize(("warn", "critical"), [(90.0, 90.0), (95.0, 80.0), (100, 99.5)])
def test_warn_at_or_above_critical_is_refused(warn: float, critical: float) -> None:
    with pytest.raises(ValueError, match=rf"^--warn-at \({warn:g}\) must be below --critical-at \({critical:g}\)$"):
        validate.tracking_options(CLI_NAMES, **{**GOOD, "warn_at": warn, "critical_at": critical})
    with pytest.raises(ValueError, match=r"^warn_at \(.*\) must be below critical_at \("):
        validate.tracking_options(API_NAMES, **{**GOOD, "warn_at": warn, "critical_at": critical})


def test_warn_just_below_critical_passes() -> None:
    validate.tracking_options(CLI_NAMES, **{**GOOD, "warn_at": 94.999, "critical_at": 95.0})


# --------------------------------------------------------------------------- check_pid


def test_own_pid_is_accepted() -> None:
    assert check_pid(os.getpid()) == os.getpid()


def test_a_reaped_child_is_no_process() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    with pytest.raises(ValueError, match=rf"^no process with PID {pid}$"):
        check_pid(pid)


def test_a_zombie_is_refused() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        # wait for the exit without reaping it: the child is a zombie from here on, no polling needed
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        with open(f"/proc/{pid}/stat", "rb") as f:
            assert f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        with pytest.raises(ValueError, match=rf"^process {pid} has already exited \(zombie\)$"):
            check_pid(pid)
    finally:
        os.waitpid(pid, 0)


def test_a_kernel_thread_is_refused() -> None:
    try:
        with open("/proc/2/stat", "rb") as f:
            name = f.read().split(b"(", 1)[1].split(b")", 1)[0]
    except (OSError, IndexError):
        name = b""
    if name != b"kthreadd":
        pytest.skip("PID 2 is not kthreadd here (a PID namespace)")
    with pytest.raises(ValueError, match=r"^process 2 \(kthreadd\) is a kernel thread"):
        check_pid(2)


def test_a_thread_id_is_refused_naming_its_process() -> None:
    """A TID from `top -H` was tracked as if it were the process: no children, the other threads' time left
    out, and the run ended with the thread while the process ran on."""
    started, done = threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        started.set()
        done.wait(30)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    try:
        assert started.wait(10)
        with pytest.raises(ValueError) as err:
            check_pid(tids[0])
        pid = os.getpid()
        assert str(err.value) == f"{tids[0]} is a thread of process {pid}, not a process: attach to {pid}"
    finally:
        done.set()
        t.join()


@pytest.mark.parametrize(
    ("pid", "message"),
    [
        (0, "a PID must be positive, not 0"),
        (-1, "a PID must be positive, not -1"),
        (True, "a PID must be a whole number, not True"),
        ("3", "a PID must be a whole number, not '3'"),
        (3.0, "a PID must be a whole number, not 3.0"),
    ],
)
def test_pids_that_are_not_positive_whole_numbers_are_refused(pid: object, message: str) -> None:
    with pytest.raises(ValueError) as err:
        check_pid(pid)
    assert str(err.value) == message
