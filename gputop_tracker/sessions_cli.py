"""`gputop-track sessions list|show|export|events|delete`: the saved sessions without the TUI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gputop_tracker import console
from gputop_tracker.console import Parser, UsageError
from gputop_tracker.core import export as exporting
from gputop_tracker.core import paths, report, store
from gputop_tracker.core.models import Session
from gputop_tracker.core.units import UnitError, Units, human_bytes, human_seconds


def build_sessions_parser() -> Parser:
    p = Parser(prog=f"{console.PROG} sessions", description="Saved sessions.")
    p.add_argument("--store", metavar="DIR", help="session store")
    # --store also after the action (`sessions list --store DIR`); SUPPRESS: not given there, the one
    # given before the action (or None) stays
    common = Parser(add_help=False)
    common.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help="session store")
    sub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    sub.add_parser("list", help="every saved session, newest first", parents=[common])
    show = sub.add_parser("show", help="the report of one session", parents=[common])
    show.add_argument("id")
    show.add_argument("-f", "--format", choices=("text", "json"), default="text")
    show.add_argument("--ru", "--ram-unit", dest="ram_unit")
    show.add_argument("--gru", "--gpu-ram-unit", dest="gpu_ram_unit")
    show.add_argument("--tu", "--time-unit", dest="time_unit")
    export_parser = sub.add_parser(
        "export", help="a session as JSON (everything) or CSV (the timeline)", parents=[common]
    )
    export_parser.add_argument("id")
    export_parser.add_argument("-f", "--format", choices=("json", "csv"), default="json")
    export_parser.add_argument("-o", "--output", metavar="FILE", help="default: stdout")
    events_parser = sub.add_parser(
        "events", help="the event timeline of a session (alerts, peaks, processes, OOM)", parents=[common]
    )
    events_parser.add_argument("id")
    events_parser.add_argument("-f", "--format", choices=("text", "json", "csv"), default="text")
    events_parser.add_argument("-t", "--type", action="append", metavar="TYPE", help="only events of TYPE (repeatable)")
    events_parser.add_argument("-o", "--output", metavar="FILE", help="default: stdout")
    delete = sub.add_parser("delete", help="delete a session", parents=[common])
    delete.add_argument("id")
    return p


def main(argv: list[str]) -> int:
    """`gputop-track sessions ARGV...`; bad input is one error line and exit 2."""
    try:
        return run(build_sessions_parser().parse_args(argv))
    except UsageError as e:
        return console.error(str(e))


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
        return console.error(str(e.args[0]))
    except OSError as e:
        if e.filename is None:  # stdout: a closed pipe (`| head`) or a full disk
            console.stdout_failed()
            return console.error(f"cannot write to stdout: {e.strerror}", console.EXIT_FAILURE)
        return console.error(f"{e.filename}: {e.strerror}", console.EXIT_FAILURE)


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
    return console.error(f"unknown action {args.action}")


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
        return console.error(f"session {s.meta.id} has no summary yet")
    units = Units.parse(args.ram_unit, args.gpu_ram_unit, args.time_unit)
    sys.stdout.write(
        report.to_json(s.summary, units) + "\n" if args.format == "json" else report.to_text(s.summary, units)
    )
    sys.stdout.flush()
    return 0


def _write(text: str, output: str | None, done: str) -> None:
    """To `output` (then `done` on stderr) or to stdout."""
    if output:
        store.write_output(Path(output), text.encode())
        print(done, file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def export(store_dir: Path, args: argparse.Namespace) -> int:
    s = _open(store_dir, args.id)
    text = exporting.timeline_csv(s) if args.format == "csv" else exporting.session_json(s)
    _write(text, args.output, f"exported {s.meta.id} to {args.output}")
    return 0


def events(store_dir: Path, args: argparse.Namespace) -> int:
    """The event timeline of a session: text (one line each), JSON (a list) or CSV."""
    from gputop_tracker.core.events import EVENT_TYPES

    for t in args.type or []:
        if t not in EVENT_TYPES:
            raise LookupError(f"unknown event type {t!r}: choose from {', '.join(EVENT_TYPES)}")
    s = _open(store_dir, args.id)
    found = [e for e in s.events if not args.type or e.type in args.type]
    if args.format == "json":
        text = exporting.events_json(found)
    elif args.format == "csv":
        text = exporting.events_csv(found)
    else:
        lines = report.events_lines(found, limit=len(found))
        text = "\n".join(lines) + "\n" if lines else f"no events in session {s.meta.id}\n"
    _write(text, args.output, f"exported {len(found)} events of {s.meta.id} to {args.output}")
    return 0
