"""The derivation of every RAM peak from its evidence (core/summary/evidence.py), on synthetic readings.

The property tests draw random worlds from a hidden truth (processes with several images, resets, reaps, children
waited for, lives that overlap or not, a job cgroup that also counts page cache), give the derivation only what the
tool's sources would have seen, and check the promise: the derived bounds contain the truth, and a figure labelled
exact is the truth to the sources' rounding. What no source can see is left out of the worlds and said where:
a reset of VmHWM that no reading witnessed, and an exec no sample saw from an image larger than the last one but
no larger than what the parent could have passed down.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from gputop_tracker.core.summary.evidence import (
    SOURCES,
    Evidence,
    ProcessFacts,
    Span,
    TreeFacts,
    alive_together,
    ceiling,
    derive,
    process_figure,
    reading,
    tree_figure,
)
from gputop_tracker.core.summary.peaks import PAGE_SLACK

MB = 1 << 20


def within(a: float, b: float, rel: float = 0.02) -> bool:
    return abs(a - b) <= max(PAGE_SLACK, rel * max(a, b))


# --------------------------------------------------------------------------- the rule, case by case


def test_exact_only_where_a_reading_and_a_ceiling_meet() -> None:
    fig = derive([reading(500 * MB, "sampled"), ceiling(501 * MB, "reap")])
    assert fig.exact and fig.value == 501 * MB and (fig.lower, fig.upper) == (500 * MB, 501 * MB)
    fig = derive([reading(400 * MB, "sampled"), ceiling(600 * MB, "reap")])
    assert not fig.exact and fig.value == 400 * MB and (fig.lower, fig.upper) == (400 * MB, 600 * MB)
    assert fig.label.startswith("lower bound") and f"at most {600 * MB} bytes" in fig.label
    fig = derive([ceiling(600 * MB, "parent_reap")])
    assert not fig.exact and fig.value == 600 * MB and fig.lower is None and fig.label.startswith("upper bound")


def test_a_ceiling_below_a_reading_is_set_aside_and_named() -> None:
    fig = derive([reading(643 * MB, "sampled"), ceiling(29 * MB, "probe_maxrss", void="reset")])
    assert not fig.exact and fig.value == 643 * MB and fig.upper is None
    assert "set aside" in fig.label and "reset its VmHWM" in fig.label


def test_every_label_names_a_source_from_the_one_table() -> None:
    for source, text in SOURCES.items():
        fig = derive([Evidence(10 * MB, source, lower=True), Evidence(10 * MB, source, upper=True)])
        assert fig.label == f"exact ({text})"


def test_exec_after_a_larger_image_is_not_the_last_images_vmhwm() -> None:
    """A child holds 800 MiB, then execs into a 300 MiB program: ru_maxrss (every image) is its peak."""
    facts = ProcessFacts(read=0, probe_hwm=329 * MB, probe_maxrss=853 * MB, reap=853 * MB, floor=210 * MB)
    fig = process_figure(facts)
    assert fig.exact and fig.value == 853 * MB
    facts.waited_none = True
    assert process_figure(facts).value == 853 * MB


def test_vfork_inherits_the_parents_peak_into_ru_maxrss() -> None:
    """`ls` vforked by a 2 GB parent: its ru_maxrss is the parent's high-water mark, never its own reading."""
    fig = process_figure(ProcessFacts(read=0, reap=2000 * MB, waited_none=True, floor=2000 * MB))
    assert not fig.exact and fig.lower is None and fig.upper == 2000 * MB
    fig = process_figure(ProcessFacts(read=3 * MB, reap=2000 * MB, waited_none=True, floor=2000 * MB))
    assert fig.value == 3 * MB and not fig.exact


def test_a_reset_seen_leaves_only_readings() -> None:
    fig = process_figure(ProcessFacts(read=640 * MB, probe_hwm=29 * MB, probe_maxrss=29 * MB, reset=True))
    assert fig.value == 640 * MB and not fig.exact and fig.upper is None


def test_code_blocks_reset_and_record_what_they_cleared() -> None:
    fig = process_figure(ProcessFacts(read=600 * MB, blocks=600 * MB, probe_hwm=20 * MB, probe_maxrss=20 * MB))
    assert fig.exact and fig.value == 600 * MB


def test_sequential_lives_do_not_add_up() -> None:
    spans = [Span(95 * MB, float(i), i + 0.5) for i in range(50)]
    assert alive_together(spans, 0.0, 60.0) == 95 * MB
    spans.append(Span(10 * MB, None, None))  # a process of unknown life overlaps them all
    assert alive_together(spans, 0.0, 60.0) == 105 * MB
    assert alive_together([Span(5, 0.0, 1.0), Span(7, 1.0, 2.0)], 0.0, 3.0) == 12  # touching lives count together


