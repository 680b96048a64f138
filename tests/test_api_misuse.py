"""The Python API used the way real programs misuse it: a child forked inside `with Tracker():`, arguments of the
wrong type, a `resource_usage_file` that cannot be written. Real programs in child interpreters, figures checked
against what the program read from the kernel itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _run_script(body: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout)


def _result(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stdout + proc.stderr
    return dict(json.loads(lines[-1][len("RESULT ") :]))


FORKED_CHILD_LEAVES = """
    import json, os, sys, time
    from gputop_tracker import Tracker
    from gputop_tracker import TrackerError

    def hwm():
        return [int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith("VmHWM:")][0]

    with Tracker(sleep_time=0.1, save=False) as t:
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            time.sleep(0.2)
            if sys.argv[-1] == "stop":
                try:
                    t.stop()
                except TrackerError as e:
                    print("CHILD " + str(e), flush=True)
            sys.exit(0)  # leaves the with block in the child: its __exit__ runs there
        os.waitpid(pid, 0)
        time.sleep(0.5)
        buf = bytearray(300 * 1000 * 1000)
        buf[::4096] = b"1" * len(buf[::4096])
        time.sleep(0.5)
        peak = hwm()
        inside = time.monotonic() - t0
    u = t.raw_usage
    print("RESULT " + json.dumps({"wall": u.compute_time.time, "inside": inside, "peak": u.max_ram.main.total_rss,
                                  "hwm": peak}))
"""


@pytest.mark.parametrize("how", ["exit", "stop"])
def test_a_child_forked_inside_with_tracker_does_not_stop_its_parents_tracking(tmp_path: Path, how: str) -> None:
    """A child forked inside `with Tracker():` that leaves the block (`sys.exit`), or calls `stop()` on its copy:
    it stopped the parent's sampler, whose session then ended at the child's exit (0.2 s of a 1.2 s block, the
    parent's 300 MB never seen; the child printed "the sampler process ended without a summary"). Now only the
    process that started a Tracker stops it; the child's `stop()` says so."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(FORKED_CHILD_LEAVES))
    proc = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=120)
    r = _result(proc)
    assert "without a summary" not in proc.stderr, proc.stderr
    assert float(r["wall"]) >= float(r["inside"]) - 0.1, r  # the whole block, not up to the child's exit
    # the parent's own peak (VmHWM read by itself, the 300 MB in it) is the report's main peak
    assert float(r["hwm"]) > 300e6 and float(r["peak"]) >= 0.98 * float(r["hwm"]), r
    if how == "stop":
        assert "CHILD this Tracker was started by process" in proc.stdout, proc.stdout


SIMULATED_UUID = "GPU-51a1a7ed-0000-4000-8000-00000000000{}"  # the simulated GPUs' UUIDs, by index


@pytest.mark.parametrize(
    "gpus", [SIMULATED_UUID.format(1), f" {SIMULATED_UUID.format(1)} ", [SIMULATED_UUID.format(1)], {1}, ("1",)]
)
def test_gpu_uuids_as_one_str_or_a_collection_count_that_gpu(gpus: object) -> None:
    """`gpu_uuids="GPU-…"` (one UUID, not in a set) was joined letter by letter into `G,P,U,-,…`: the report said
    "'G' matches more than one GPU" and counted the wrong GPUs. Now a str is one UUID (or a --gpus list)."""
    import time

    from gputop_tracker import Tracker

    with Tracker(sleep_time=0.1, simulate_gpus=2, save=False, gpu_uuids=gpus) as t:  # type: ignore[arg-type]
        time.sleep(0.3)
    data = t.to_json()
    assert [g["counted"] for g in data["gpus"]] == [False, True], data["notes"]
    assert not [n for n in data["notes"] if "matches" in n], data["notes"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ram_unit", 5),
        ("gpu_ram_unit", 3.0),
        ("time_unit", 1),
        ("gpu_uuids", 0),
        ("gpu_uuids", [None]),
        ("gpu_uuids", [""]),
        ("gpu_uuids", b"GPU-0"),
        ("request", 5),
        ("prometheus", 9464),
        ("prometheus_textfile", 5),
        ("resource_usage_file", 5),
        ("store", 5),
        ("save", "no"),
        ("probe", "off"),
        ("wait_descendants", None),
    ],
)
def test_an_argument_of_the_wrong_type_is_one_value_error_naming_it(name: str, value: object) -> None:
    """`ram_unit=5`, `prometheus=9464` or `request=5` raised AttributeError from inside ("'int' object has no
    attribute 'strip'"); `save="no"` meant yes and `store=5` saved into ./5. Now: ValueError naming the argument."""
    from gputop_tracker import Tracker

    with pytest.raises(ValueError) as info:
        Tracker(**{name: value})  # type: ignore[arg-type]
    message = str(info.value)
    assert name in message and "\n" not in message, message
    assert type(info.value).__module__.startswith(("gputop_tracker", "builtins")), type(info.value)


