"""Each RAM peak of the report from its evidence: what the builder's parts gathered (samples, the probe's exit
reports, reap records, code blocks, the job cgroup) is stated as facts here and handed to `evidence`, which derives
the figure, its bounds and its label. No rule here decides what is exact: that is `evidence.derive`'s alone.

Duck-typed on the builder (this module is imported by it).
"""

from __future__ import annotations

from typing import Any

from gputop_tracker.core.proc.procfs import started_at
from gputop_tracker.core.summary.evidence import Figure, ProcessFacts, Span, TreeFacts, alive_together, process_figure
from gputop_tracker.core.summary.probe import probe_of, reaps_known_of

UNKNOWN_FLOOR = 1 << 62  # what a process may have inherited from a parent we know nothing of: anything


def process_figures(b: Any) -> dict[int, Figure]:
    """Every process's peak RSS, parents first: what a child may have inherited is bounded by its parent's peak."""
    figures: dict[int, Figure] = {}

    def figure(pid: int, depth: int = 0) -> Figure:
        if pid not in figures:
            p = b.procs[pid]
            parent = b.procs.get(p.ppid) if p.ppid != pid and depth < 256 else None
            if pid == b.main_pid:
                floor = b.spawner_hwm if b.mode != "attach" else UNKNOWN_FLOOR
            elif parent is not None:
                floor = figure(p.ppid, depth + 1).upper or UNKNOWN_FLOOR
            else:
                floor = UNKNOWN_FLOOR
            figures[pid] = process_figure(process_facts(b, p, floor))
        return figures[pid]

    for pid in list(b.procs):
        figure(pid)
    return figures


def process_facts(b: Any, p: Any, floor: int) -> ProcessFacts:
    probe = probe_of(b)
    ex = probe.exits.get(p.pid) if probe is not None else None
    blocks = b.cleared_hwm.get(p.pid)
    f = ProcessFacts(
        read=p.peak_rss,
        attached=p.hwm_at_attach is not None,
        live_at_end=not p.reaped and not p.exit_reported and not p.never_read and ex is None,
        reset=p.hwm_reset and blocks is None,  # code blocks reset it too, and record what they cleared
        blocks=blocks,
        floor=floor,
        exec_seen=p.exec_seen,
    )
    if p.peak_before_attach is not None:
        return f  # attached to it: its exit figures and ru_maxrss cover its life before the attach
    if ex is not None:
        f.probe_hwm, f.probe_maxrss = ex.hwm, ex.maxrss
    reaped_none = ex is not None and ex.child_faults == 0
    if p.reaped and p.rusage_maxrss is not None:
        f.reap, f.reap_source = p.rusage_maxrss, "reap"
        if p.pid == b.main_pid:
            f.waited_none = p.waited_for_children is False or not (b.main_had_children or _has_descendants(b))
        else:
            f.waited_none = p.waited_for_children is False or reaped_none
    elif probe is not None and p.pid in probe.reaped_by:
        f.reap, f.reap_source = probe.reaped_by[p.pid][1], "parent_reap"
        f.waited_none = reaped_none
    return f


DOUBT_SLACK = 16 << 20  # kernel memory (page tables, slab) the cgroup counts beside the pages: at least this much


def doubt_counters(b: Any, figures: dict[int, Figure]) -> dict[int, Figure]:
    """The job cgroup's peak above all the processes' own counters allow together and above the page cache it still
    holds at the end: memory no counter of theirs kept (a program that reset its VmHWM before a sample saw it).
    Then no figure resting on those counters is exact: each keeps its readings, without a ceiling, and says why."""
    cgroup, cache = b.outcome.cgroup_peak, b.outcome.cgroup_cache
    if cgroup is None or cache is None or not figures:
        return figures
    facts = tree_facts(b, figures, completeness(b, figures))
    together = facts.together
    if together is None or cgroup <= together + cache + max(DOUBT_SLACK, cgroup // 20):
        return figures
    why = (
        f"the job cgroup's peak ({cgroup} bytes) is above all the processes' own counters allow together "
        f"({together} bytes) with the page cache it still held ({cache} bytes): a process may have reset its VmHWM"
    )
    b.counters_doubted = why
    out = {}
    for pid, fig in figures.items():
        if fig.upper is None or fig.lower is None:
            out[pid] = fig
            continue
        label = f"lower bound ({fig.label.partition(' (')[2][:-1]}; not exact: {why})"
        out[pid] = Figure(fig.lower, fig.lower, None, False, fig.source, label, fig.voided)
    return out


def _has_descendants(b: Any) -> bool:
    return any(q.role == "descendant" for q in b.procs.values())


# --------------------------------------------------------------------------- the tree


def tree_facts(b: Any, figures: dict[int, Figure], why: str) -> TreeFacts:
    why = why or getattr(b, "counters_doubted", "")
    """`why`: why the processes' own figures cannot bound the tree ("" when every process is accounted for)."""
    largest_pid = max(figures, key=lambda pid: figures[pid].lower or 0, default=0)
    t = TreeFacts(
        sum_pss=b.maxima["combined_total"],
        largest=(figures[largest_pid].lower or 0) if figures else 0,
        largest_pid=largest_pid,
        together_why=why,
        cgroup=b.outcome.cgroup_peak,
        cgroup_where=b.outcome.cgroup_source or "",
        file_pages=b.max_file_rss,
    )
    if why:
        return t
    spans = []
    for pid, fig in figures.items():
        if fig.upper is None:
            p = b.procs[pid]
            t.together_why = f"the peak of PID {pid} ({p.name}) has no upper bound"
            return t
        spans.append(Span(fig.upper, *_life(b, pid)))
    t.together = alive_together(spans, b.start_time, b.end_time) or None
    return t


def _life(b: Any, pid: int) -> tuple[float | None, float | None]:
    """When the process may have lived, conservatively: its start as the kernel gives it (None: not known), and a
    time after its end: when we saw it gone or reaped it, or when its parent reaped it (None: not known). Its own
    exit report is no end: it is sent before the process has let go of its memory."""
    p = b.procs[pid]
    probe = probe_of(b)
    ex = probe.exits.get(pid) if probe is not None else None
    start = p.started
    if start is None and ex is not None and ex.start_ticks:
        start = started_at(ex.start_ticks)
    ends = [t for t in (p.ended, probe.reaped_at.get(pid) if probe is not None else None) if t is not None]
    return start, min(ends) if ends else None


def completeness(b: Any, figures: dict[int, Figure]) -> str:
    """Why some process of the tree may be missing from the figures ("" when none can be)."""
    if autoreapers := autoreaper_names(b):
        return f"{autoreapers} ignored SIGCHLD: children the kernel reaped for it may have gone unseen"
    if probe_of(b) is not None:
        return reaps_known_of(b)
    if b.vanished_by_others:
        return f"processes reaped by their parents ({b.vanished_by_others}) may have reaped others no one saw"
    if any(p.waited and not p.reaped for p in b.procs.values()):
        return "a tracked process reaped children no sample saw"
    return ""


def autoreaper_names(b: Any) -> str:
    """The tracked processes seen ignoring SIGCHLD, named ("" if none)."""
    pids = [p for p in b.procs.values() if p.autoreaps]
    named = [f"PID {p.pid} ({p.name})" for p in pids[:3]]
    return ", ".join(named) + (f" and {len(pids) - 3} more" if len(pids) > 3 else "")