def test_the_tree_cgroup_is_a_ceiling_and_exact_only_where_it_meets_a_reading() -> None:
    """The cgroup leaves out file pages charged to another cgroup before the run: its ceiling adds those the
    tree mapped (the samples' largest Σ), and is no ceiling where no sample read a process."""
    fig = tree_figure(TreeFacts(sum_pss=500 * MB, largest=853 * MB, largest_pid=7, cgroup=1066 * MB, file_pages=7 * MB))
    assert not fig.exact and (fig.lower, fig.upper) == (853 * MB, 1073 * MB) and "job cgroup" in fig.label
    fig = tree_figure(TreeFacts(sum_pss=500 * MB, largest=853 * MB, cgroup=853 * MB, file_pages=4096))
    assert fig.exact and fig.source == "cgroup"
    assert tree_figure(TreeFacts(sum_pss=0, largest=853 * MB, cgroup=1066 * MB)).upper is None  # no sample
    # below the largest process's own peak even with the file pages: set aside, both named
    fig = tree_figure(TreeFacts(sum_pss=40 * MB, largest=60 * MB, cgroup=52 * MB, file_pages=1 * MB))
    assert not fig.exact and fig.value == 60 * MB and "set aside" in fig.label and "charged to another" in fig.label
    # a parent's interpreter beside the child's peak: 2 % apart is not the same tree figure
    fig = tree_figure(TreeFacts(sum_pss=40 * MB, largest=1000 * MB, together=1010 * MB))
    assert not fig.exact and fig.upper == 1010 * MB
    fig = tree_figure(TreeFacts(sum_pss=40 * MB, largest=1000 * MB, together_why="PID 3 may have reaped others"))
    assert fig.upper is None and "no upper bound: PID 3" in fig.label


# --------------------------------------------------------------------------- the property: worlds and their evidence


@dataclass
class World:
    """One process's hidden truth and what the sources saw of it."""

    truth: int
    facts: ProcessFacts
    notes: list[str] = field(default_factory=list)


def _process_world(rng: random.Random, parent_peak: int, floor: int) -> World:
    """A process of a tree whose parent peaked at `parent_peak` (the tool knows `floor` >= it)."""
    execs = rng.choice([0, 0, 1, 1, 2])
    if execs == 0:  # a forked worker: one image, inherited pages included in its own RSS
        images = [rng.randint(1, 900) * MB]
        inherited = 0
    else:  # the stub between fork and exec held what the parent passed down (vfork: the parent's high-water mark)
        inherited = rng.choice([parent_peak, rng.randint(0, max(parent_peak, 1))])
        images = [rng.randint(1, 900) * MB for _ in range(execs)]
    truth = max(images)
    exec_seen = execs >= 2 and rng.random() < 0.5
    earlier = max(images[:-1], default=0)
    if execs >= 2 and not exec_seen and (earlier <= floor or within(earlier, floor)) and earlier > images[-1]:
        images[0] = images[-1]  # outside what any source sees (module docstring): kept out of the worlds
        truth = max(images)
    reset = rng.random() < 0.2
    last_hwm = rng.randint(0, images[-1]) if reset else images[-1]  # VmHWM at exit: since the reset
    maxrss = max([inherited, *images[:-1], last_hwm])
    ending = rng.choice(["probe", "reap", "both", "live", "parent_reap"])
    children = rng.random() < 0.3
    reap = max(maxrss, rng.randint(0, 2000) * MB if children else 0)
    f = ProcessFacts(floor=floor, exec_seen=exec_seen)
    reads = [rng.randint(0, img) for img in images if rng.random() < 0.6]
    # a reset that lowered a counter below the truth is witnessed (module docstring): a reading above every counter
    # it lowered; and maybe the sampler saw VmHWM go down itself
    lowered = [c for c in (last_hwm, maxrss, reap) if c < truth and not within(c, truth)]
    witness = int(max(lowered, default=0) / 0.98) + PAGE_SLACK
    if reset and lowered and witness <= truth:
        reads.append(rng.randint(witness, truth))
        f.reset = rng.random() < 0.5
    elif reset and lowered:
        last_hwm = maxrss = reap = truth  # no reading could witness it: kept out of the worlds
    f.read = max(reads, default=0)
    if ending in ("probe", "both"):
        f.probe_hwm, f.probe_maxrss = last_hwm, maxrss
    if ending in ("reap", "both", "parent_reap"):
        f.reap = reap
        f.reap_source = "parent_reap" if ending == "parent_reap" else "reap"
        f.waited_none = not children and rng.random() < 0.7
    if ending == "live":
        f.live_at_end = True
        f.read = max(f.read, last_hwm)  # VmHWM read when tracking ended: the current image's
        # that read comes after the witness's, in the same image: the sampler saw VmHWM go down
        f.reset = f.reset or (reset and f.read > last_hwm and not within(f.read, last_hwm))
    if ending == "live" and execs >= 2 and not exec_seen and not within(max(images[:-1]), images[-1]):
        f.exec_seen = True  # a live process keeps no ru_maxrss we can read: an unseen exec is invisible; kept out
    return World(truth, f)


