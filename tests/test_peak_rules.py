"""The pure rules of trust, with synthetic readings: no process, no timing luck.

- (which peak is reported and whether it is exact: tests/test_evidence.py)
- accumulators.CpuLedger: every CPU-second counted exactly once, whoever reaped whom;
- procfs._carry_forward: private/shared/PSS between smaps reads are lower bounds, whatever statm did.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gputop_tracker.core.proc.procfs import Reading, _carry_forward
from gputop_tracker.core.summary.accumulators import CpuLedger

MB = 1_000_000


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
