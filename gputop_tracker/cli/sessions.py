"""`gputop-track sessions list|show|export|events|compare|delete`: the saved sessions without the TUI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gputop_tracker import console
from gputop_tracker.cli import formats
from gputop_tracker.cli import jobs as jobs_cli
from gputop_tracker.cli import plot as plot_cli
from gputop_tracker.console import Parser, UsageError
from gputop_tracker.core.model import paths
from gputop_tracker.core.model.models import Session
from gputop_tracker.core.model.units import UnitError
from gputop_tracker.core.report import session_list
from gputop_tracker.core.store import sessions as store

SESSIONS_EPILOG = f"""\
examples:
  {console.PROG} sessions list                newest first (the command is cut only on a terminal)
  {console.PROG} sessions list -f json | jq '.[].id'
  {console.PROG} sessions show 20250102-0930 --ru gigabytes
  {console.PROG} sessions export ID -f csv -o timeline.csv
  {console.PROG} sessions events ID -t warning -t critical
  {console.PROG} sessions job 4242 -f json   every session of SLURM job 4242 (array tasks or nodes)
  {console.PROG} sessions compare ID_A ID_B     the run and its code blocks side by side
  {console.PROG} sessions plot ID -o run.html   RAM, CPU and GPUs over time (.png, .svg, .html)

An ID may be given by its start (any prefix that matches one session). Reports, listings and
exports go to stdout unless -o FILE; errors go to stderr (one line starting `{console.PROG}: error:`).

exit codes:
  0  done
  1  a file or stdout could not be written
  2  bad input (an unknown session, a bad option, an -o FILE that cannot be written)
"""

STORE_HELP = f"session store (default: ${paths.STORE_ENV} or the user data dir)"
ID_HELP = "the session's id, or its start if only one session matches (as `sessions list` shows)"


def build_sessions_parser() -> Parser:
    p = Parser(
        prog=f"{console.PROG} sessions",
        description="The saved sessions (one JSON file each in the store), without the TUI.",
        epilog=SESSIONS_EPILOG,
    )
    p.add_argument("--store", metavar="DIR", type=console.name, help=STORE_HELP)
    # --store also after the action (`sessions list --store DIR`); SUPPRESS: not given there, the one
    # given before the action (or None) stays
    common = Parser(add_help=False)
    common.add_argument("--store", metavar="DIR", type=console.name, default=argparse.SUPPRESS, help=STORE_HELP)
    sub = p.add_subparsers(
        dest="action", required=True, parser_class=Parser, metavar="ACTION", help="one of (`ACTION --help` for more):"
    )
    for action in ACTIONS:
        action.add_parser(sub, common)
    return p


OUTPUT_HELP = "write to FILE (default, or `-`: stdout)"


def _subcommand(
    sub: argparse._SubParsersAction[Parser], common: Parser, name: str, help_text: str, description: str, *, of_id: bool
) -> Parser:
    """One `sessions NAME` parser with the options every action takes; `of_id`: the session's ID comes first."""
    parser = sub.add_parser(name, help=help_text, description=description, parents=[common])
    if of_id:
        parser.add_argument("id", metavar="ID", help=ID_HELP)
    return parser


