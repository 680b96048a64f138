"""GPU memory peaks from the driver's accounting records, and what each figure is.

Samples of NVML's process list catch what a process held when it was read: a lower bound of its peak. Where
NVML accounting is on, the driver keeps each process's peak per GPU (maxMemoryUsage), exited processes too:
that is the process's exact peak when it used one GPU. Peaks of several processes (or of one process on
several GPUs) may fall at different times, so their sum is no peak of the whole: there the records give a
lower bound (the largest) that can only be above what samples saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gputop_tracker.core.gpu import ACCOUNTING_HOW_TO_ENABLE as HOW_TO_ENABLE
from gputop_tracker.core.gpu import ACCOUNTING_LABEL as EXACT
from gputop_tracker.core.gpu import PAIRED_LABEL as BY_ELIMINATION
from gputop_tracker.core.gpu import GpuReading

SAMPLED = "sampled (NVML running processes)"


@dataclass
class GpuAccountingLog:
    """What the samples said about accounting: the mode of each GPU, the records, where each process was seen.

    No record is called exact unless accounting was on for every GPU at every reading, and the records were read
    again at the end (a record read while its process runs is only its peak so far)."""

    modes: dict[int, bool | None] = field(default_factory=dict)
    never_off: bool = True  # no GPU said accounting was off, at any reading
    unknown: bool = False  # a GPU could not say (MIG, unsupported): a process may have used it without a record
    records: dict[int, dict[int, int]] = field(default_factory=dict)  # pid -> GPU index -> exact peak
    seen_on: dict[int, set[int]] = field(default_factory=dict)  # pid -> GPUs a sample saw it hold memory on
    attributed: set[int] = field(default_factory=set)  # pids given GPU memory by elimination (container)
    read_at_end: bool = False  # the records were read once more when tracking ended (else: peaks so far)

    def observe(self, gpus: Sequence[GpuReading]) -> None:
        for g in gpus:
            if g.vendor != "nvidia":
                continue
            self.modes[g.index] = g.accounting
            if g.accounting is False:
                self.never_off = False
            elif g.accounting is None:
                self.unknown = True
            for pid, peak in g.accounting_peaks.items():
                rec = self.records.setdefault(pid, {})
                rec[g.index] = max(rec.get(g.index, 0), peak)
            for pid, used in g.processes.items():
                if used or pid in g.no_figure:  # N/A: it holds memory there, of a size NVML does not give
                    self.seen_on.setdefault(pid, set()).add(g.index)
            if g.attributed_pids:
                self.attributed |= g.attributed_pids

    def observe_end(self, gpus: Sequence[GpuReading]) -> None:
        """The records read when tracking ended: each covers its process's whole tracked life."""
        before = self.never_off and not self.unknown
        self.observe([g for g in gpus if not g.lost])
        self.read_at_end = bool(gpus) and before and self.never_off and not self.unknown
        self.read_at_end = self.read_at_end and not any(g.lost for g in gpus)

    @property
    def all_on(self) -> bool:
        return bool(self.modes) and self.never_off and not self.unknown and self.read_at_end

    def process_exact(self, pid: int) -> int | None:
        """The driver's peak of one process when it is the process's exact peak (one GPU, every GPU recorded)."""
        rec = self.records.get(pid)
        if not rec or not self.all_on or len(rec) != 1 or not self.seen_on.get(pid, set()) <= rec.keys():
            return None
        return next(iter(rec.values()))

    def why_not_exact(self, pid: int) -> str:
        """Why a process's largest record is only a lower bound of its peak."""
        if not (self.modes and self.never_off):
            return "accounting was not on for every GPU all along"
        if self.unknown:
            return "a GPU cannot keep accounting records (MIG, or not supported)"
        if not self.read_at_end:
            return "its record was last read while it ran"
        if len(self.records.get(pid, {})) > 1:
            return "its largest peak on one GPU; its GPUs' peaks may not coincide"
        return "a sample saw it on a GPU without its record"

    def process_largest(self, pid: int) -> int:
        return max(self.records.get(pid, {}).values(), default=0)