@pytest.mark.parametrize("seed", range(8))
def test_property_each_process_bounds_contain_the_truth(seed: int) -> None:
    rng = random.Random(seed)
    exact = wrong = 0
    for _ in range(1500):
        parent_peak = rng.randint(1, 2000) * MB
        floor = rng.choice([parent_peak, parent_peak + rng.randint(0, 100) * MB, 1 << 62])
        w = _process_world(rng, parent_peak, floor)
        fig = process_figure(w.facts)
        # to the sources' rounding: 2 % (a reset by less is the kernel's per-CPU counters' own error)
        ok_lower = fig.lower is None or fig.lower <= w.truth or within(fig.lower, w.truth)
        ok_upper = fig.upper is None or fig.upper >= w.truth or within(fig.upper, w.truth)
        ok_exact = not fig.exact or within(fig.value, w.truth)
        if not (ok_lower and ok_upper and ok_exact):
            wrong += 1
            raise AssertionError(f"truth {w.truth} {w.facts} -> {fig}")
        exact += fig.exact
    assert wrong == 0 and exact > 100  # the evidence pins the figure often, and never wrongly


def _tree_world(rng: random.Random) -> tuple[int, TreeFacts]:
    """Processes that each hold a base and peak once; lives overlap or not; the cgroup counts cache too."""
    n = rng.randint(1, 8)
    procs = []
    for _ in range(n):
        start = rng.uniform(0, 50)
        end = start + rng.uniform(0.01, 20)
        peak_at = rng.uniform(start, end)
        base = rng.randint(0, 50) * MB
        peak = base + rng.randint(0, 900) * MB
        procs.append((start, end, peak_at, base, peak))

    def held(t: float) -> int:
        return sum(peak if abs(t - at) < 1e-9 else base for (s, e, at, base, peak) in procs if s <= t <= e)

    instants = sorted({x for p in procs for x in (p[0], p[1], p[2])})
    truth = max(held(t) for t in instants)
    samples = [rng.uniform(0, 70) for _ in range(rng.randint(0, 40))]
    if rng.random() < 0.3:  # a sample at the peak's very instant
        samples.append(max(instants, key=held))
    sum_pss = max((held(t) for t in samples), default=0)
    largest = max(rng.randint(p[3], p[4]) for p in procs)  # each one's own lower bound
    complete = rng.random() < 0.6
    spans = []
    for s, e, _, _, peak in procs:
        upper = peak + rng.randint(0, 20) * MB  # each one's own ceiling
        spans.append(
            Span(upper, s if rng.random() < 0.7 else None, e + rng.uniform(0, 1) if rng.random() < 0.7 else None)
        )
    together = alive_together(spans, 0.0, 75.0) if complete else None
    # the cgroup counts page cache too, and leaves out file pages charged elsewhere (at most those mapped)
    file_pages = rng.randint(1, 30) * MB if samples else 0
    elsewhere = rng.randint(0, file_pages)
    cache = rng.choice([0, 0, rng.randint(0, 500) * MB])
    cgroup = truth + cache - elsewhere if rng.random() < 0.6 else None
    why = "" if complete else "PID 9 may have reaped others"
    return truth, TreeFacts(sum_pss, largest, 1, together, why, cgroup, "", file_pages)


@pytest.mark.parametrize("seed", range(8))
def test_property_the_tree_bounds_contain_the_truth(seed: int) -> None:
    rng = random.Random(1000 + seed)
    exact = 0
    for _ in range(1500):
        truth, facts = _tree_world(rng)
        fig = tree_figure(facts)
        assert fig.lower is None or fig.lower <= truth, (truth, facts, fig)
        assert fig.upper is None or fig.upper >= truth, (truth, facts, fig)
        assert not fig.exact or abs(fig.value - truth) <= PAGE_SLACK, (truth, facts, fig)
        exact += fig.exact
    assert exact > 0  # a cgroup looser by the file pages, a Σ over overlapping lives: exact is rarer here


def test_a_ceiling_from_ru_maxrss_never_sits_below_the_processes_own_exit_vmhwm() -> None:
    """ru_maxrss ≥ VmHWM always, but the kernel's per-CPU RSS counters can make a process read its VmHWM a few
    hundred KiB above its ru_maxrss (an audit saw 4-350 KiB): the upper bound then covers the VmHWM, never below it,
    and the figure is still exact (the two meet within the counters' slack)."""
    hwm, ms = (100 << 20) + (350 << 10), 100 << 20
    for facts in (
        ProcessFacts(read=90 << 20, probe_hwm=hwm, probe_maxrss=ms, floor=4 << 20),  # its own ru_maxrss
        ProcessFacts(read=90 << 20, probe_hwm=hwm, reap=ms, waited_none=True, floor=4 << 20),  # its parent's
    ):
        fig = process_figure(facts)
        assert fig.exact and fig.value == hwm and fig.lower == hwm and fig.upper is not None and fig.upper >= hwm
