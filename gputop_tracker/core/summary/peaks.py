"""The rules that decide which peak is reported and how it is labelled: pure functions, unit-tested branch by
branch with synthetic readings (tests/test_peak_rules.py).

The promise they keep: a figure labelled exact equals the kernel's own figure; a lower bound can never be
above the truth and an upper bound never below it; where we cannot know, the label says so and why.
"""

from __future__ import annotations

from dataclasses import dataclass

AGREE = 0.02  # two readings of the same peak that differ by less than this are the same figure
PAGE_SLACK = 64 * 1024  # a few pages: statm/VmHWM and ru_maxrss round differently


@dataclass(frozen=True)
class Peak:
    value: int
    exact: bool
    source: str  # short machine name: VmHWM, ru_maxrss, sampled, cgroup, upper_bound
    label: str  # the sentence the report prints beside the figure


def agree(a: int, b: int) -> bool:
    return abs(a - b) <= max(PAGE_SLACK, AGREE * max(a, b))


def reaped_process_peak(sampled: int, maxrss: int, *, floor: int = 0, own_only: bool = False) -> Peak:
    """Peak RSS of a process we reaped with wait4.

    `sampled` is the largest VmHWM we read while it lived (a lower bound: it may have grown after our last
    read). `maxrss` is its rusage ru_maxrss: the peak of every image it ran and of every child it waited for,
    so an upper bound of its own peak. `floor` is what the image exec replaced may have held (for the command
    we fork ourselves, our own size at the fork): a maxrss not above it says nothing about the command.
    `own_only`: it never had a child, so maxrss is its own peak exactly.
    """
    if own_only and maxrss > floor + PAGE_SLACK:
        return Peak(max(maxrss, sampled), True, "ru_maxrss", "exact (ru_maxrss)")
    if maxrss and maxrss - sampled <= PAGE_SLACK:
        # the two counters give the same figure, to their rounding; a maxrss a little above it may be a child's
        # peak (it covers the children it waited for), so only that is exact
        return Peak(max(sampled, maxrss), True, "VmHWM", "exact (VmHWM; ru_maxrss agrees)")
    if maxrss <= floor + PAGE_SLACK:
        why = f"its ru_maxrss ({maxrss} bytes) is that of the image exec replaced, not the command's"
    else:
        why = f"ru_maxrss ({maxrss} bytes) bounds it from above but also covers the children it waited for"
    return Peak(sampled, False, "sampled", f"lower bound (VmHWM at its last sample; {why})")


@dataclass(frozen=True)
class TreeBounds:
    """What is known of the whole tree's peak before the cgroup is consulted."""

    largest_single: int  # largest single-process peak known (VmHWM, ru_maxrss): a lower bound of the tree
    sampled: int  # largest Σ PSS seen in one sample: a lower bound
    seen_sum: int  # Σ of the per-process peaks of every process seen (some may be lower bounds)
    upper: int | None  # that Σ when every one is exact and no process went unseen: an upper bound; else None
    upper_why: str = ""  # why there is no upper bound
    largest_exact: bool = True  # largest_single is a kernel figure, not a lower bound
    # why some process's peak reaches no counter we read ("" if none does): a child reaped by a process still
    # running at the end (its cmaxrss is not in /proc), or by the kernel (its parent ignored SIGCHLD)
    hidden: str = ""


def combined_peak(b: TreeBounds, cgroup_peak: int | None = None, cgroup_source: str | None = None) -> Peak:
    """The tree's peak (combined total) and its label."""
    low = max(b.largest_single, b.sampled)
    upper = b.upper
    # exact only when the others held nothing: Σ of the exact peaks is the largest (to rounding, a few pages)
    one_process = upper is not None and upper - low <= PAGE_SLACK
    if cgroup_peak is not None:
        return _with_cgroup(b, low, one_process, cgroup_peak, cgroup_source or "the job's cgroup")
    if one_process:
        return Peak(low, True, "VmHWM", "exact (one process held memory; its own exact peak)")
    why = f"; no upper bound: {b.upper_why}" if upper is None and b.upper_why else ""
    bound = "; combined_upper_bound = Σ per-process exact peaks" if upper is not None else ""
    return Peak(
        low,
        False,
        "sampled",
        f"sampled lower bound (largest of Σ PSS per sample and the largest single-process peak{bound}{why})",
    )


