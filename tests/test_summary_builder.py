"""SummaryBuilder (core/summary/builder.py) fed synthetic readings directly, as the sampler feeds it: `vanished`
before the next `add` for processes whose parent reaped them, `reaped` for children we reaped. No process, no
clock: every figure below follows from the readings by hand.

The tree: main (100) with two children, 101 and 102. 102 peaks at 150 MB before the first sample (its VmHWM
says so) and is reaped by main between the samples: its time moves into main's cutime.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gputop_tracker.core.model.models import ResourceUsage, Sample
from gputop_tracker.core.proc.procfs import Reading
from gputop_tracker.core.report.render import to_text
from gputop_tracker.core.summary.builder import SummaryBuilder

MB = 1_000_000
MAIN, A, B = 100, 101, 102
HOST = (16_000 * MB, 8_000 * MB, 10.0)


def reading(
    pid: int,
    ppid: int,
    *,
    rss: int,
    hwm: int,
    own_cpu: float,
    user: float,
    system: float,
    cpu_percent: float,
    threads: int,
) -> Reading:
    """One process as one sample read it. `own_cpu` = its utime + stime; `user`/`system` also hold the
    children it waited for (cutime, cstime). Private = PSS = RSS: nothing shared."""
    r = Reading()
    r.handle = SimpleNamespace(pid=pid, ppid=ppid, name=f"p{pid}", cmdline=[f"p{pid}", "--x"])  # type: ignore[assignment]
    r.rss = r.private = r.pss = rss
    r.hwm = hwm
    r.utime_stime = own_cpu
    r.user_total, r.system_total = user, system
    r.cpu_percent = cpu_percent
    r.threads = threads
    return r


def first_sample() -> list[Reading]:
    return [
        reading(MAIN, 1, rss=50 * MB, hwm=60 * MB, own_cpu=1.2, user=1.0, system=0.2, cpu_percent=50.0, threads=4),
        reading(A, MAIN, rss=30 * MB, hwm=30 * MB, own_cpu=0.6, user=0.5, system=0.1, cpu_percent=100.0, threads=2),
        reading(B, MAIN, rss=20 * MB, hwm=150 * MB, own_cpu=0.7, user=0.7, system=0.0, cpu_percent=70.0, threads=1),
    ]


def second_sample() -> list[Reading]:
    # B is gone: main waited for it, so main's user time now holds B's 0.7 s (cutime) beside its own 0.5 s more
    return [
        reading(MAIN, 1, rss=40 * MB, hwm=60 * MB, own_cpu=2.0, user=2.2, system=0.3, cpu_percent=80.0, threads=3),
        reading(A, MAIN, rss=35 * MB, hwm=90 * MB, own_cpu=1.6, user=1.5, system=0.1, cpu_percent=100.0, threads=2),
    ]


def builder() -> SummaryBuilder:
    return SummaryBuilder(
        main_pid=MAIN, command=["p100", "--x"], mode="launch", interval=1.0, start_time=0.0, n_expected_cores=2
    )


def two_samples() -> SummaryBuilder:
    b = builder()
    b.add(1.0, first_sample(), [], HOST)
    b.vanished([B], alive={MAIN, A})
    b.add(2.0, second_sample(), [], HOST)
    return b


def rows(u: ResourceUsage) -> dict[int, Any]:
    return {p.pid: p for p in u.processes}


def unknown_keys(raw: Any, dumped: Any, where: str = "") -> list[str]:
    """Keys of the builder's dict that the model does not have (pydantic ignores them silently)."""
    if isinstance(raw, dict) and isinstance(dumped, dict):
        out = [f"{where}.{k}" for k in raw if k not in dumped]
        return out + [x for k in raw if k in dumped for x in unknown_keys(raw[k], dumped[k], f"{where}.{k}")]
    if isinstance(raw, list) and isinstance(dumped, list):
        return [
            x for i, (r, d) in enumerate(zip(raw, dumped, strict=True)) for x in unknown_keys(r, d, f"{where}[{i}]")
        ]
    return []


# --------------------------------------------------------------------------- per process


