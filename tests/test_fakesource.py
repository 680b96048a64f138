"""The fake live source (tests/fakesource.py) that snapshots and screenshots draw: its reports come from the real
summary builder, and they agree with the samples it streams (no figure of its own, nothing from this machine)."""

from __future__ import annotations

import itertools
import signal
import socket

from fakesource import CORES, HOST_NAME, MAIN_PID, START_TIME, TREE, FakeSource, make_sample, make_summary

from gputop_tracker.core.model.models import ResourceUsage, Sample
from gputop_tracker.core.sampling.channel import Progress, SampleMessage, Summary


def _script(src: FakeSource) -> tuple[list[Progress], list[Sample], list[ResourceUsage]]:
    """Every message of an ended run, by kind."""
    msgs = list(src.messages())  # ends with the run's end
    progress = [m for m in msgs if isinstance(m, Progress)]
    samples = [m.sample for m in msgs if isinstance(m, SampleMessage)]
    return progress, samples, [m.usage for m in msgs if isinstance(m, Summary)]


def test_the_final_report_holds_every_figure_its_samples_showed() -> None:
    samples = [make_sample(i) for i in range(20)]
    u = make_summary(samples)
    trees = [s.tree for s in samples]
    assert u.max_ram.combined.total_rss >= max(t.combined_total for t in trees)
    assert u.max_ram.combined_sampled == max(t.combined_total for t in trees)
    assert u.max_ram.main.total_rss == max(p.peak_rss for s in samples for p in s.processes if p.pid == MAIN_PID)
    assert u.max_gpu_ram.combined == max(t.gpu_memory for t in trees)
    assert u.peak_threads == max(t.threads for t in trees)
    assert u.cpu_utilization.combined.max_sum_percent == max(t.cpu_percent for t in trees)
    assert u.cpu_time.total == samples[-1].tree.cpu_seconds  # every process reaped with its last reading
    assert u.cpu_time.source == "exact" and u.status == "exited" and u.exit_code == 0
    rows = {p.pid: p for p in u.processes}
    assert set(rows) == {row[0] for row in TREE} and u.n_processes == len(TREE)
    for s in samples:
        for p in s.processes:
            assert rows[p.pid].peak_rss >= p.rss and rows[p.pid].max_cpu_percent >= p.cpu_percent
    for g in u.gpus:
        seen = [x for s in samples for x in s.gpus if x.index == g.index]
        assert g.tree_peak_memory == max(x.tree_memory for x in seen) and g.simulated
        assert g.max_utilization == max(x.utilization_gpu or 0 for x in seen)


def test_cpu_time_only_grows_and_matches_the_sampled_rate() -> None:
    samples = [make_sample(i) for i in range(20)]
    for before, after in itertools.pairwise(samples):
        for p, q in zip(before.processes, after.processes, strict=True):
            assert q.cpu_seconds >= p.cpu_seconds
    u = make_summary(samples)
    rates = [s.tree.cpu_percent for s in samples[1:]]  # sample 0 ends no interval
    assert abs(u.cpu_time.mean_percent - sum(rates) / len(rates)) < 1.0


def test_nothing_comes_from_this_machine_or_its_clock() -> None:
    u = make_summary([make_sample(i) for i in range(5)], status="killed", exit_code=137, exit_signal=9)
    assert u.host == HOST_NAME and u.host != socket.gethostname()
    assert u.cpu_utilization.system_core_count == CORES and u.cpu_utilization.n_expected_cores == CORES
    assert all(START_TIME <= e.time <= START_TIME + 4 for e in u.events)
    assert [e.signal for e in u.events if e.type == "process_exited" and e.pid == MAIN_PID] == [9]
    assert make_summary([make_sample(i) for i in range(5)]) == make_summary([make_sample(i) for i in range(5)])


def test_the_source_streams_the_builders_running_summaries_then_its_report() -> None:
    src = FakeSource(6, finished=True)
    progress, samples, finals = _script(src)
    assert len(progress) == len(samples) == 6 and len(finals) == 1
    for k, msg in enumerate(progress):  # the running summary of the first k + 1 samples
        assert msg.usage.n_samples == k + 1 and msg.usage.status == "running" and msg.usage.processes == []
        assert msg.usage.max_ram.combined_sampled == max(s.tree.combined_total for s in samples[: k + 1])
    assert finals[0] == make_summary(samples)


def test_a_signal_ends_the_run_as_killed_with_every_process_reaped() -> None:
    src = FakeSource(4)
    src.signal(signal.SIGTERM)
    final = _script(src)[2][0]
    assert (final.status, final.exit_code, final.exit_signal) == ("killed", 128 + signal.SIGTERM, signal.SIGTERM)
    exited = [e for e in final.events if e.type == "process_exited"]
    assert len(exited) == len(TREE) and {e.signal for e in exited} == {signal.SIGTERM}
