"""The pure rules of trust, with synthetic readings: no process, no timing luck.

- peaks.combined_peak / reaped_process_peak: which peak is reported and whether its label may say exact;
- accumulators.CpuLedger: every CPU-second counted exactly once, whoever reaped whom;
- procfs._carry_forward: private/shared/PSS between smaps reads are lower bounds, whatever statm did.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from gputop_tracker.core.proc.procfs import Reading, _carry_forward
from gputop_tracker.core.summary.accumulators import CpuLedger
from gputop_tracker.core.summary.peaks import TreeBounds, agree, combined_peak, reaped_process_peak

MB = 1_000_000

# --------------------------------------------------------------------------- combined peak


def bounds(single: int, sampled: int, seen: int, upper: int | None, why: str = "") -> TreeBounds:
    return TreeBounds(largest_single=single, sampled=sampled, seen_sum=seen, upper=upper, upper_why=why)


@pytest.mark.parametrize("cgroup", [60 * MB, 75 * MB, 400 * MB])
def test_a_peak_no_counter_reports_means_the_cgroup_is_not_exact(cgroup: int) -> None:
    """A child reaped by a process still running (or by the kernel) may have mapped file pages charged to other
    cgroups: whatever the cgroup reads, below, at or above the processes' figures, it cannot be confirmed."""
    b = TreeBounds(
        largest_single=60 * MB,
        sampled=70 * MB,
        seen_sum=75 * MB,
        upper=None,
        hidden="PID 7 (worker) reaped children and outlived tracking",
    )
    pk = combined_peak(b, cgroup, "cgroup v2 memory.peak")
    assert not pk.exact and pk.value == 70 * MB and "outlived tracking" in pk.label


def test_no_cgroup_one_process_is_exact() -> None:
    pk = combined_peak(bounds(500 * MB, 480 * MB, 500 * MB, 500 * MB))
    assert pk.exact and pk.value == 500 * MB and pk.label.startswith("exact")


def test_no_cgroup_many_processes_is_a_sampled_lower_bound() -> None:
    pk = combined_peak(bounds(500 * MB, 700 * MB, 1200 * MB, 1200 * MB))
    assert not pk.exact and pk.value == 700 * MB and "lower bound" in pk.label


def test_no_cgroup_no_upper_bound_says_why() -> None:
    pk = combined_peak(bounds(500 * MB, 700 * MB, 900 * MB, None, "processes reaped by their parents (3)"))
    assert not pk.exact and "reaped by their parents" in pk.label


def test_cgroup_between_bounds_is_exact() -> None:
    pk = combined_peak(bounds(500 * MB, 700 * MB, 1200 * MB, 1200 * MB), 900 * MB, "cgroup v2 memory.peak")
    assert pk.exact and pk.value == 900 * MB and pk.source == "cgroup"


def test_cgroup_above_exact_upper_bound_reports_the_upper_bound_and_names_page_cache_and_kernel_memory() -> None:
    pk = combined_peak(bounds(500 * MB, 700 * MB, 1200 * MB, 1200 * MB), 3000 * MB)
    assert not pk.exact and pk.value == 1200 * MB and pk.source == "upper_bound"
    assert "page cache" in pk.label and "kernel memory" in pk.label


def test_cgroup_above_a_single_process_peak_keeps_the_exact_label() -> None:
    """Item 7: an exact single-process peak is never relabelled an upper bound because the cgroup is larger."""
    pk = combined_peak(bounds(500 * MB, 480 * MB, 500 * MB, 500 * MB), 530 * MB)
    assert pk.exact and pk.value == 500 * MB and pk.label.startswith("exact")


def test_cgroup_above_when_no_upper_bound_reports_the_lower_bound_and_never_calls_the_cgroup_a_ceiling() -> None:
    """Page cache: a job that read a big file has it in its cgroup; it is not process memory. Nor is the cgroup a
    ceiling: a process unseen at its peak may have mapped a file cached by another cgroup (charged there, not
    here), and a label must never fall on the wrong side of the truth."""
    pk = combined_peak(bounds(500 * MB, 700 * MB, 800 * MB, None, "x"), 3000 * MB)
    assert not pk.exact and pk.value == 700 * MB and pk.label.startswith("sampled lower bound")
    assert "3000000000 bytes" in pk.label and "neither way" in pk.label and "at most" not in pk.label
    nothing_seen = combined_peak(bounds(0, 0, 0, None, "x"), 262144)  # `sh -c 'exit 3'`: gone before a sample
    assert nothing_seen.value == 0 and "at most" not in nothing_seen.label and not nothing_seen.exact


def test_cgroup_slightly_below_the_only_process_agrees() -> None:
    pk = combined_peak(bounds(1010 * MB, 800 * MB, 1010 * MB, 1010 * MB), 1005 * MB)
    assert pk.exact and pk.value == 1010 * MB


