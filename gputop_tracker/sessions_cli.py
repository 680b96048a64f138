"""`gputop-track sessions list|show|export|events|delete`: the saved sessions without the TUI."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from pathlib import Path

from gputop_tracker.core import paths, report, store
from gputop_tracker.core.models import Session
from gputop_tracker.core.units import UnitError, Units, human_bytes, human_seconds

PROG = "gputop-track"  # errors start `gputop-track: error:`, as every bad input of the tool


def _err(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def _open(store_dir: Path, session_id: str) -> Session:
    entry = store.load(store.find(store_dir, session_id))
    if entry.session is None:
        raise LookupError(f"session {entry.id} is unreadable: {entry.error}")
    return entry.session


def run(args: argparse.Namespace) -> int:
    store_dir = paths.store_dir(args.store)
    try:
        code = _dispatch(store_dir, args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except (LookupError, UnitError) as e:
        return _err(str(e.args[0]))
    except OSError as e:
        if e.filename is None:  # stdout: a closed pipe (`| head`) or a full disk
            from gputop_tracker.cli import stdout_failed

            stdout_failed()
            return _err(f"cannot write to stdout: {e.strerror}", 1)
        return _err(f"{e.filename}: {e.strerror}", 1)


def _dispatch(store_dir: Path, args: argparse.Namespace) -> int:
    if args.action == "list":
        return list_sessions(store_dir)
    if args.action == "show":
        return show(store_dir, args)
    if args.action == "export":
        return export(store_dir, args)
    if args.action == "events":
        return events(store_dir, args)
    if args.action == "delete":
        path = store.delete(store_dir, args.id)
        print(f"deleted {path.name.removesuffix(store.SUFFIX)}")
        return 0
    return _err(f"unknown action {args.action}")


def list_sessions(store_dir: Path) -> int:
    entries = store.list_entries(store_dir)
    if not entries:
        print(f"no sessions in {store_dir}")
        return 0
    print(f"{'id':<44} {'status':<9} {'duration':>10} {'exit':>5} {'peak RAM':>10} {'peak GPU':>10}  command")
    for e in entries:
        if e.session is None:
            print(f"{e.id:<44} {'UNREADABLE':<9} {e.error}")
            continue
        s = e.session
        u = s.summary
        status = "running" if e.running else ("stale" if s.meta.status == "running" else s.meta.status)
        dur = human_seconds(u.compute_time.time) if u else "-"
        ram = human_bytes(u.max_ram.combined.total_rss) if u else "-"
        gpu = human_bytes(u.max_gpu_ram.combined) if u and u.gpus else "-"
        code = "" if s.meta.exit_code is None else str(s.meta.exit_code)
        cmd = " ".join(s.meta.command)[:60]
        print(f"{e.id:<44} {status:<9} {dur:>10} {code:>5} {ram:>10} {gpu:>10}  {cmd}")
    return 0


def show(store_dir: Path, args: argparse.Namespace) -> int:
    s = _open(store_dir, args.id)
    if s.summary is None:
        return _err(f"session {s.meta.id} has no summary yet")
    units = Units.parse(args.ram_unit, args.gpu_ram_unit, args.time_unit)
    sys.stdout.write(
        report.to_json(s.summary, units) + "\n" if args.format == "json" else report.to_text(s.summary, units)
    )
    sys.stdout.flush()
    return 0


def timeline_csv(s: Session) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["time", *s.timeline.columns])
    start = s.meta.start_time
    for row in s.timeline.rows:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start + float(row[0] or 0)))
        w.writerow([stamp, *("" if v is None else v for v in row)])
    return buf.getvalue()


def export(store_dir: Path, args: argparse.Namespace) -> int:
    s = _open(store_dir, args.id)
    text = timeline_csv(s) if args.format == "csv" else json.dumps(s.model_dump(mode="json"), indent=2) + "\n"
    if args.output:
        store.write_output(Path(args.output), text.encode())
        print(f"exported {s.meta.id} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


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


def events(store_dir: Path, args: argparse.Namespace) -> int:
    """The event timeline of a session: text (one line each), JSON (a list) or CSV."""
    from gputop_tracker.core.events import EVENT_TYPES

    for t in args.type or []:
        if t not in EVENT_TYPES:
            raise LookupError(f"unknown event type {t!r}: choose from {', '.join(EVENT_TYPES)}")
    s = _open(store_dir, args.id)
    found = [e for e in s.events if not args.type or e.type in args.type]
    if args.format == "json":
        text = json.dumps([e.model_dump(mode="json", exclude_none=True) for e in found], indent=2) + "\n"
    elif args.format == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(EVENT_COLUMNS)
        for e in found:
            d = e.model_dump(mode="json")
            d["time"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(e.time)) + f".{int(e.time % 1 * 1000):03d}"
            w.writerow(["" if d.get(c) is None else d[c] for c in EVENT_COLUMNS])
        text = buf.getvalue()
    else:
        lines = report.events_lines(found, limit=len(found))
        text = "\n".join(lines) + "\n" if lines else f"no events in session {s.meta.id}\n"
    if args.output:
        store.write_output(Path(args.output), text.encode())
        print(f"exported {len(found)} events of {s.meta.id} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0
