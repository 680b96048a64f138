"""The in-process probe's exit reports and what they change in the report: exact per-process peaks, rows for
processes no sample saw, the tree's upper bound, GPU allocator peaks, and the `probe` section (on or off, who
reported, who could not).

Each Python process of a launched tree sends, as it exits (`gputop_tracker/_probe/sitecustomize.py`), its VmHWM
(its exact peak RSS), the children it reaped with their ru_maxrss, and the peaks of the GPU allocators it had
imported; the relay feeds them to `ProbeStats`.

The upper bound (Σ of per-process peaks) must never be below the truth. Each process's VmHWM counts shared
pages in full, so the Σ over every process of the tree of a figure at least its own peak is an upper bound —
provided no process is missing. A process can be missing only if someone reaped it without our knowing: so the
bound is given only when every process that reaped children told us each one (its probe's reap list, checked
against the kernel's child-fault counter), or is known to have reaped none (its zombie's counter, read by us).
Plain functions on the builder (duck-typed: this module is imported by the summary).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_EXITS = 100_000  # processes whose exit reports are kept
LABEL = "exact (VmHWM at exit, in-process)"


@dataclass
class Exit:
    """One process's exit report."""

    pid: int
    ppid: int
    name: str
    t: float
    how: str  # exit | _exit
    hwm: int
    child_faults: int
    reap_faults: int  # -1: more reaps than the probe lists
    child_faults0: int
    allocators: list[dict[str, Any]] = field(default_factory=list)
    maxrss: int | None = None  # ru_maxrss of the PID: every image, and what it inherited before an exec
    start_ticks: int | None = None  # when it started, clock ticks since boot

    def reaps_known(self) -> bool:
        """Every child this process reaped is in its reap list (the kernel's child faults equal theirs)."""
        return self.reap_faults >= 0 and self.child_faults0 == 0 and self.child_faults == self.reap_faults


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62 else None


def _allocators(raw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, list) or len(entry) != 5:
            continue
        fw, dev, alloc, reserved, kind = entry
        if not isinstance(fw, str) or not isinstance(dev, str) or kind not in ("peak", "at_exit"):
            continue
        out.append(
            {
                "framework": fw[:32],
                "device": dev[:32],
                "peak_allocated": _int(alloc),
                "peak_reserved": _int(reserved),
                "at_exit": kind == "at_exit",
            }
        )
    return out


class ProbeStats:
    """The exit reports of the session (fed by the relay; read by the summary)."""

    def __init__(self, enabled: bool, note: str | None = None) -> None:
        self.enabled = enabled
        self.note = note  # why it is off, when it was asked for and could not be
        self.exits: dict[int, Exit] = {}
        self.reaped_by: dict[int, tuple[int, int]] = {}  # child pid -> (reaper pid, its ru_maxrss)
        self.reaped_at: dict[int, float] = {}  # child pid -> when its reaper reaped it
        self.bad = 0

    def feed(self, msgs: list[dict[str, Any]]) -> None:
        for m in msgs:
            if m.get("k") == "r":
                self._reaps(m)
            else:
                self._exit(m)

    def _reaps(self, m: dict[str, Any]) -> None:
        reaps = m.get("reaps")
        for entry in reaps if isinstance(reaps, list) else []:
            if isinstance(entry, list) and len(entry) in (2, 3) and _int(entry[0]) and _int(entry[1]) is not None:
                self.reaped_by[entry[0]] = (m["pid"], entry[1])
                if len(entry) == 3 and isinstance(entry[2], (int, float)):
                    self.reaped_at[entry[0]] = float(entry[2])  # after the child's end: its life ended by then
            else:
                self.bad += 1

    def _exit(self, m: dict[str, Any]) -> None:
        values = [_int(m.get(k)) for k in ("ppid", "hwm", "cf", "cf0")]
        rf = m.get("rf")
        if any(v is None for v in values) or not isinstance(rf, int) or len(self.exits) >= MAX_EXITS:
            self.bad += 1
            return
        ppid, hwm, cf, cf0 = (v or 0 for v in values)
        how = m.get("how") if m.get("how") in ("exit", "_exit") else "exit"
        self.exits[m["pid"]] = Exit(
            m["pid"],
            ppid,
            str(m["name"])[:64],
            float(m["t"]),
            str(how),
            hwm,
            cf,
            rf,
            cf0,
            _allocators(m.get("ga")),
            _int(m.get("ms")),
            _int(m.get("st")),
        )


