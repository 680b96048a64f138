"""Figures from their evidence: every source states what it knows as a bound on a named figure, and one function
(`derive`) turns the bounds into the figure, its interval and its label.

A source is evidence of one of two kinds:
- a *reading* (`lower`): something surely held: a sample, a VmHWM read, a ru_maxrss above anything the process
  could have inherited from its parent. Never above the truth: the figure is at least the largest reading.
- a *ceiling* (`upper`): a counter that covers the figure and maybe more: a ru_maxrss (every image of the PID,
  and the children it waited for), the Σ of the peaks of processes alive together, the job cgroup's high-water
  mark (it also counts page cache and kernel memory). Never below the truth unless an assumption it rests on
  fails (the program reset its VmHWM; a process went unseen; the cgroup leaves out file pages charged to another
  cgroup before the run): a ceiling below a reading is *contradicted*, set aside, and named in the label.

The figure is exact only where its lower and upper bounds meet, to the sources' rounding (`agree`); otherwise it
is the bound that is known, never the other side of the truth. Every label's text comes from `SOURCES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gputop_tracker.core.summary.peaks import PAGE_SLACK, agree

# what each source is, in the report's words: the one table every label is written from
SOURCES: dict[str, str] = {
    "sampled": "VmHWM read by a sample",
    "sampled_attached": "sampled while attached (its VmHWM predates the attach)",
    "vmhwm_live": "VmHWM",
    "probe_hwm": "VmHWM at exit, in-process",
    "probe_maxrss": "ru_maxrss at exit, in-process: every image of the PID",
    "reap_own": "ru_maxrss at reap; it waited for no child",
    "reap": "ru_maxrss at reap, which also covers the children it waited for",
    "parent_reap": "ru_maxrss its parent read at reap, which also covers the children it waited for",
    "blocks": "VmHWM that code blocks read before resetting it",
    "sum_pss": "largest Σ PSS of one sample",
    "largest_process": "the largest process's own peak",
    "sum_peaks": "Σ of the per-process peaks of the processes alive together",
    "cgroup": "the job cgroup's peak, which also counts page cache and kernel memory",
}
# which ceiling names an exact figure where several meet its reading: the most direct first
RANK = ("probe_hwm", "probe_maxrss", "reap_own", "vmhwm_live", "reap", "parent_reap", "cgroup", "sum_peaks")
# why a source can be set aside, in the report's words
VOIDED: dict[str, str] = {
    "reset": "the program reset its VmHWM (clear_refs): the kernel's counters since then miss what it held before",
    "exec_reset": "an earlier image held more (an exec no sample saw), or the program reset its VmHWM",
    "cgroup_below": "it does not count file pages charged to another cgroup before the run",
    "sum_below": "a process's own counters were lowered (a VmHWM reset) or a process went unseen",
    "below_reading": "it is below what a reading saw",
}


@dataclass(frozen=True)
class Evidence:
    value: int
    source: str  # a key of SOURCES
    lower: bool = False  # bounds the figure from below
    upper: bool = False  # bounds it from above
    where: str = ""  # a scope beside the source ("PID 12", "cgroup v2 memory.peak")
    void: str = "below_reading"  # for a ceiling: the VOIDED key that says why it can be below a reading

    def name(self) -> str:
        text = SOURCES.get(self.source, self.source)
        return f"{text}, {self.where}" if self.where else text


@dataclass(frozen=True)
class Figure:
    value: int
    lower: int | None
    upper: int | None
    exact: bool
    source: str  # the source that decided the value
    label: str
    voided: tuple[str, ...] = field(default_factory=tuple)  # sources set aside, each with why

    def as_dict(self) -> dict[str, int | None]:
        return {"lower": self.lower, "upper": self.upper}


def reading(value: int, source: str, where: str = "") -> Evidence:
    return Evidence(value, source, lower=True, where=where)


def ceiling(value: int, source: str, where: str = "", void: str = "below_reading") -> Evidence:
    return Evidence(value, source, upper=True, where=where, void=void)


def _above(a: int, b: int) -> bool:
    """`a` is above `b` beyond the sources' rounding."""
    return a > b and not agree(a, b)


