"""NVML accounting: the driver's own per-process GPU memory peak (maxMemoryUsage), exited processes too.

Pure rules on synthetic readings (which record is whose, what each figure may be called), the backend through
the fake libnvidia-ml and the real nvidia-ml-py, and the CLI end to end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakenvml.fake import FakeNvml, MiB, loaded_in_process
from test_gpu_fakenvml import GPU0, GPU1, SETTLE, Run, hold_memory, run_holding_memory, two_gpus
from test_gpu_summary import CHILD, MAIN, builder, g, run, script

from gputop_tracker.core.gpu.accounting import LABEL, ProcessStarts, record_is_this_process
from gputop_tracker.core.model.models import ResourceUsage
from gputop_tracker.core.model.units import Units
from gputop_tracker.core.report.render import to_text

GiB = 1024**3
NOW = 1_800_000_000.0  # a fixed clock: test ids must not depend on when they are collected


# ------------------------------------------------------------------ whose record is it


@pytest.mark.parametrize(
    ("start_us", "running", "alive", "started", "ours"),
    [
        (int((NOW - 100) * 1e6), True, True, NOW - 5, True),  # running record of a live process: one PID, one process
        (int((NOW - 100) * 1e6), False, True, NOW - 5, False),  # an earlier process that had the PID
        (int((NOW - 100) * 1e6), False, False, NOW - 5, False),
        (int((NOW - 4) * 1e6), False, False, NOW - 5, True),  # ours, exited
        (int((NOW - 5.5) * 1e6), False, False, NOW - 5, True),  # within btime's one-second resolution
        (int((NOW - 7) * 1e6), False, False, NOW - 5, False),
        (int((NOW - 4) * 1e6), False, False, None, False),  # start unknown: cannot tell
    ],
)
def test_a_record_is_a_process_only_if_it_started_no_earlier(
    start_us: int, running: bool, alive: bool, started: float | None, ours: bool
) -> None:
    assert record_is_this_process(start_us, running, alive, started) is ours


def test_process_start_read_from_proc_matches_the_clock() -> None:
    before = time.time()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    try:
        starts = ProcessStarts()
        starts.see([p.pid])
        started = starts.started(p.pid)
        assert started is not None
        assert before - 1.5 <= started <= time.time() + 0.5  # btime has one-second resolution
    finally:
        p.kill()
        p.wait()
    starts.see([p.pid])  # gone: kept, not read again
    assert starts.started(p.pid) == started


# ------------------------------------------------------------------ what each figure is (synthetic readings)


def acct(index: int, on: bool | None, peaks: dict[int, int], **kw: Any) -> Any:
    return g(index, vendor="nvidia", accounting=on, accounting_peaks=peaks, **kw)


def summary(steps: list[list[Any]], end: list[Any] | None = None) -> ResourceUsage:
    """The samples, then the records read when tracking ends (by default: the last sample's GPUs again)."""
    b = builder()
    run(b, script(steps), len(steps))
    b.accounting_at_end(steps[-1] if end is None else end)
    return ResourceUsage.model_validate(b.summary())


def test_one_gpu_per_process_records_are_exact_and_above_the_samples() -> None:
    """The samples saw 1000 / 3000 MiB; the driver kept 6 GiB / 3500 MiB peaks: those are the peaks, exact."""
    steps = [
        [acct(0, True, {MAIN: 6 * GiB}, processes={MAIN: 1000 * MiB}), acct(1, True, {CHILD: 3500 * MiB})],
        [acct(0, True, {MAIN: 6 * GiB}), acct(1, True, {CHILD: 3500 * MiB}, processes={CHILD: 3000 * MiB})],
    ]
    u = summary(steps)
    assert u.max_gpu_ram.main == 6 * GiB
    assert u.max_gpu_ram.descendants == 3500 * MiB
    assert u.sources["max_gpu_ram.main"] == LABEL
    assert u.sources["max_gpu_ram.descendants"] == LABEL
    # main and one descendant on different GPUs: their peaks may not coincide, so the sum is no exact peak
    assert u.max_gpu_ram.combined == 6 * GiB
    assert u.sources["max_gpu_ram.combined"].startswith("lower bound")
    assert u.max_gpu_ram.accounting is True
    procs = {p.pid: p for p in u.processes}
    assert procs[MAIN].peak_gpu_memory == 6 * GiB
    assert procs[MAIN].peak_gpu_memory_source == LABEL
    assert procs[CHILD].peak_gpu_memory == 3500 * MiB
    assert [x.accounting for x in u.gpus] == [True, True]
    assert not any("nvidia-smi -am 1" in n for n in u.notes)
    text = to_text(u, Units("bytes", "bytes", "seconds"))
    assert "main: exact (NVML accounting)" in text
    assert "NVML accounting on" in text


def test_records_read_only_while_the_processes_ran_are_peaks_so_far() -> None:
    """Without the read at the end, main may have grown after the last record: a lower bound, not exact."""
    steps = [[acct(0, True, {MAIN: 6 * GiB}, processes={MAIN: 1000 * MiB})]] * 2
    u = summary(steps, end=[])
    assert u.max_gpu_ram.main == 6 * GiB
    assert "last read while it ran" in u.sources["max_gpu_ram.main"]
    lost = summary(steps, end=[acct(0, True, {MAIN: 6 * GiB}, lost=True)])
    assert lost.sources["max_gpu_ram.main"].startswith("lower bound")


def test_the_read_at_the_end_catches_a_last_moment_peak() -> None:
    steps = [[acct(0, True, {MAIN: 2 * GiB}, processes={MAIN: 1000 * MiB})]] * 2
    u = summary(steps, end=[acct(0, True, {MAIN: 7 * GiB})])
    assert (u.max_gpu_ram.main, u.sources["max_gpu_ram.main"]) == (7 * GiB, LABEL)


def test_only_main_used_a_gpu_so_the_tree_peak_is_exact() -> None:
    steps = [[acct(0, True, {MAIN: 6 * GiB}, processes={MAIN: 1000 * MiB}), acct(1, True, {})]] * 2
    u = summary(steps)
    assert (u.max_gpu_ram.main, u.max_gpu_ram.descendants, u.max_gpu_ram.combined) == (6 * GiB, 0, 6 * GiB)
    assert u.sources["max_gpu_ram.combined"] == LABEL


def test_a_process_on_two_gpus_has_a_lower_bound_not_an_exact_peak() -> None:
    steps = [[acct(0, True, {MAIN: 2 * GiB}), acct(1, True, {MAIN: 3 * GiB}, processes={MAIN: 1 * GiB})]] * 2
    u = summary(steps)
    assert u.max_gpu_ram.main == 3 * GiB  # the larger record; at most 5 GiB, not known when
    assert (
        u.sources["max_gpu_ram.main"].startswith("lower bound (NVML accounting")
        and "coincide" in u.sources["max_gpu_ram.main"]
    )
    assert next(p for p in u.processes if p.pid == MAIN).peak_gpu_memory_source.startswith("lower bound")


def test_a_process_also_on_a_gpu_whose_figure_is_not_available_has_no_exact_peak() -> None:
    """Main is on GPU 0, where NVML gives its memory as N/A (and so keeps no usable record: maxMemoryUsage is N/A
    where usedGpuMemory is), and on GPU 1 with a record: that record is no peak of main, only a lower bound."""
    steps = [[acct(0, True, {}, processes={MAIN: 0}, no_figure=frozenset({MAIN})),
              acct(1, True, {MAIN: 3 * GiB}, processes={MAIN: 1 * GiB})]] * 2  # fmt: skip
    u = summary(steps)
    assert u.max_gpu_ram.main == 3 * GiB
    assert u.sources["max_gpu_ram.main"].startswith("lower bound (NVML accounting")
    assert u.sources["max_gpu_ram.combined"] != LABEL


def test_accounting_off_on_one_gpu_means_no_figure_is_exact_and_the_report_says_how_to_turn_it_on() -> None:
    """GPU 1 has no records: a process may have used it unseen, so GPU 0's record is no exact peak of the tree."""
    steps = [[acct(0, True, {MAIN: 2 * GiB}, processes={MAIN: 1 * GiB}), acct(1, False, {})]] * 2
    u = summary(steps)
    assert u.max_gpu_ram.main == 2 * GiB
    assert (
        u.sources["max_gpu_ram.main"] == "lower bound (NVML accounting: accounting was not on for every GPU all along)"
    )
    assert u.max_gpu_ram.accounting is False
    assert [x.accounting for x in u.gpus] == [True, False]
    note = next(n for n in u.notes if "NVML accounting mode is off" in n)
    assert "GPU 1" in note and "nvidia-smi -am 1" in note and "root" in note
    assert "NVML accounting off" in to_text(u, Units("bytes", "bytes", "seconds"))


def test_turned_on_mid_run_the_records_are_not_exact() -> None:
    steps = [
        [acct(0, False, {}, processes={MAIN: 1 * GiB})],
        [acct(0, True, {MAIN: 2 * GiB}, processes={MAIN: 1 * GiB})],
    ]
    u = summary(steps)
    assert u.max_gpu_ram.main == 2 * GiB
    assert u.sources["max_gpu_ram.main"].endswith("not on for every GPU all along)")


def test_without_accounting_everything_stays_sampled() -> None:
    steps = [[acct(0, None, {}, processes={MAIN: 1000 * MiB, CHILD: 500 * MiB})]] * 2
    u = summary(steps)
    assert (u.max_gpu_ram.main, u.max_gpu_ram.descendants) == (1000 * MiB, 500 * MiB)
    assert {u.sources[f"max_gpu_ram.{k}"] for k in ("main", "descendants", "combined")} == {
        "sampled (NVML running processes)"
    }
    assert u.max_gpu_ram.accounting is None
    assert "(peaks, sampled)" in to_text(u, Units("bytes", "bytes", "seconds"))


def test_two_descendants_records_give_a_lower_bound() -> None:
    from gputop_tracker.core.summary.gpupeaks import GpuAccountingLog, group_peak

    log = GpuAccountingLog()
    log.observe([acct(0, True, {201: 2 * GiB, 202: 3 * GiB}, processes={201: 1 * GiB})])
    log.observe_end([acct(0, True, {201: 2 * GiB, 202: 3 * GiB})])
    fig = group_peak(log, [201, 202], 1 * GiB, complete=True)
    assert fig.value == 3 * GiB and fig.label.startswith("lower bound")
    one = group_peak(log, [202], 0, complete=True)
    assert (one.value, one.label) == (3 * GiB, LABEL)
    unseen = group_peak(log, [202], 0, complete=False)  # a descendant may have lived and died unseen
    assert unseen.value == 3 * GiB and unseen.label.startswith("lower bound")


# ------------------------------------------------------------------ the backend through the fake library


@pytest.fixture
def nvml(fake_lib: Path, tmp_path: Path) -> Iterator[tuple[Any, FakeNvml]]:
    cfg = FakeNvml(tmp_path / "nvml.conf", two_gpus())
    with loaded_in_process(fake_lib, cfg.path) as pynvml:
        yield pynvml, cfg


def backend() -> Any:
    from gputop_tracker.core.gpu.nvidia import NvmlBackend
    from gputop_tracker.core.gpu.pidns import PidMapper

    b = NvmlBackend(pid_mapper=PidMapper(namespaced=False))
    b._procs_due = 0.0
    return b


def test_backend_reads_records_only_where_accounting_is_on(nvml: tuple[Any, FakeNvml]) -> None:
    _, cfg = nvml
    me = os.getpid()
    cfg.devices[0]["acct"] = 1
    cfg.devices[1]["acct"] = 0
    cfg.accounting = [
        {"dev": 0, "pid": me, "maxmem": 6 * GiB, "running": 1},
        {"dev": 0, "pid": 1, "maxmem": 9 * GiB, "running": 1},  # not tracked: never reported
        {"dev": 1, "pid": me, "maxmem": 1 * GiB, "running": 1},  # mode off: the driver gives nothing
    ]
    cfg.write()
    b = backend()
    try:
        r0, r1 = b.read([me])
        assert (r0.accounting, r1.accounting) == (True, False)
        assert r0.accounting_peaks == {me: 6 * GiB}
        assert r1.accounting_peaks == {}
    finally:
        b.close()


def test_backend_mig_and_unsupported_gpus_say_unknown(nvml: tuple[Any, FakeNvml]) -> None:
    _, cfg = nvml
    cfg.devices[0]["acct"] = "NA"
    cfg.write()
    b = backend()
    try:
        assert b.read([])[0].accounting is None
    finally:
        b.close()


def test_backend_keeps_an_exited_processs_record_and_ignores_an_earlier_owner_of_its_pid(
    nvml: tuple[Any, FakeNvml],
) -> None:
    _, cfg = nvml
    cfg.devices[0]["acct"] = 1
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    old = {"dev": 0, "pid": child.pid, "maxmem": 50 * GiB, "running": 0, "start_us": 1_000_000}
    cfg.accounting = [old]  # a process that had this PID long ago
    cfg.write()
    b = backend()
    try:
        assert b.read([child.pid])[0].accounting_peaks == {}
        child.kill()
        child.wait()
        cfg.accounting = [old, {"dev": 0, "pid": child.pid, "maxmem": 7 * GiB, "running": 0}]
        cfg.write()
        b._procs_due = 0.0
        assert b.read([])[0].accounting_peaks == {child.pid: 7 * GiB}  # exited, still the driver's exact peak
        # once read after its exit, its PID may be reused: a later record under it is someone else's
        cfg.accounting = [{"dev": 0, "pid": child.pid, "maxmem": 9 * GiB, "running": 1}]
        cfg.write()
        b._procs_due = 0.0
        assert b.read([])[0].accounting_peaks == {child.pid: 7 * GiB}
        end0, end1 = b.read_accounting_at_end([])
        assert (end0.accounting, end0.accounting_peaks) == (True, {child.pid: 7 * GiB})
        assert (end1.accounting, end1.accounting_peaks) == (False, {})
    finally:
        b.close()


def test_the_tool_never_changes_a_device_setting() -> None:
    """Only Get/Query NVML calls: no nvmlDeviceSet*, Clear*, Reset* anywhere in the package."""
    pkg = Path(__file__).resolve().parents[1] / "gputop_tracker"
    setters = re.compile(r"nvml(Device|Gpu|Vgpu|Unit)?(Set|Clear|Reset)\w*")
    found = [f"{path.name}: {m.group(0)}" for path in pkg.rglob("*.py") for m in setters.finditer(path.read_text())]
    assert found == []


# ------------------------------------------------------------------ end to end


def test_cli_reports_the_drivers_exact_peaks(tmp_path: Path, fake_lib: Path) -> None:
    """Samples see 1000 / 3000 MiB; the driver kept 5000 / 3500 MiB (spikes between samples): the report's
    main and per-process peaks are the driver's, labelled exact; the text report says accounting is on."""
    fake = FakeNvml(tmp_path / "nvml.conf", two_gpus())
    for d in fake.devices:
        d["acct"] = 1
    fake.write()
    run_ = Run(tmp_path, fake_lib, fake)
    main, child = run_.pids()
    fake.accounting = [
        {"dev": 0, "pid": main, "maxmem": 2000 * MiB, "running": 1},
        {"dev": 1, "pid": child, "maxmem": 3500 * MiB, "running": 1},
    ]
    hold_memory(fake, main, child)
    time.sleep(SETTLE)
    fake.accounting[0]["maxmem"] = 5000 * MiB  # a spike just before the end: only the read at the end sees it
    fake.write()
    code, err, rep = run_.finish()
    assert code == 7, err
    g_ = rep["max_gpu_ram"]
    assert g_["main"] == 5000 * MiB
    assert g_["descendants"] == 3500 * MiB
    assert g_["combined"] == 5000 * MiB
    assert g_["accounting"] is True
    assert rep["sources"]["max_gpu_ram.main"] == LABEL
    # exact when no descendant can have gone unseen; else (the command reaped its child) a lower bound
    assert rep["sources"]["max_gpu_ram.descendants"] in (LABEL, "lower bound (NVML accounting: the largest single "
                                                         "peak; peaks may not coincide)")  # fmt: skip
    procs = {p["pid"]: p for p in rep["processes"]}
    assert (procs[main]["peak_gpu_memory"], procs[main]["peak_gpu_memory_source"]) == (5000 * MiB, LABEL)
    assert (procs[child]["peak_gpu_memory"], procs[child]["peak_gpu_memory_source"]) == (3500 * MiB, LABEL)
    assert {x["uuid"]: x["accounting"] for x in rep["gpus"]} == {GPU0: True, GPU1: True}
    shown = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "sessions", "show", rep["session_id"]],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert "NVML accounting on" in shown.stdout, shown.stdout + shown.stderr


