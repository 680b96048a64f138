"""OomDetector with a fake clock and fake counters: which deaths a counter rise is attributed to."""

from __future__ import annotations

import signal

from gputop_tracker.core.sampling.oomdetect import OomDetector, OomKill

SIGKILLED = -signal.SIGKILL  # os.waitstatus_to_exitcode of a process killed by SIGKILL
MAIN, CHILD = 100, 200


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counters:
    """rose() answers what the next check should see: a rise when `bump()` was called since the last one."""

    def __init__(self) -> None:
        self.value = 7
        self.seen = 7

    def bump(self) -> None:
        self.value += 1

    def rose(self) -> str | None:
        before, self.seen = self.seen, self.value
        return f"fake oom_kill {before} -> {self.value}" if self.value > before else None


def make(interval: float = 0.5) -> tuple[OomDetector, Clock, Counters]:
    clock, counters = Clock(), Counters()
    return OomDetector(clock, counters, interval=interval, main_pid=MAIN), clock, counters


def assert_one_sigkill_attributed_to(detector: OomDetector, counters: Counters, pid: int, why_once: str) -> None:
    """The kernel's OOM-kill counter rises: the detector names `pid`, SIGKILLed, as the victim, and counts it
    killed; another rise finds no death left to attribute (`why_once` says why)."""
    counters.bump()
    assert detector.check() == OomKill(pid, signal.SIGKILL, "fake oom_kill 7 -> 8")
    assert detector.killed == {pid}
    counters.bump()
    assert detector.check() is None, why_once


def test_rise_and_a_sigkill_we_reaped_within_the_window_is_attributed() -> None:
    detector, clock, counters = make()
    detector.reaped(CHILD, SIGKILLED)
    assert detector.check() is None  # no rise yet
    clock.now += 2.0  # the counter is read a few samples later: still within OOM_SIGKILL_WINDOW (3 s)
    detector.check()
    clock.now += 0.5
    assert_one_sigkill_attributed_to(detector, counters, CHILD, "a death is attributed once")


def test_sigkill_after_the_rise_within_the_window_is_attributed() -> None:
    detector, clock, counters = make()
    counters.bump()
    assert detector.check() is None  # the rise waits for a death
    for _ in range(4):
        clock.now += 0.5
        assert detector.check() is None
    detector.reaped(MAIN, SIGKILLED)  # the victim took 2 s to exit
    assert detector.check() == OomKill(MAIN, signal.SIGKILL, "fake oom_kill 7 -> 8")


def test_sigkill_outside_the_window_is_not_attributed() -> None:
    detector, clock, counters = make()
    detector.reaped(CHILD, SIGKILLED)
    clock.now += 3.5
    counters.bump()
    assert detector.check() is None
    assert detector.killed == set()


def test_rise_with_a_clean_exit_is_not_attributed() -> None:
    detector, _clock, counters = make()
    detector.reaped(CHILD, 0)
    detector.gone(CHILD)  # reaped, so leaving the tree is not a vanishing
    counters.bump()
    assert detector.check() is None
    detector.reaped(MAIN, 1)
    detector.gone(MAIN)
    assert detector.check() is None
    assert detector.killed == set()


def test_rise_with_no_death_expires() -> None:
    detector, clock, counters = make()
    counters.bump()
    assert detector.check() is None
    clock.now += 3.5  # past the window: the rise is dropped
    assert detector.check() is None
    detector.gone(CHILD)  # a later vanishing is no longer matched with it
    detector.reaped(MAIN, SIGKILLED)
    clock.now += 0.1
    assert detector.check() is None
    assert detector.killed == set()


def test_vanished_in_the_same_sample_is_attributed() -> None:
    detector, _clock, counters = make()
    detector.gone(CHILD)  # left the tree with a status we never saw
    counters.bump()
    assert detector.check() == OomKill(CHILD, None, "fake oom_kill 7 -> 8")


def test_vanished_in_the_next_sample_is_attributed() -> None:
    detector, clock, counters = make()
    counters.bump()
    assert detector.check() is None
    clock.now += 0.5
    detector.gone(CHILD)
    assert detector.check() == OomKill(CHILD, None, "fake oom_kill 7 -> 8")


def test_vanished_two_samples_before_the_rise_is_not_attributed() -> None:
    detector, clock, counters = make()
    detector.gone(CHILD)
    assert detector.check() is None
    clock.now += 0.5
    counters.bump()
    assert detector.check() is None
    assert detector.killed == set()


def test_main_pid_is_preferred() -> None:
    detector, _clock, counters = make()
    detector.reaped(CHILD, SIGKILLED)
    detector.reaped(MAIN, SIGKILLED)
    detector.gone(300)
    assert_one_sigkill_attributed_to(detector, counters, MAIN, "the other deaths matched with that rise are used up")


def test_long_interval_widens_the_window() -> None:
    detector, clock, counters = make(interval=2.0)  # window: 3 intervals = 6 s
    detector.reaped(CHILD, SIGKILLED)
    clock.now += 5.0
    counters.bump()
    assert detector.check() == OomKill(CHILD, signal.SIGKILL, "fake oom_kill 7 -> 8")
