"""Code-block runs on a session's time axis, from its event timeline: the one pairing of block starts and ends
that the history's charts (outermost runs) and the plot (every run) both draw."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from gputop_tracker.core.model.models import Event


class BlockRun(NamedTuple):
    name: str
    start: float  # seconds since the session's start
    end: float


def elapsed_at(event: Event, start_time: float) -> float:
    """Seconds since the session's start: the event's own figure, else from its wall-clock time."""
    return event.elapsed if event.elapsed else max(0.0, event.time - start_time)


def block_runs(events: Iterable[Event], start_time: float, end: float | None) -> list[BlockRun]:
    """Every run of every block, in order of start: a start is paired with the next end of the same name in the
    same process (nested and recursive runs each get their own); a run still open at the end lasts to `end`
    (or, when the end is unknown, until its own start)."""
    open_runs: dict[tuple[int | None, str], list[float]] = {}
    runs: list[BlockRun] = []
    for event in events:
        key = (event.pid, event.name or "")
        if event.type == "block_start":
            open_runs.setdefault(key, []).append(elapsed_at(event, start_time))
        elif event.type == "block_end" and open_runs.get(key):
            runs.append(BlockRun(key[1], open_runs[key].pop(), elapsed_at(event, start_time)))
    for (_pid, name), starts in open_runs.items():
        runs += [BlockRun(name, t0, max(end if end is not None else t0, t0)) for t0 in starts]
    runs.sort(key=lambda run: (run.start, -run.end))
    return runs


def outermost(runs: Sequence[BlockRun]) -> list[BlockRun]:
    """The runs not inside another (a step inside an epoch is left in the epoch); runs sorted by start."""
    kept: list[BlockRun] = []
    for run in runs:
        if not kept or run.end > kept[-1].end:
            kept.append(run)
    return kept


def marks(events: Iterable[Event], start_time: float) -> list[tuple[float, str]]:
    """(seconds since the start, name) of each mark, in order."""
    return sorted(
        (elapsed_at(event, start_time), event.name or event.message) for event in events if event.type == "mark"
    )