def _with_cgroup(b: TreeBounds, low: int, one_process: bool, cgroup_peak: int, where: str) -> Peak:
    """The tree's peak where a job cgroup kept its own high-water mark: confirmed, bounded or set aside."""
    upper = b.upper
    ceiling = upper if upper is not None else max(b.seen_sum, low)
    above = cgroup_peak > ceiling + PAGE_SLACK and not agree(cgroup_peak, ceiling)
    if b.hidden and not one_process:
        # A peak no counter reports may hold file pages charged to other cgroups, which the cgroup does not
        # count: nothing can confirm the cgroup's figure, nor bound the tree from above.
        return Peak(
            low,
            False,
            "sampled",
            f"sampled lower bound (largest single process or Σ PSS sampled); the job cgroup's peak "
            f"({cgroup_peak} bytes) cannot be confirmed: {b.hidden}",
        )
    if not b.largest_exact and not one_process and not above:
        # Nothing exact to check the cgroup against: it leaves out library pages charged to other cgroups
        # (a small process can be mostly those), so it may read below the largest process's own peak.
        return Peak(
            low,
            False,
            "sampled",
            f"sampled lower bound (largest single process or Σ PSS sampled); the job cgroup's peak "
            f"({cgroup_peak} bytes) cannot be checked against an exact single-process peak",
        )
    if low <= cgroup_peak and (cgroup_peak <= ceiling + PAGE_SLACK or agree(cgroup_peak, ceiling)):
        return Peak(cgroup_peak, True, "cgroup", f"exact ({where})")
    if cgroup_peak < low and agree(cgroup_peak, low):
        # the cgroup does not charge the job for file pages (libraries) cached by others before it started, so
        # it reads a little below the largest process's own peak. Being below, it bounds nothing from above:
        # the other processes' own pages at that moment are in neither figure. Exact only for a lone process.
        if one_process:
            return Peak(low, True, "cgroup", f"exact ({where}, agreeing with the only process's own peak)")
        return Peak(
            low,
            False,
            "sampled",
            f"lower bound (the largest process's own peak; {where} ({cgroup_peak} bytes) agrees within "
            f"{AGREE:.0%}, reading lower: it does not count file pages charged elsewhere, nor bound the other "
            "processes' pages at that moment)",
        )
    if cgroup_peak > ceiling:
        # The cgroup also charges page cache (files read or written) and kernel memory (page tables,
        # slab) that no process maps: more than every process's own peak together.
        extra = (
            f"the job cgroup's peak ({cgroup_peak} bytes, cgroup_peak) is larger: it also counts page cache "
            "and kernel memory (page tables, slab)"
        )
        if one_process:
            return Peak(low, True, "VmHWM", f"exact (the only process's own peak; {extra})")
        if upper is not None:
            return Peak(upper, False, "upper_bound", f"upper bound (Σ of per-process exact peaks; {extra})")
        # the processes' own figures say less than the cgroup: report what they surely held. The cgroup is
        # no ceiling: a process unseen at its peak may have mapped file pages charged to other cgroups before
        # the run (cached libraries, a dataset another job read), which its peak counts and the group does not
        return Peak(
            low,
            False,
            "sampled",
            f"sampled lower bound (largest single process or Σ PSS sampled); the job cgroup's peak "
            f"({cgroup_peak} bytes) is larger but bounds it neither way: it counts page cache and kernel "
            "memory, and leaves out file pages charged to other cgroups before the run",
        )
    # below what one process alone held: file pages (libraries) charged to others before the job
    extra = (
        f"the job cgroup's peak ({cgroup_peak} bytes) is lower: it does not count shared file pages charged elsewhere"
    )
    if one_process:
        return Peak(low, True, "VmHWM", f"exact (the only process's own peak; {extra})")
    return Peak(low, False, "sampled", f"lower bound (largest single process or Σ PSS sampled; {extra})")
