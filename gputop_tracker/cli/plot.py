"""`gputop-track sessions plot ID [-o FILE] [--size WxH]` and `--plot FILE` after a headless run.

The drawing is core/report/plot.py's; here are the command line, its checks (before any work: the format from
the name, the size, matplotlib present, the file writable) and the one-line messages.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gputop_tracker import console
from gputop_tracker.console import Parser, UsageError
from gputop_tracker.core.store import sessions as store


def add_plot_parser(sub: argparse._SubParsersAction[Parser], common: Parser, id_help: str) -> None:
    p = sub.add_parser(
        "plot",
        help="a picture of a session: RAM, CPU, GPU over time (PNG, SVG or HTML; needs the plot extra)",
        description=(
            "A picture of a session: tree RAM (combined and private, the largest processes), CPU (% of a core, "
            "the requested cores), GPU memory and utilization per GPU, alerts and OOM kills marked, code blocks "
            "shaded. The format comes from the name: .png, .svg or .html (one page that needs nothing else). "
            "Needs matplotlib: pip install 'matplotlib>=3.7' (the plot extra)."
        ),
        parents=[common],
    )
    p.add_argument("id", metavar="ID", help=id_help)
    p.add_argument("-o", "--output", metavar="FILE", help="the picture (default: ID.png in this directory)")
    p.add_argument("--size", metavar="WxH", help="width x height in pixels (default: 1200 wide, 260 per panel)")


def check(name: str, size: str | None = None) -> tuple[str, tuple[int, int] | None]:
    """Everything that can be checked before the work: the format, the size, matplotlib, the file. Returns
    (format, size); UsageError (one line, exit 2) otherwise."""
    from gputop_tracker.core.report import plot

    try:
        fmt = plot.format_of(name)
        pixels = plot.parse_pixel_size(size) if size is not None else None
        plot.require_matplotlib()
        store.check_output(name)
    except (plot.PlotError, plot.PlotUnavailable, store.OutputError) as e:
        raise UsageError(str(e)) from None
    return fmt, pixels


def plot_session(store_dir: Path, args: argparse.Namespace) -> int:
    """`sessions plot`: the session's picture to -o FILE (default ID.png)."""
    from gputop_tracker.core.report import plot

    if args.output is not None:
        fmt, size = check(args.output, args.size)
    entry = store.load(store.find(store_dir, args.id))
    if entry.session is None:
        raise LookupError(f"session {entry.id} is unreadable: {entry.error}")
    output = args.output or f"{entry.id}.png"
    if args.output is None:
        fmt, size = check(output, args.size)
    try:
        data = plot.picture(entry.session, fmt, size)
    except Exception as e:  # a session this version cannot draw: one line, never a traceback
        return console.error(
            f"cannot draw session {entry.id}: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
            console.EXIT_FAILURE,
        )
    try:
        store.write_output(Path(output), data)
    except OSError as e:
        return console.error(f"cannot write {output}: {e.strerror or e}", console.EXIT_FAILURE)
    console.write_stderr(f"{console.PROG}: plot of {entry.id} written to {output}\n")
    return 0


def plot_after_run(session_path: str | None, output: str) -> bool:
    """`--plot FILE` once the report is out: draw the saved session. Never raises; a failure is one line on
    stderr (the report and the session are safe by then). True when the picture was written."""
    if not session_path:
        console.say(f"no plot written to {output}: the session was not saved")
        return False
    try:
        from gputop_tracker.core.report import plot

        entry = store.load(Path(session_path))
        if entry.session is None:
            raise LookupError(f"cannot read the session: {entry.error}")
        store.write_output(Path(output), plot.picture(entry.session, plot.format_of(output)))
    except Exception as e:  # a picture is never worth a traceback after a measured run
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        reason = reason.splitlines()[0] if reason.strip() else type(e).__name__  # one line (pyparsing's are 3)
        console.say(f"no plot written to {output}: {reason}")
        return False
    console.say(f"plot written to {output}")
    return True