def test_a_store_or_usage_file_that_cannot_be_written_is_refused_before_the_work(tmp_path: Path) -> None:
    """`store="/etc/passwd"` tracked on and said "session NOT saved" only in the summary's notes; a
    `resource_usage_file` that names a directory raised IsADirectoryError from inside stop(), after the work."""
    from gputop_tracker import Tracker

    a_file = tmp_path / "file"
    a_file.write_text("mine\n")
    with pytest.raises(ValueError, match="not a directory"):
        Tracker(store=a_file / "sessions")
    Tracker(store=a_file, save=False)  # nothing is saved: nothing to refuse
    with pytest.raises(ValueError, match="is a directory"):
        Tracker(resource_usage_file=tmp_path)
    with pytest.raises(ValueError, match="not a directory"):
        Tracker(resource_usage_file=a_file / "usage.json")
    assert a_file.read_text() == "mine\n"


def test_a_usage_file_that_cannot_be_written_at_stop_is_a_tracker_error_and_the_figures_stay(tmp_path: Path) -> None:
    """Its directory turned into a file during the run: stop() raised FileExistsError from inside; now a
    TrackerError in one line, and the figures are still there (stop() again returns them)."""
    from gputop_tracker import Tracker, TrackerError

    out = tmp_path / "sub" / "usage.json"
    t = Tracker(sleep_time=0.1, save=False, resource_usage_file=out).start()
    (tmp_path / "sub").write_text("a file now\n")
    with pytest.raises(TrackerError, match="cannot write resource_usage_file") as info:
        t.stop()
    assert "\n" not in str(info.value)
    assert t.stop().n_samples >= 1 and t.resource_usage is not None


def test_a_misspelt_event_type_or_a_callback_that_is_not_one_is_refused() -> None:
    """`on_event(cb, types="warnings")` never fired (no event is of that type) and said nothing; `on_event("oom")`
    (arguments swapped) printed an error for each event. Now both are a ValueError when registered."""
    from gputop_tracker import Tracker

    t = Tracker(save=False)
    with pytest.raises(ValueError, match="unknown event type 'warnings'"):
        t.on_event(print, types="warnings")
    with pytest.raises(ValueError, match="unknown event type 'OOM'"):
        t.on_event(print, types=["warning", "OOM"])
    with pytest.raises(ValueError, match="function"):
        t.on_event("oom")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="function"):
        t.on_sample(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown event type"):
        t.events(type="peaks")
    assert t.on_event(print, types=("warning", "critical")) is print
    assert t.events(type="warning") == []


def test_tracker_error_comes_from_where_tracker_does() -> None:
    """`except TrackerError` needed `gputop_tracker.api.tracker`, a path the README never gave."""
    import gputop_tracker
    from gputop_tracker import Tracker, TrackerError

    assert issubclass(TrackerError, RuntimeError) and "TrackerError" in gputop_tracker.__all__
    with pytest.raises(TrackerError):
        Tracker().stop()


def test_a_relative_usage_file_is_written_where_it_was_named_though_the_program_changes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was written relative to the directory the program was in at stop(): after a chdir, somewhere else."""
    from gputop_tracker import Tracker

    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    with Tracker(sleep_time=0.1, save=False, resource_usage_file="usage.json"):
        os.chdir(tmp_path / "elsewhere")
    assert (tmp_path / "usage.json").exists() and not (tmp_path / "elsewhere" / "usage.json").exists()


def test_a_relative_store_is_where_it_was_named_though_the_program_changes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`store="runs"` then a chdir: the session went to the new directory's runs/, and `session()` (reading the
    relative path again from wherever the program was by then) said it cannot read the session."""
    from gputop_tracker import Tracker

    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    t = Tracker(sleep_time=0.1, store="runs")
    os.chdir(tmp_path / "elsewhere")
    with t:
        os.chdir(tmp_path)
    os.chdir(tmp_path / "elsewhere")
    assert t.session().meta.id == t.session_id
    assert list((tmp_path / "runs").glob("*.json")) and not (tmp_path / "elsewhere" / "runs").exists()