def pages(a: int, b: int) -> bool:
    """The same figure to a few pages: how the tree's readings and ceilings must meet to make it exact (2 % of a
    gigabyte is a whole interpreter another process may have held)."""
    return abs(a - b) <= PAGE_SLACK


def derive(evidence: Iterable[Evidence], same: Callable[[int, int], bool] = agree) -> Figure:
    """The figure its evidence pins down (see the module's docstring). `same`: when two figures are one, to the
    sources' rounding (one process's counters: 2 %, as the kernel's per-CPU RSS counters are read; the tree: pages)."""
    ev = [e for e in evidence if e.value > 0 or e.upper]
    low = max((e for e in ev if e.lower), key=lambda e: e.value, default=None)
    voided: list[str] = []
    ceilings = []
    for c in (e for e in ev if e.upper and not e.lower):
        if low is not None and low.value > c.value and not same(low.value, c.value):
            voided.append(f"{c.name()} ({c.value} bytes): {VOIDED[c.void]}")
        else:
            ceilings.append(c)
    top = min(ceilings, key=lambda e: e.value, default=None)
    lower = low.value if low is not None else None
    upper = top.value if top is not None else None
    gone = tuple(voided)
    if low is not None and top is not None and same(low.value, top.value):
        a, b = sorted((low.value, top.value))
        # named by the most direct of the counters that meet the reading
        by = min((c for c in ceilings if same(low.value, c.value)), key=_rank)
        return Figure(b, a, b, True, by.source, _label("exact", by, None, voided), gone)
    if low is not None:
        return Figure(low.value, lower, upper, False, low.source, _label("lower bound", low, top, voided), gone)
    if top is not None:
        return Figure(top.value, None, upper, False, top.source, _label("upper bound", top, None, voided), gone)
    return Figure(0, None, None, False, "none", "lower bound (nothing was read)", gone)


def _rank(e: Evidence) -> int:
    return RANK.index(e.source) if e.source in RANK else len(RANK)


def _label(kind: str, by: Evidence, other: Evidence | None, voided: Sequence[str]) -> str:
    parts = [by.name()]
    if other is not None and other is not by:
        parts.append(f"at most {other.value} bytes: {other.name()}")
    parts += [f"set aside: {v}" for v in voided]
    return f"{kind} ({'; '.join(parts)})"


# --------------------------------------------------------------------------- one process's peak RSS


@dataclass
class ProcessFacts:
    """What the sources said about one process's peak RSS (bytes; None: that source said nothing)."""

    read: int = 0  # the largest VmHWM (or RSS) a sample read
    attached: bool = False  # attached to it: its VmHWM predates the run, `read` is RSS samples only
    live_at_end: bool = False  # running when tracking ended: its VmHWM then is its peak so far
    reset: bool = False  # its VmHWM went down within one image (the program reset it), not by our blocks
    blocks: int | None = None  # the largest VmHWM our code blocks cleared in it (they record it)
    probe_hwm: int | None = None  # its exit report: VmHWM of its last image
    probe_maxrss: int | None = None  # its exit report: ru_maxrss, every image of the PID
    reap: int | None = None  # ru_maxrss at reap (ours, or its parent's): it and the children it waited for
    reap_source: str = "reap"
    waited_none: bool = False  # known to have waited for no child: the reap figure is its own
    floor: int = 0  # what an image before the command held (our own fork copy, for the command): says nothing
    exec_seen: bool = False  # a sample saw it replace its image: its VmHWM covers the last image only


def process_evidence(f: ProcessFacts) -> list[Evidence]:
    if f.attached:
        return [reading(f.read, "sampled_attached")]
    ev = _process_readings(f)
    if not f.reset:  # a reset lowered every counter of the kernel's with it: then only readings remain
        ev += _process_ceilings(f, own_reap=any(e.source == "reap_own" for e in ev))
    return ev


def _process_readings(f: ProcessFacts) -> list[Evidence]:
    ev = [reading(f.read, "sampled")]
    if f.blocks:
        ev.append(reading(f.blocks, "blocks"))
    if f.probe_hwm:
        ev.append(reading(f.probe_hwm, "probe_hwm"))
    # ru_maxrss counts what an image before an exec inherited from the parent (vfork: the parent's own peak):
    # it is the process's own only above what the parent ever held
    if f.probe_maxrss is not None and _above(f.probe_maxrss, f.floor):
        ev.append(reading(f.probe_maxrss, "probe_maxrss"))
    if f.reap is not None and f.waited_none and _above(f.reap, f.floor):
        ev.append(reading(f.reap, "reap_own"))
    return ev