def test_each_process_keeps_its_own_peak_from_vmhwm() -> None:
    u = ResourceUsage.model_validate(two_samples().summary())
    p = rows(u)
    assert (p[MAIN].peak_rss, p[A].peak_rss) == (60 * MB, 90 * MB)  # VmHWM, not the RSS sampled
    assert p[MAIN].peak_rss_exact and p[A].peak_rss_exact
    assert p[MAIN].peak_rss_source == "exact (VmHWM)"
    assert (p[MAIN].role, p[A].role, p[B].role) == ("main", "descendant", "descendant")
    assert p[A].peak_threads == 2 and p[MAIN].peak_threads == 4
    assert p[A].max_cpu_percent == 100.0 and p[MAIN].max_cpu_percent == 80.0
    assert p[A].cmdline == ["p101", "--x"] and p[A].ppid == MAIN


def test_a_process_gone_between_samples_keeps_its_peak_as_a_lower_bound() -> None:
    b = two_samples()
    u = ResourceUsage.model_validate(b.summary())
    gone = rows(u)[B]
    assert gone.peak_rss == 150 * MB  # from its last VmHWM, though no later sample saw it
    assert not gone.peak_rss_exact and "lower bound" in gone.peak_rss_source
    assert (gone.first_seen, gone.last_seen) == (1.0, 1.0)
    assert gone.cpu_seconds == pytest.approx(0.7)
    # still the largest descendant, so still the descendants' and the tree's peak
    assert u.max_ram.descendants.total_rss == 150 * MB
    assert u.max_ram.combined.total_rss >= 150 * MB
    assert [e.pid for e in u.events if e.type == "process_exited"] == [B]
    assert b.vanished_by_others == 1


# --------------------------------------------------------------------------- main vs descendants


def test_main_and_descendants_are_split() -> None:
    u = ResourceUsage.model_validate(two_samples().summary())
    ram = u.max_ram
    assert ram.main.total_rss == 60 * MB  # main's VmHWM: above anything sampled
    assert ram.main.private_rss == 50 * MB  # largest main USS sampled
    assert ram.descendants.private_rss == 50 * MB  # 30 + 20 MB in the first sample
    assert ram.combined_sampled == 100 * MB  # Σ PSS of the first sample: 50 + 30 + 20
    assert ram.combined.private_rss == 100 * MB
    cpu = u.cpu_utilization
    assert cpu.main.max_sum_percent == 80.0 and cpu.main.mean_sum_percent == pytest.approx(65.0)
    assert cpu.descendants.max_sum_percent == 170.0 and cpu.descendants.mean_sum_percent == pytest.approx(135.0)
    assert cpu.combined.max_sum_percent == 220.0 and cpu.combined.mean_sum_percent == pytest.approx(200.0)
    assert cpu.combined.max_hardware_percent == pytest.approx(110.0)  # 2 expected cores
    assert (cpu.main_n_threads, cpu.descendants_n_threads, cpu.combined_n_threads) == (4, 3, 7)
    assert u.peak_threads == 7


def test_no_descendants_is_said_and_they_count_zero() -> None:
    b = builder()
    b.add(1.0, first_sample()[:1], [], HOST)
    u = ResourceUsage.model_validate(b.summary())
    assert u.max_ram.descendants.total_rss == 0
    assert u.sources["max_ram.descendants.total_rss"] == "no descendants"
    assert u.cpu_utilization.descendants.max_sum_percent == 0.0
    assert u.max_ram.combined.total_rss == 60 * MB and u.max_ram.combined.total_rss == u.max_ram.main.total_rss


# --------------------------------------------------------------------------- CPU time


def test_cpu_seconds_total_counts_a_waited_for_child_once() -> None:
    u = ResourceUsage.model_validate(two_samples().summary())
    t = u.cpu_time
    # the second sample holds everything: main 2.2 + 0.3 (B's 0.7 s inside), A 1.5 + 0.1
    assert t.user == pytest.approx(3.7) and t.system == pytest.approx(0.4) and t.total == pytest.approx(4.1)
    assert t.mean_percent == pytest.approx(205.0)  # 4.1 s over 2 s of wall time
    assert t.source == "sampled"
    p = rows(u)
    assert p[MAIN].cpu_seconds == pytest.approx(2.0) and p[A].cpu_seconds == pytest.approx(1.6)


def test_a_child_we_reap_banks_its_exact_rusage() -> None:
    b = two_samples()
    # A, orphaned and reparented to the tracker, ran 0.5 s more after the last sample; we reaped it
    b.reaped(A, 1.9, 0.2, 95 * MB, 0, who=(f"p{A}", MAIN, False))
    b.add(3.0, second_sample()[:1], [], HOST)  # the next sample: main alone, unchanged
    u = ResourceUsage.model_validate(b.summary())
    assert u.cpu_time.total == pytest.approx(2.5 + 2.1)  # main's reading + A's rusage; A's last reading dropped
    assert u.cpu_time.source == "exact"
    a = rows(u)[A]
    assert a.peak_rss == 95 * MB and a.peak_rss_exact and a.exit_code == 0  # ru_maxrss above its VmHWM seen