def test_cgroup_slightly_below_the_largest_of_several_is_a_lower_bound() -> None:
    """A shell parent (its own pages ~1 MB) and a 1010 MB python: the cgroup reads 1005 MB, as it leaves out library
    pages charged elsewhere. The tree held the python's peak plus the shell's own pages at that moment: more than
    1010 MB, which was labelled exact. Below the largest process, the cgroup bounds nothing from above."""
    for upper in (None, 1020 * MB):
        pk = combined_peak(bounds(1010 * MB, 800 * MB, 1020 * MB, upper, "x"), 1005 * MB)
        assert not pk.exact and pk.value == 1010 * MB and pk.label.startswith("lower bound"), pk


def test_cgroup_far_below_largest_process_is_a_lower_bound() -> None:
    pk = combined_peak(bounds(1000 * MB, 800 * MB, 1500 * MB, 1500 * MB), 600 * MB)
    assert not pk.exact and pk.value == 1000 * MB and "lower bound" in pk.label


@pytest.mark.parametrize(
    ("single", "sampled", "extra", "cgroup"),
    list(
        itertools.product(
            [0, 10 * MB, 500 * MB], [0, 20 * MB, 600 * MB], [0, 1, 400 * MB], [None, 0, 550 * MB, 5000 * MB]
        )
    ),
)
def test_combined_never_below_what_is_known_and_exact_only_with_a_counter(
    single: int, sampled: int, extra: int, cgroup: int | None
) -> None:
    upper = max(single, sampled) + extra
    pk = combined_peak(bounds(single, sampled, upper, upper), cgroup)
    assert pk.value >= max(single, sampled)  # never below a lower bound
    if pk.source == "upper_bound":
        assert pk.value >= max(single, sampled) and not pk.exact
    if pk.exact and cgroup is None:
        assert agree(upper, max(single, sampled))


# --------------------------------------------------------------------------- one process we reaped


def test_reaped_no_children_above_launcher_is_exact_rusage() -> None:
    pk = reaped_process_peak(50 * MB, 80 * MB, floor=15 * MB, own_only=True)
    assert pk.exact and pk.value == 80 * MB and pk.source == "ru_maxrss"


def test_reaped_below_launcher_copy_is_a_lower_bound() -> None:
    """Item 3: `python3 -c pass` is smaller than our own fork copy: its ru_maxrss is ours, not its."""
    pk = reaped_process_peak(5 * MB, 0, floor=15 * MB, own_only=True)
    assert not pk.exact and pk.value == 5 * MB and "lower bound" in pk.label


def test_reaped_with_children_uses_rusage_only_when_it_agrees() -> None:
    agrees = reaped_process_peak(100 * MB, 100 * MB + 8192, own_only=False)  # the counters round differently
    assert agrees.exact and agrees.value == 100 * MB + 8192
    # 1 % above: it grew after the last sample, or a child it waited for peaked there; no figure says which
    near = reaped_process_peak(100 * MB, 101 * MB, own_only=False)
    assert not near.exact and near.value == 100 * MB and "children it waited for" in near.label
    other = reaped_process_peak(3 * MB, 114 * MB, own_only=False)
    assert not other.exact and other.value == 3 * MB and "children it waited for" in other.label


# --------------------------------------------------------------------------- CPU ledger


def ledger_with(live: dict[int, tuple[float, float]]) -> CpuLedger:
    led = CpuLedger()
    for pid, v in live.items():
        led.live[pid] = v
    led.close_sample(sum(v[0] for v in live.values()), sum(v[1] for v in live.values()))
    return led


def test_pipeline_two_levels_down_counted_once() -> None:
    """Item 1: main(1) -> sh(2) -> {yes(3), sha(4)}; sh and its children vanish in one interval. sh waited for
    them (its cutime holds them) and main waited for sh: only main's next reading counts all of it."""
    led = ledger_with({1: (0.1, 0.0), 2: (0.0, 0.0), 3: (1.0, 0.2), 4: (2.0, 0.1)})
    led.vanish([2, 3, 4], {2: 1, 3: 2, 4: 2}, alive={1})
    led.close_sample(0.1 + 3.0, 0.3)  # main's cutime/cstime now hold sh, which held yes and sha
    assert led.total == pytest.approx(3.4)


def test_vanished_parent_reaped_by_us_in_the_same_pass() -> None:
    led = ledger_with({1: (0.5, 0.0), 2: (1.0, 0.0)})
    led.reap(1, 1.6, 0.0)  # main's rusage includes the child it waited for
    led.vanish([2], {2: 1}, alive=set())
    led.close_sample(0.0, 0.0)
    assert led.total == pytest.approx(1.6)