@dataclass
class Figure:
    value: int
    label: str


def process_peak(log: GpuAccountingLog, pid: int, sampled: int) -> Figure:
    """One process's peak GPU memory and what it is."""
    exact = log.process_exact(pid)
    if exact is not None:
        return Figure(exact, EXACT)
    largest = log.process_largest(pid)
    if largest > sampled:
        return Figure(largest, f"lower bound (NVML accounting: {log.why_not_exact(pid)})")
    label = SAMPLED if pid not in log.attributed else f"{SAMPLED}; {BY_ELIMINATION}"
    return Figure(sampled, label)


def group_peak(log: GpuAccountingLog, pids: Iterable[int], sampled: int, complete: bool) -> Figure:
    """The peak of the sum over a group (the descendants): exact only when one process of it ever held GPU
    memory, its record is exact, and no process of the group can have gone unseen (`complete`)."""
    users = [p for p in pids if p in log.records or p in log.seen_on]
    if not users:
        return Figure(sampled, SAMPLED)
    if len(users) == 1 and complete:
        one = process_peak(log, users[0], sampled)
        if one.label == EXACT:
            return one
    largest = max(log.process_largest(p) for p in users)
    if largest > sampled:
        return Figure(largest, "lower bound (NVML accounting: the largest single peak; peaks may not coincide)")
    label = SAMPLED if not log.attributed.intersection(users) else f"{SAMPLED}; {BY_ELIMINATION}"
    return Figure(sampled, label)


def combined_peak(main: Figure, desc: Figure, sampled: int, complete: bool) -> Figure:
    """The tree's peak: exact when one side is exact and the other never held GPU memory (`complete`: no process
    of the tree can have gone unseen)."""
    if main.label == EXACT and desc.value == 0 and desc.label == SAMPLED and complete:
        return main
    if desc.label == EXACT and main.value == 0 and main.label == SAMPLED:
        return desc
    value = max(sampled, main.value, desc.value)
    if value == sampled:
        label = SAMPLED if BY_ELIMINATION not in main.label + desc.label else f"{SAMPLED}; {BY_ELIMINATION}"
        return Figure(value, label)
    return Figure(value, "lower bound (NVML accounting: the larger of main's and the descendants' peaks)")


def accounting_state(log: GpuAccountingLog) -> bool | None:
    """True: on for every NVIDIA GPU that has the mode; False: off on one at least; None: no GPU said (none, or
    MIG only)."""
    said = [m for m in log.modes.values() if m is not None]
    if not said:
        return None
    return all(said) and log.never_off


def accounting_note(log: GpuAccountingLog) -> str | None:
    """The report's line when accounting is off somewhere (only worth saying when the tree used a GPU)."""
    off = sorted(i for i, m in log.modes.items() if m is False)
    if not off:
        return None
    gpus = ", ".join(str(i) for i in off)
    return (
        f"NVML accounting mode is off on GPU {gpus}: GPU memory peaks are sampled, so a spike between two reads "
        f"is missed; with it on, each process's peak is exact (kept by the driver, exited processes too): "
        f"{HOW_TO_ENABLE}"
    )


@dataclass
class GpuPeaks:
    main: Figure
    descendants: Figure
    combined: Figure


def tree_gpu_peaks(
    log: GpuAccountingLog, main_pid: int, desc_pids: Iterable[int], sampled: tuple[int, int, int], complete: bool
) -> GpuPeaks:
    """main / descendants / combined peaks: the samples' (main, descendants, combined) and the driver's records."""
    main = process_peak(log, main_pid, sampled[0])
    desc = group_peak(log, desc_pids, sampled[1], complete)
    return GpuPeaks(main, desc, combined_peak(main, desc, sampled[2], complete))