def test_cpu_total_never_goes_back_when_a_reading_does() -> None:
    b = builder()
    b.add(1.0, first_sample(), [], HOST)
    b.add(2.0, [r for r in first_sample() if r.handle.pid != B], [], HOST)  # B gone, nobody told us yet
    u = ResourceUsage.model_validate(b.summary())
    assert u.cpu_time.total == pytest.approx(2.5)


# --------------------------------------------------------------------------- counts and the schema


def test_n_processes_counts_every_process_seen_and_one_reaped_unseen() -> None:
    b = two_samples()
    assert ResourceUsage.model_validate(b.summary()).n_processes == 3
    b.reaped(103, 0.01, 0.0, 3 * MB, 0, who=("short", MAIN, False))  # lived and died between two samples
    u = ResourceUsage.model_validate(b.summary())
    assert u.n_processes == 4 and b.unseen_reaped == 1
    assert rows(u)[103].peak_rss == 3 * MB and rows(u)[103].name == "short"
    assert u.n_samples == 2 and (u.start_time, u.end_time) == (0.0, 2.0)


def test_summary_and_sample_validate_against_the_models_with_no_unknown_key() -> None:
    b = builder()
    sample = b.add(1.0, first_sample(), [], HOST, want_sample=True)
    assert sample is not None
    s = Sample.model_validate(sample)
    assert unknown_keys(sample, s.model_dump()) == []
    assert s.tree.n_processes == 3 and s.tree.combined_total == 100 * MB and s.tree.main_rss == 50 * MB
    assert s.tree.cpu_seconds == pytest.approx(2.5) and s.tree.threads == 7
    b.vanished([B], alive={MAIN, A})
    b.add(2.0, second_sample(), [], HOST)
    raw = b.summary()
    u = ResourceUsage.model_validate(raw)
    assert unknown_keys(raw, u.model_dump()) == []
    assert u.command == ["p100", "--x"] and u.pid == MAIN and u.mode == "launch"
    assert u.max_ram.system == 8_000 * MB and u.max_ram.system_capacity == 16_000 * MB
    assert u.gpus == [] and u.max_gpu_ram.combined == 0


def test_details_false_leaves_out_processes_and_events_but_keeps_the_figures() -> None:
    b = two_samples()
    full = ResourceUsage.model_validate(b.summary())
    short = ResourceUsage.model_validate(b.summary(details=False))
    assert short.processes == [] and short.events == []
    assert full.processes and full.events
    assert short.max_ram == full.max_ram and short.cpu_time == full.cpu_time


def test_main_that_ended_before_any_sample_has_no_ram_figure_but_its_ru_maxrss_as_a_bound() -> None:
    """`sh -c 'exit 3'`: we reap main before a sample reads it, and its ru_maxrss (here 18 MB) is no more than
    our own fork copy (spawner_hwm 40 MB): nothing of the command was measured. The report says so, prints no
    0 B as if it were a figure, and gives the ru_maxrss as what it is, an upper bound of main's own peak."""
    b = SummaryBuilder(
        main_pid=MAIN, command=["sh", "-c", "exit 3"], mode="launch", interval=1.0, start_time=0.0, spawner_hwm=40 * MB
    )
    b.reaped(MAIN, 0.0, 0.002, 18 * MB, 3, who=("sh", 1, False))
    u = ResourceUsage.model_validate(b.summary())
    assert u.n_processes == 0 and u.max_ram.main.total_rss == 0 and u.max_ram.combined.total_rss == 0
    label = u.sources["max_ram.main.total_rss"]
    assert label.startswith("lower bound (not seen") and f"at most {18 * MB} bytes, its ru_maxrss" in label
    lines = to_text(u).splitlines()
    table = lines[lines.index(next(x for x in lines if x.startswith("RAM (peaks)"))) :]
    row = {x.split()[0]: x.split()[1:4] for x in table[1:4]}
    assert row == {"main": ["-"] * 3, "descendants": ["-"] * 3, "combined": ["-"] * 3}, "\n".join(lines)
    assert table[4].split()[:3] == ["combined", "(Σ)", "-"], "\n".join(lines)