def _add_output(parser: Parser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE", type=_file_or_stdout, help=OUTPUT_HELP)


def _file_or_stdout(name: str) -> str | None:
    """`-o -` (or the file stdout already is) is stdout: None, as without `-o`; never a file named `-`."""
    return None if console.names_stdout(console.name(name)) else name


def _add_delete_parser(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    _subcommand(
        sub,
        common,
        "delete",
        "delete a session",
        "Delete a session's file, its saved output and its OOM dumps (cannot be undone).",
        of_id=True,
    )


def _add_plot_parser(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    plot_cli.add_plot_parser(sub, common, ID_HELP)


def _add_list_parser(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    ls = _subcommand(
        sub,
        common,
        "list",
        "every saved session, newest first",
        "Every saved session, newest first; unreadable files are listed with the reason.",
        of_id=False,
    )
    formats.LISTING.add_option(ls)
    ls.add_argument("--no-trunc", action="store_true", help="never shorten the command (it is cut only on a terminal)")


def _add_show_parser(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    show_parser = _subcommand(
        sub,
        common,
        "show",
        "the report of one session",
        "The report of one session, as the run printed it (text) or as JSON.",
        of_id=True,
    )
    formats.REPORT.add_option(show_parser)
    formats.add_unit_options(show_parser)


def _add_export_parser(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    export_parser = _subcommand(
        sub,
        common,
        "export",
        "a session as JSON (everything) or CSV (the timeline)",
        "A session as JSON (everything saved) or CSV (the sampled timeline, one row per sample).",
        of_id=True,
    )
    formats.SESSION.add_option(export_parser)
    _add_output(export_parser)


def _add_events_parser(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    events_parser = _subcommand(
        sub,
        common,
        "events",
        "the event timeline of a session (alerts, peaks, processes, OOM)",
        "The event timeline of a session: alerts, new peaks, processes started and ended, OOM.",
        of_id=True,
    )
    formats.EVENTS.add_option(events_parser)
    events_parser.add_argument(
        "-t", "--type", action="append", metavar="TYPE", help="only events of TYPE, e.g. warning (repeatable)"
    )
    _add_output(events_parser)


def _add_compare_parser(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    compare_parser = _subcommand(
        sub,
        common,
        "compare",
        "two sessions side by side: the run and the same code blocks, with differences",
        "Two sessions side by side: the run's figures and each code block (`with block()`, `@tracked`) of "
        "either, with B - A and the change in percent. JSON figures are bytes and seconds.",
        of_id=False,
    )
    compare_parser.add_argument("a", metavar="ID_A", help=ID_HELP)
    compare_parser.add_argument("b", metavar="ID_B", help="the other session (B - A is shown)")
    formats.COMPARISON.add_option(compare_parser)
    _add_output(compare_parser)
    formats.add_unit_options(compare_parser, " of the text")


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
        return code
    except (LookupError, UnitError, store.OutputError) as e:
        return console.error(str(e.args[0]))
    except console.StdoutError as e:  # a closed pipe (`| head`), a full disk, stdout closed
        return console.write_error(e)
    except OSError as e:
        if e.filename is None:  # stdout: a closed pipe (`| head`) or a full disk
            return console.write_error(e)
        return console.error(f"{e.filename}: {e.strerror}", console.EXIT_FAILURE)


def _dispatch(store_dir: Path, args: argparse.Namespace) -> int:
    return next(a for a in ACTIONS if a.name == args.action).run(store_dir, args)


def list_sessions(store_dir: Path, args: argparse.Namespace) -> int:
    """Every session, newest first. The command is cut to the terminal's width only on a terminal: piped
    (`| grep train.py`) every row is whole."""
    entries = store.list_entries(store_dir, timeline=False)
    listing = session_list.Listing(store_dir, entries, trunc=not args.no_trunc and sys.stdout.isatty())
    console.write_stdout(formats.LISTING.render(args.format, listing))
    return 0


def delete(store_dir: Path, args: argparse.Namespace) -> int:
    path = store.delete(store_dir, args.id)
    console.print_stdout(f"deleted {path.name.removesuffix(store.SUFFIX)}")
    return 0


def show(store_dir: Path, args: argparse.Namespace) -> int:
    s = _open(store_dir, args.id)
    if s.summary is None:
        return console.error(f"session {s.meta.id} has no summary yet")
    console.write_stdout(formats.REPORT.render(args.format, s.summary, formats.units_of(args)))
    return 0


def _write(text: str, output: str | None, done: str) -> int:
    """To `output` (checked before any work by `store.check_output`; then `done` on stderr) or to stdout.
    A file that cannot be written is named in one error line: exit 1."""
    if output is None:
        console.write_stdout(text)
        return 0
    try:
        store.write_output(Path(output), text.encode())
    except OSError as e:
        return console.error(f"cannot write {output}: {e.strerror or e}", console.EXIT_FAILURE)
    print(done, file=sys.stderr)
    return 0


def export(store_dir: Path, args: argparse.Namespace) -> int:
    if args.output is not None:
        store.check_output(args.output)
    s = _open(store_dir, args.id)
    text = formats.SESSION.render(args.format, s)
    return _write(text, args.output, f"exported {s.meta.id} to {args.output}")


def events(store_dir: Path, args: argparse.Namespace) -> int:
    """The event timeline of a session: text (one line each), JSON (a list) or CSV."""
    from gputop_tracker.core.summary.events import EVENT_TYPES

    for t in args.type or []:
        if t not in EVENT_TYPES:
            raise LookupError(f"unknown event type {t!r}: choose from {', '.join(EVENT_TYPES)}")
    if args.output is not None:
        store.check_output(args.output)
    s = _open(store_dir, args.id)
    found = [e for e in s.events if not args.type or e.type in args.type]
    text = formats.EVENTS.render(args.format, found) or f"no events in session {s.meta.id}\n"
    return _write(text, args.output, f"exported {len(found)} events of {s.meta.id} to {args.output}")


def compare_sessions(store_dir: Path, args: argparse.Namespace) -> int:
    """`sessions compare A B`: text or JSON (core/report/compare.py)."""
    from gputop_tracker.core.report import compare

    units = formats.units_of(args)
    if args.output is not None:
        store.check_output(args.output)
    a, b = _open(store_dir, args.a), _open(store_dir, args.b)
    text = formats.COMPARISON.render(args.format, compare.compare(a, b), units)
    return _write(text, args.output, f"compared {a.meta.id} and {b.meta.id} into {args.output}")


# --------------------------------------------------------------------------- the actions, in `--help` order


@dataclass(frozen=True)
class Action:
    """One `sessions ACTION`: its parser and what it does. Adding an action is one entry of ACTIONS."""

    name: str
    add_parser: Callable[[argparse._SubParsersAction[Parser], Parser], None]
    run: Callable[[Path, argparse.Namespace], int]


ACTIONS = (
    Action("list", _add_list_parser, list_sessions),
    Action("show", _add_show_parser, show),
    Action("export", _add_export_parser, export),
    Action("events", _add_events_parser, events),
    Action("job", jobs_cli.add_job_parser, jobs_cli.job),
    Action("compare", _add_compare_parser, compare_sessions),
    Action("plot", _add_plot_parser, plot_cli.plot_session),
    Action("delete", _add_delete_parser, delete),
)
