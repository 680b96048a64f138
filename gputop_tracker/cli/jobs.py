"""`gputop-track advise` (what to ask SLURM for next time) and `gputop-track sessions job JOBID` (every
session of one job: array tasks or nodes). The figures come from core/report/advise.py and core/report/job_view.py."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from gputop_tracker import console
from gputop_tracker.cli import formats
from gputop_tracker.console import Parser, UsageError
from gputop_tracker.core.model import paths
from gputop_tracker.core.model.text import command_line
from gputop_tracker.core.report.advise import DEFAULT_HEADROOM, advise
from gputop_tracker.core.report.job_view import belongs, job_view
from gputop_tracker.core.store import sessions as store

ADVISE_EPILOG = f"""\
examples:
  {console.PROG} advise                      from the newest session
  {console.PROG} advise --job 4242           from every session of SLURM job 4242 (or array 4242)
  {console.PROG} advise --command train.py --last 10 --headroom 30
  {console.PROG} advise ID1 ID2 -f json

The request is the largest figure over the sessions (p95 shown when there are 5 or more) plus the
headroom, rounded up: see README, "Sizing advice". Paste the #SBATCH lines into the job script.
"""


def build_advise_parser() -> Parser:
    p = Parser(
        prog=f"{console.PROG} advise",
        description="What to ask SLURM for next time, from the peaks of one or many saved sessions.",
        epilog=ADVISE_EPILOG,
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="sessions (id or its start); default: the newest")
    p.add_argument("--job", metavar="JOBID", help="every session of this SLURM job (or job array)")
    p.add_argument("--command", metavar="TEXT", help="only sessions whose command line contains TEXT")
    p.add_argument("--last", type=console.whole, metavar="N", help="only the newest N of the sessions chosen")
    p.add_argument(
        "--headroom",
        type=console.real,
        default=DEFAULT_HEADROOM,
        metavar="PCT",
        help=f"added to the peaks of memory and time (default {DEFAULT_HEADROOM:g})",
    )
    formats.ADVICE.add_option(p)
    p.add_argument(
        "--store",
        metavar="DIR",
        type=console.name,
        help=f"session store (default: ${paths.STORE_ENV} or the user data dir)",
    )
    return p


def _finished(entries: list[store.Entry]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for e in entries:
        s = e.session
        if s is not None and s.summary is not None and not e.running:
            out.append((e.id, s.summary.model_dump(mode="json")))
    return out


def choose(store_dir: Path, args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """The sessions `advise` reads: the IDs given, else the store's; filtered by --job and --command, then
    the newest --last N (the newest one when nothing narrows the choice)."""
    if args.ids:
        entries = [store.load(store.find(store_dir, i), timeline=False) for i in args.ids]
    else:
        entries = store.list_entries(store_dir, timeline=False)  # newest first
    chosen = _finished(entries)
    if args.job is not None:
        chosen = [(sid, u) for sid, u in chosen if belongs(u, args.job)]
    if args.command is not None:
        chosen = [(sid, u) for sid, u in chosen if args.command in command_line(u.get("command") or [])]
    last = args.last if args.last is not None else (None if args.ids or args.job or args.command else 1)
    return chosen[:last] if last is not None else chosen


def advise_main(argv: list[str]) -> int:
    try:
        args = build_advise_parser().parse_args(argv)
        if args.last is not None and args.last < 1:
            raise UsageError(f"--last needs a positive number, not {args.last}")
        if not (0 <= args.headroom <= 1000) or math.isnan(args.headroom):
            raise UsageError(f"--headroom must be between 0 and 1000 (percent), not {args.headroom:g}")
        chosen = choose(paths.store_dir(args.store), args)
    except UsageError as e:
        return console.error(str(e))
    except LookupError as e:
        return console.error(str(e.args[0]))
    if not chosen:
        return console.error("no finished session matches: nothing to advise from")
    advice = advise([u for _, u in chosen], args.headroom)
    advice["sessions"] = [sid for sid, _ in chosen]
    console.write_stdout(formats.ADVICE.render(args.format, advice))
    return 0


# --------------------------------------------------------------------------- sessions job


def add_job_parser(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    job = sub.add_parser(
        "job",
        help="every session of one SLURM job: array tasks or nodes",
        description="Every session of one SLURM job: the tasks of an array (n, p50, p95, max, failures by exit "
        "code) or the nodes of a multi-node job (one row per node, totals, the slowest node).",
        parents=[common],
    )
    job.add_argument("job_id", metavar="JOBID", help="the job's id (SLURM_JOB_ID) or the array's (SLURM_ARRAY_JOB_ID)")
    formats.JOB.add_option(job)


def job(store_dir: Path, args: argparse.Namespace) -> int:
    view = job_view(args.job_id, _finished(store.list_entries(store_dir, timeline=False)))
    if not view["n"]:
        raise LookupError(f"no finished session of job {args.job_id} in {store_dir}")
    console.write_stdout(formats.JOB.render(args.format, view))
    return 0
