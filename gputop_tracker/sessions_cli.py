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
from gputop_tracker.core.text import command_line, escape_controls
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
    except (LookupError, UnitError, store.OutputError) as e:
        return _err(str(e.args[0]))
    except OSError as e:
        if e.filename is None:  # stdout: a closed pipe (`| head`) or a full disk
            from gputop_tracker.cli import stdout_failed

            stdout_failed()
            return _err(f"cannot write to stdout: {e.strerror}", 1)
        return _err(f"{e.filename}: {e.strerror}", 1)


def _dispatch(store_dir: Path, args: argparse.Namespace) -> int:
    if args.action == "list":
        return list_sessions(store_dir, fmt=args.format, trunc=not args.no_trunc and sys.stdout.isatty())
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


def _list_status(e: store.Entry) -> str:
    if e.session is None:
        return "unreadable"
    if e.running:
        return "running"
    return "stale" if e.session.meta.status == "running" else e.session.meta.status


def _list_json(e: store.Entry) -> dict[str, object]:
    """One session of `sessions list -f json`: its metadata and headline figures, or why it cannot be read."""
    item: dict[str, object] = {"id": e.id, "path": str(e.path), "status": _list_status(e), "error": e.error}
    if e.session is not None:
        u = e.session.summary
        item["meta"] = e.session.meta.model_dump(mode="json")
        item["duration_seconds"] = u.compute_time.time if u else None
        item["peak_ram_bytes"] = u.max_ram.combined.total_rss if u else None
        item["peak_gpu_ram_bytes"] = u.max_gpu_ram.combined if u and u.gpus else None
    return item


def list_sessions(store_dir: Path, fmt: str = "text", *, trunc: bool = False) -> int:
    """Every session, newest first. The command is cut to the terminal's width only on a terminal (`trunc`):
    piped (`| grep train.py`) every row is whole. Control characters are escaped: one session, one line."""
    import shutil

    entries = store.list_entries(store_dir, timeline=False)
    if fmt == "json":
        sys.stdout.write(json.dumps([_list_json(e) for e in entries], indent=2) + "\n")
        return 0
    if not entries:
        print(f"no sessions in {escape_controls(str(store_dir))}")
        return 0
    rows = [["id", "status", "duration", "exit", "peak RAM", "peak GPU", "command"]]
    for e in entries:
        sid = escape_controls(e.id)
        if e.session is None:
            rows.append([sid, "UNREADABLE", escape_controls(e.error or "")])
            continue
        s = e.session
        u = s.summary
        rows.append(
            [
                sid,
                _list_status(e),
                human_seconds(u.compute_time.time) if u else "-",
                "" if s.meta.exit_code is None else str(s.meta.exit_code),
                human_bytes(u.max_ram.combined.total_rss) if u else "-",
                human_bytes(u.max_gpu_ram.combined) if u and u.gpus else "-",
                command_line(s.meta.command) or "-",
            ]
        )
    full = [r for r in rows if len(r) == 7]
    widths = [max(len(r[i]) for r in (rows if i < 2 else full)) for i in range(6)]
    room = shutil.get_terminal_size().columns - sum(w + 2 for w in widths) if trunc else 0
    for r in rows:
        if len(r) < 7:  # unreadable: id, UNREADABLE, the reason
            print(f"{r[0]:<{widths[0]}}  {r[1]}  {r[2]}")
            continue
        cmd = r[6]
        if trunc and len(cmd) > max(room, 20):
            cmd = cmd[: max(room, 20) - 1] + "…"
        cells = [
            r[0].ljust(widths[0]),
            r[1].ljust(widths[1]),
            *(c.rjust(w) for c, w in zip(r[2:6], widths[2:6], strict=True)),
            cmd,
        ]
        print("  ".join(cells).rstrip())
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


def _write_file(name: str, text: str) -> bool:
    """Write `-o FILE` (checked before any work by `store.check_output`); a failure names the file."""
    try:
        store.write_output(Path(name), text.encode())
    except OSError as e:
        _err(f"cannot write {name}: {e.strerror or e}", 1)
        return False
    return True


def export(store_dir: Path, args: argparse.Namespace) -> int:
    if args.output is not None:
        store.check_output(args.output)
    s = _open(store_dir, args.id)
    text = timeline_csv(s) if args.format == "csv" else json.dumps(s.model_dump(mode="json"), indent=2) + "\n"
    if args.output is not None:
        if not _write_file(args.output, text):
            return 1
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
    if args.output is not None:
        store.check_output(args.output)
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
    if args.output is not None:
        if not _write_file(args.output, text):
            return 1
        print(f"exported {len(found)} events of {s.meta.id} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0