# interpreter options that keep the probe out: -I (isolated), -E (PYTHON* variables ignored), -S (no site)
NO_PROBE_FLAGS = {"I": "isolated mode (-I)", "E": "-E (PYTHONPATH ignored)", "S": "-S (no site import)"}


def python_without_probe(name: str, cmdline: list[str]) -> str | None:
    """Why a Python process cannot have run the probe (its interpreter options), or None."""
    if not name.startswith("python"):
        return None
    args = iter(cmdline[1:])
    for arg in args:
        if not arg.startswith("-") or arg == "-" or arg.startswith("--"):
            return None  # the script, stdin, or a long option: the interpreter's short options end here
        for i, letter in enumerate(arg[1:]):
            if letter in NO_PROBE_FLAGS:
                return NO_PROBE_FLAGS[letter]
            if letter in "cm":
                return None  # what follows is the program's
            if letter in "XW":  # an option with a value: the rest of this word, or the next one
                if i == len(arg) - 2:
                    next(args, None)
                break
    return None


ALLOC_SOURCE = "exact (the allocator's own peak, read in-process at exit)"
ALLOC_AT_EXIT = "lower bound (CuPy's pool keeps no peak: its size at exit)"
DESC_ALLOC_SOURCE = (
    "upper bound (Σ over descendants of each one's allocator peak on that device; they may not have peaked "
    "together); exact when one process"
)


def probe_of(b: Any) -> ProbeStats | None:
    probe = getattr(b, "probe", None)
    return probe if isinstance(probe, ProbeStats) and probe.enabled else None


def add_unseen(b: Any, new_process: Any) -> None:
    """A row for each process that reported but no sample saw (and we did not reap)."""
    probe = probe_of(b)
    if probe is None:
        return
    for pid, ex in probe.exits.items():
        if pid not in b.procs:
            p = b.procs[pid] = new_process(pid, ex.ppid, ex.name, ex.t)
            p.peak_rss = ex.hwm
            p.peak_source = LABEL
            if pid == b.main_pid:
                p.role = "main"
            b.events.add("process_started", ex.t, f"process {pid} ({ex.name}) started", pid=pid, name=ex.name)
            # and its end, which it reported itself: every process started on the timeline gets one end
            p.exit_reported = True
            b.events.add("process_exited", ex.t, f"process {pid} ({ex.name}) exited", pid=pid, name=ex.name)


def _reaps_known(b: Any, pid: int, p: Any, ex: Exit | None) -> bool:
    """Every child `pid` reaped is known to us."""
    if ex is not None:
        if ex.reap_faults < 0 or ex.child_faults != ex.reap_faults + ex.child_faults0:
            return False
        attached_main = pid == b.main_pid and b.mode == "attach"
        return ex.child_faults0 == 0 or attached_main  # before a Tracker's start: not this run's
    if p is None:
        return False  # reaped by a process of the tree, did not report: whether it reaped any is unknown
    if p.reaped:
        return p.waited_for_children is False
    return not p.waited and not p.exit_reported  # alive at the end, never seen reaping


def reaps_known_of(b: Any) -> str:
    """Why a process of the tree may have gone unseen ("" when every child any process reaped is known to us)."""
    probe = probe_of(b)
    assert probe is not None
    for pid in sorted(set(b.procs) | set(probe.reaped_by)):
        p = b.procs.get(pid)
        if not _reaps_known(b, pid, p, probe.exits.get(pid)):
            name = p.name if p is not None else probe.exits[pid].name if pid in probe.exits else "?"
            return f"PID {pid} ({name}) may have reaped children no one reported"
    return ""


