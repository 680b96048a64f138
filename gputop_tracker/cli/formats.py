"""Every report format of the command line, in one registry: what each kind of output (a run's report, a
comparison, an event timeline, …) can be written as, and the options that choose a format and its units.

Adding a format is one entry here: `-f/--format` choices, its default and its help follow. Renderers import
their module when called, so a command pays only for the format it writes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gputop_tracker.core.model.units import UnitError, Units, parse_ram_unit, parse_time_unit

Renderer = Callable[[Any, Units], str]


def _report_text(usage: Any, units: Units) -> str:
    from gputop_tracker.core.report import render

    return render.to_text(usage, units)


def _report_json(usage: Any, units: Units) -> str:
    from gputop_tracker.core.report import render

    return render.to_json(usage, units) + "\n"


def _as_json(value: Any, _units: Units) -> str:
    from gputop_tracker.core.model.text import json_text

    return json_text(value) + "\n"


def _comparison_text(comparison: Any, units: Units) -> str:
    from gputop_tracker.core.report import compare

    return compare.compare_text(comparison, units)


def _events_text(found: Any, _units: Units) -> str:
    from gputop_tracker.core.report import render

    lines = render.events_lines(found, limit=len(found))
    return "\n".join(lines) + "\n" if lines else ""


def _events_json(found: Any, _units: Units) -> str:
    from gputop_tracker.core.store import session_files

    return session_files.events_json(found)


def _events_csv(found: Any, _units: Units) -> str:
    from gputop_tracker.core.store import session_files

    return session_files.events_csv(found)


def _session_json(session: Any, _units: Units) -> str:
    from gputop_tracker.core.store import session_files

    return session_files.session_json(session)


def _session_csv(session: Any, _units: Units) -> str:
    from gputop_tracker.core.store import session_files

    return session_files.timeline_csv(session)


@dataclass(frozen=True)
class Output:
    """One kind of output and the formats it can be written in (the first is the default)."""

    what: str  # as `--help` names it: "<what> format: text or json"
    formats: dict[str, Renderer]
    help: str = ""

    @property
    def default(self) -> str:
        return next(iter(self.formats))

    def render(self, fmt: str, value: Any, units: Units | None = None) -> str:
        return self.formats[fmt](value, units or Units())

    def add_option(self, parser: argparse.ArgumentParser, help: str | None = None) -> None:
        names = list(self.formats)
        listed = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        parser.add_argument(
            "-f",
            "--format",
            choices=tuple(names),
            default=self.default,
            help=help
            or f"{self.what} format: {listed}{f' ({self.help})' if self.help else ''} (default: {self.default})",
        )


REPORT = Output("report", {"text": _report_text, "json": _report_json})
COMPARISON = Output("comparison", {"text": _comparison_text, "json": _as_json})
EVENTS = Output("events", {"text": _events_text, "json": _events_json, "csv": _events_csv})
SESSION = Output("session", {"json": _session_json, "csv": _session_csv}, "csv: the timeline")


def _listing_text(listing: Any, _units: Units) -> str:
    from gputop_tracker.core.report import session_list

    return session_list.listing_text(listing)


def _listing_json(listing: Any, _units: Units) -> str:
    from gputop_tracker.core.report import session_list

    return _as_json([session_list.listing_item(e) for e in listing.entries], _units)


def _job_text(view: Any, _units: Units) -> str:
    from gputop_tracker.core.report import job_view

    return "\n".join(job_view.job_text(view)) + "\n"


def _advice_text(advice: Any, _units: Units) -> str:
    from gputop_tracker.core.report import advise

    return advise.advice_text(advice)


LISTING = Output(
    "listing",
    {"text": _listing_text, "json": _listing_json},
    "text: one line per session; json: an array of objects (metadata, peaks, or the error)",
)
JOB = Output("job view", {"text": _job_text, "json": _as_json})
ADVICE = Output("advice", {"text": _advice_text, "json": _as_json})

OUTPUTS = (REPORT, COMPARISON, EVENTS, SESSION, LISTING, JOB, ADVICE)


def add_unit_options(parser: argparse.ArgumentParser, of: str = "") -> None:
    """--ru/--gru/--tu: the units of the text (JSON figures are always bytes and seconds)."""
    parser.add_argument(
        "--ru", "--ram-unit", dest="ram_unit", metavar="UNIT", help=f"RAM unit{of}: bytes, kilobytes, … terabytes"
    )
    parser.add_argument("--gru", "--gpu-ram-unit", dest="gpu_ram_unit", metavar="UNIT", help=f"GPU memory unit{of}")
    parser.add_argument(
        "--tu", "--time-unit", dest="time_unit", metavar="UNIT", help=f"time unit{of}: seconds, minutes, hours, days"
    )


def units_of(args: argparse.Namespace) -> Units:
    """The unit flags; a bad one is a UnitError naming its flag."""
    given = (("--ram-unit", parse_ram_unit, args.ram_unit), ("--gpu-ram-unit", parse_ram_unit, args.gpu_ram_unit),
             ("--time-unit", parse_time_unit, args.time_unit))  # fmt: skip
    for flag, parse, value in given:
        try:
            if value is not None:
                parse(value)
        except UnitError as e:
            raise UnitError(f"{flag}: {e}") from None
    return Units.parse(args.ram_unit, args.gpu_ram_unit, args.time_unit)
