"""A saved session as a file: the whole session as JSON, its timeline as CSV, its events as CSV or JSON.

One place for both front ends: `gputop-track sessions export|events` and the history view's export action.
"""

from __future__ import annotations

import csv
import io
import math
import re
import time
from collections.abc import Iterable
from pathlib import Path

from gputop_tracker.core.model.models import Event, Session
from gputop_tracker.core.model.text import json_text
from gputop_tracker.core.store import sessions as store

EVENT_COLUMNS = [
    "time",
    "elapsed",
    "type",
    "message",
    "pid",
    "name",
    "resource",
    "value",
    "limit",
    "percent",
    "exit_code",
    "signal",
    "source",
    "dump",
]


# Timeline columns that count bytes or things (core/summary/builder.py TIMELINE_COLUMNS, and gpuN_memory): whole
# numbers in the CSV, as in the report (the timeline keeps every figure as a float).
WHOLE_COLUMNS = frozenset(
    ("combined_total", "combined_private", "combined_shared", "main_rss", "descendants_total", "threads",
     "n_processes", "gpu_memory", "host_memory_used")
)  # fmt: skip
_GPU_MEMORY = re.compile(r"gpu\d+_memory")


def timeline_csv(session: Session) -> str:
    """The timeline, one row per sample, with the local wall-clock time first; byte counts and counts whole."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    columns = session.timeline.columns
    writer.writerow(["time", *columns])
    whole = [c in WHOLE_COLUMNS or bool(_GPU_MEMORY.fullmatch(c)) for c in columns]
    start = session.meta.start_time
    for row in session.timeline.rows:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start + float(row[0] or 0)))
        cells = [_cell(v, i < len(whole) and whole[i]) for i, v in enumerate(row)]
        writer.writerow([stamp, *cells])
    return buf.getvalue()


def _cell(value: float | None, whole: bool) -> object:
    if value is None:
        return ""
    if whole and math.isfinite(value):
        return round(value)
    return value


def session_json(session: Session) -> str:
    """Everything saved about the session, indented."""
    return json_text(session.model_dump(mode="json")) + "\n"


def events_json(events: Iterable[Event]) -> str:
    return json_text([e.model_dump(mode="json", exclude_none=True) for e in events]) + "\n"


def events_csv(events: Iterable[Event]) -> str:
    """One row per event, EVENT_COLUMNS, the time local with milliseconds."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(EVENT_COLUMNS)
    for e in events:
        d = e.model_dump(mode="json")
        d["time"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(e.time)) + f".{int(e.time % 1 * 1000):03d}"
        writer.writerow(["" if d.get(c) is None else d[c] for c in EVENT_COLUMNS])
    return buf.getvalue()


def export_session(entry: store.Entry, path: Path, *, make_dirs: bool = False) -> str:
    """Write the session (JSON) or its timeline (CSV, by the path's suffix); returns the format written.
    `make_dirs`: a missing directory is made (the history view's export dialog; `-o` never makes one)."""
    full = store.load(entry.path)
    if full.session is None:
        raise LookupError(f"session {entry.id} is unreadable: {full.error}")
    csv_wanted = path.suffix.lower() == ".csv"
    data = timeline_csv(full.session) if csv_wanted else session_json(full.session)
    store.write_output(path, data.encode(), make_dirs=make_dirs)
    return "csv" if csv_wanted else "json"