def test_cli_with_accounting_off_says_so_and_how_to_turn_it_on(tmp_path: Path, fake_lib: Path) -> None:
    fake = FakeNvml(tmp_path / "nvml.conf", two_gpus())  # acct=0: as NVIDIA ships it
    _, rep, _, _ = run_holding_memory(tmp_path, fake_lib, fake)
    assert rep["max_gpu_ram"]["accounting"] is False
    assert rep["max_gpu_ram"]["main"] == 1000 * MiB
    assert rep["sources"]["max_gpu_ram.main"].startswith("sampled at 50 Hz (NVML running processes)")  # the watcher
    assert any("accounting mode is off on GPU 0, 1" in n and "nvidia-smi -am 1" in n for n in rep["notes"])


def test_a_gpu_that_cannot_keep_records_leaves_a_lower_bound_but_accounting_is_not_called_off() -> None:
    """A MIG GPU answers no mode: a process may have used it with no record, so nothing is exact; yet nothing
    is off, so the report does not tell an administrator to turn it on."""
    steps = [[acct(0, True, {MAIN: 2 * GiB}, processes={MAIN: 1 * GiB}), acct(1, None, {})]] * 2
    u = summary(steps)
    assert u.max_gpu_ram.main == 2 * GiB
    assert "cannot keep accounting records" in u.sources["max_gpu_ram.main"]
    assert u.max_gpu_ram.accounting is True
    assert not any("accounting mode is off" in n for n in u.notes)