def add_reaped(b: Any, new_process: Any) -> None:
    """A row for each process a probed parent reaped that no sample saw and that did not report (a C child, a
    SIGKILLed or SIGTERMed one, `python -I`): its parent's record of its ru_maxrss is what is known of it."""
    probe = probe_of(b)
    if probe is None:
        return
    for pid, (reaper, _) in sorted(probe.reaped_by.items()):
        if pid in b.procs or pid == b.main_pid:
            continue
        ex = probe.exits.get(reaper)
        t = probe.reaped_at.get(pid, ex.t if ex is not None else b.end_time)  # the reap: after its end
        p = b.procs[pid] = new_process(pid, reaper, "?", t)
        p.peak_rss = 0  # no sample read it: its figure comes from the reap record alone
        p.exit_reported = True
        p.ended = t
        b.events.add("process_started", t, f"process {pid} (?) started", pid=pid, name="?")
        b.events.add("process_exited", t, f"process {pid} (?) exited, reaped by {reaper}", pid=pid, name="?")


def allocator_rows(b: Any, pid: int) -> list[dict[str, Any]]:
    probe = probe_of(b)
    ex = probe.exits.get(pid) if probe is not None else None
    return [dict(a) for a in ex.allocators] if ex is not None else []


def allocator_summary(b: Any) -> dict[str, Any] | None:
    """max_gpu_ram.allocator: main's allocator peaks per device, and the descendants' (Σ per device)."""
    probe = probe_of(b)
    if probe is None or not any(ex.allocators for ex in probe.exits.values()):
        return None
    main: list[dict[str, Any]] = []
    desc: dict[tuple[str, str], dict[str, Any]] = {}
    for pid, ex in probe.exits.items():
        for a in ex.allocators:
            if pid == b.main_pid:
                main.append({**a, "processes": 1})
                continue
            acc = desc.setdefault((a["framework"], a["device"]), {**a, "peak_allocated": 0, "processes": 0})
            acc["processes"] += 1
            acc["at_exit"] = acc["at_exit"] or a["at_exit"]
            for k in ("peak_allocated", "peak_reserved"):
                if a[k] is not None:
                    acc[k] = (acc[k] or 0) + a[k] if acc["processes"] > 1 else a[k]
    return {
        "main": main,
        "descendants": list(desc.values()),
        "sources": {"main": ALLOC_SOURCE, "descendants": DESC_ALLOC_SOURCE, "at_exit": ALLOC_AT_EXIT},
    }


def probe_section(b: Any) -> dict[str, Any]:
    """Whether the probe was on, which processes reported, and the Python processes that could not run it."""
    probe = getattr(b, "probe", None)
    if not isinstance(probe, ProbeStats):
        return {"enabled": False, "reported": [], "without_probe": [], "note": "not used (attached, or an old run)"}
    without = []
    for pid, p in sorted(b.procs.items()) if probe.enabled else ():
        why = python_without_probe(p.name, p.cmdline) if pid not in probe.exits else None
        if why is not None:
            without.append({"pid": pid, "name": p.name, "reason": why})
    listed = {w["pid"] for w in without}
    unreported = [
        pid
        for pid, p in sorted(b.procs.items())
        if probe.enabled
        and pid not in probe.exits
        and pid not in listed
        and p.name.startswith("python")
        and not (pid == b.main_pid and b.mode == "attach")  # a Tracker's own process: alive when it stops
    ]
    return {
        "enabled": probe.enabled,
        "reported": sorted(probe.exits),
        "without_probe": without,
        "python_unreported": unreported,
        "note": probe.note,
    }


def probe_notes(section: dict[str, Any]) -> list[str]:
    out = []
    for w in section["without_probe"][:5]:
        out.append(f"PID {w['pid']} ({w['name']}) ran Python in {w['reason']}: no probe, its peak keeps its label")
    if section.get("note"):
        out.append(f"probe off: {section['note']}")
    return out