def _process_ceilings(f: ProcessFacts, own_reap: bool) -> list[Evidence]:
    ev = []
    # a ru_maxrss is never below the VmHWM the process read of itself at exit, though the kernel's per-CPU RSS
    # counters can make it read a few hundred KiB less (an audit saw 4-350 KiB): a ceiling from it covers both
    at_least = max(f.blocks or 0, f.probe_hwm or 0)
    if f.probe_maxrss is not None and _above(f.probe_maxrss, f.floor):
        ev.append(ceiling(max(f.probe_maxrss, at_least), "probe_maxrss", void="reset"))
    elif f.probe_hwm is not None and not f.exec_seen:
        # ru_maxrss no more than what it may have inherited: the image before this one was the parent's (no exec
        # of its own was seen), so its VmHWM at exit covers what it held itself
        ev.append(ceiling(max(f.probe_hwm, at_least), "probe_hwm", void="exec_reset"))
    if f.reap is not None:  # also when no more than the inherited part: a ceiling still, if a loose one
        ev.append(ceiling(max(f.reap, at_least), "reap_own" if own_reap else f.reap_source, void="reset"))
    if f.live_at_end and not f.exec_seen and not ev:
        ev.append(ceiling(max(f.read, at_least), "vmhwm_live", void="exec_reset"))
    return ev


def process_figure(f: ProcessFacts) -> Figure:
    return derive(process_evidence(f))


# --------------------------------------------------------------------------- the tree's peak


@dataclass
class Span:
    """One process's upper bound over the time it may have lived (start and end conservative: None = the run's)."""

    upper: int
    start: float | None
    end: float | None


def alive_together(spans: Sequence[Span], run_start: float, run_end: float) -> int:
    """The largest Σ of upper bounds of processes whose lives may overlap: at most what the tree held at once."""
    points: list[tuple[float, int, int]] = []
    for s in spans:
        start = run_start if s.start is None else min(s.start, run_end)
        end = run_end if s.end is None else max(s.end, start)
        points.append((start, 0, s.upper))  # starts before ends at one instant: touching lives count together
        points.append((end, 1, -s.upper))
    best = cur = 0
    for _, _, delta in sorted(points):
        cur += delta
        best = max(best, cur)
    return best


@dataclass
class TreeFacts:
    sum_pss: int = 0  # largest Σ PSS of one sample
    largest: int = 0  # the largest per-process lower bound
    largest_pid: int = 0
    together: int | None = None  # Σ of per-process upper bounds of processes alive together (None: incomplete)
    together_why: str = ""  # why there is none
    cgroup: int | None = None
    cgroup_where: str = ""
    file_pages: int = 0  # the largest Σ of resident file pages over the tree that a sample saw (0: none read)


def tree_figure(t: TreeFacts) -> Figure:
    ev = [reading(t.sum_pss, "sum_pss"), reading(t.largest, "largest_process", f"PID {t.largest_pid}")]
    if t.together is not None:
        ev.append(ceiling(t.together, "sum_peaks", void="sum_below"))
    if t.cgroup is not None and t.file_pages and (t.largest or t.sum_pss):
        # it leaves out file pages charged to another cgroup before the run (the interpreter and libraries a
        # Python process maps, about 7 MB): a ceiling once those the tree mapped are added, as samples saw them
        where = f"{t.cgroup_where}; with the {t.file_pages} bytes of file pages the samples saw mapped"
        ev.append(ceiling(t.cgroup + t.file_pages, "cgroup", where, void="cgroup_below"))
    fig = derive(ev, pages)
    if fig.source == "none" and t.cgroup is not None:
        label = f"lower bound (no process was read; {SOURCES['cgroup']} ({t.cgroup} bytes) cannot be checked)"
        return Figure(0, None, None, False, "none", label)
    if fig.upper is None and t.together_why and not fig.exact:
        label = f"{fig.label[:-1]}; no upper bound: {t.together_why})"
        return Figure(fig.value, fig.lower, None, False, fig.source, label, fig.voided)
    return fig