def test_attach_parent_outside_the_tree_banks_the_last_readings() -> None:
    """Attached: main's reaper is not ours; main and its child vanish together; both last readings count."""
    led = ledger_with({1: (2.0, 0.0), 2: (1.0, 0.0)})
    led.vanish([1, 2], {1: 999, 2: 1}, alive=set())
    led.close_sample(0.0, 0.0)
    assert led.total == pytest.approx(3.0)


def test_total_never_decreases() -> None:
    led = ledger_with({1: (1.0, 1.0)})
    led.close_sample(0.5, 0.5)  # a reading that went backwards (re-split, or a reaped child not yet seen)
    assert led.total == pytest.approx(2.0)


def test_attach_baseline_counts_from_the_attach() -> None:
    led = CpuLedger()
    led.start_attached(100.0, 10.0)
    led.close_sample(100.0, 10.0)
    led.close_sample(101.0, 10.5)
    assert led.total == pytest.approx(1.5)


# --------------------------------------------------------------------------- private / shared between reads


def handle_read(uss: int, pss: int, anon: int, file_shmem: int) -> SimpleNamespace:
    return SimpleNamespace(uss=uss, pss=pss, smaps_anon=anon, smaps_shared=file_shmem, smaps_rss=anon + file_shmem)


@pytest.mark.parametrize("d_anon", [-50 * MB, 0, 80 * MB])
@pytest.mark.parametrize("d_file", [-30 * MB, 0, 900 * MB])
@pytest.mark.parametrize("file_share", [0.0, 0.5, 1.0])
def test_carry_forward_figures_are_lower_bounds(d_anon: int, d_file: int, file_share: float) -> None:
    """At the read: 100 MB anon (80 private, 20 COW-shared with one process), 50 MB of file pages (10 private).
    Then anon and file pages change by d_anon / d_file; new file pages are shared in a share `file_share`,
    freed pages come from the shared ones first (the worst case for the shared figures) or the private ones
    (the worst case for private). Every figure must stay at or below the truth in both worlds."""
    h = handle_read(uss=90 * MB, pss=90 * MB + 30 * MB, anon=100 * MB, file_shmem=50 * MB)
    r = Reading()
    _carry_forward(r, h, 100 * MB + d_anon, 50 * MB + d_file)  # type: ignore[arg-type]
    private0, shared0 = 90 * MB, 60 * MB
    for freed_from_shared in (True, False):
        grown_anon, grown_file = max(0, d_anon), max(0, d_file)
        lost = -min(0, d_anon) - min(0, d_file)
        lost_shared = min(lost, shared0) if freed_from_shared else max(0, lost - private0)
        lost_private = lost - lost_shared
        true_private = private0 - lost_private + grown_anon + int(grown_file * (1 - file_share))
        true_shared = shared0 - lost_shared + int(grown_file * file_share)
        assert r.private <= true_private
        assert r.shared <= true_shared
        assert r.private + r.shared <= 150 * MB + d_anon + d_file


def test_file_mapping_growth_is_not_called_shared() -> None:
    """Item 4: a process maps 1 GB of its own file between two reads: shared must not jump by 1 GB."""
    h = handle_read(uss=10 * MB, pss=12 * MB, anon=10 * MB, file_shmem=5 * MB)
    r = Reading()
    _carry_forward(r, h, 10 * MB, 1005 * MB)  # type: ignore[arg-type]
    assert r.shared <= 5 * MB
    assert r.pss_shared <= 2 * MB


def test_anonymous_growth_is_private_at_once() -> None:
    h = handle_read(uss=10 * MB, pss=12 * MB, anon=10 * MB, file_shmem=5 * MB)
    r = Reading()
    _carry_forward(r, h, 510 * MB, 5 * MB)  # type: ignore[arg-type]
    assert r.private == 510 * MB and r.pss == 512 * MB


def test_cgroup_a_little_above_the_largest_process_is_exact() -> None:
    """Page tables and the parent's own pages: the cgroup reads a few MB above the largest process."""
    pk = combined_peak(bounds(1008 * MB, 960 * MB, 930 * MB, None, "x"), 1015 * MB)
    assert pk.exact and pk.value == 1015 * MB and pk.source == "cgroup"


def test_cgroup_is_not_exact_without_an_exact_single_peak_to_check_it_against() -> None:
    """`python -c pass`: its own peak is a lower bound (5 MB seen of 11); the cgroup (5.2 MB) leaves out the
    library pages charged to other cgroups. Agreeing with a lower bound proves nothing."""
    b = TreeBounds(largest_single=5_100_000, sampled=5_000_000, seen_sum=5_100_000, upper=None, largest_exact=False)
    pk = combined_peak(b, 5_200_000)
    assert not pk.exact and pk.value == 5_100_000 and "cannot be checked" in pk.label
