"""The live view's alerts (RAM or a GPU's memory past its warning or critical level, an OOM, a GPU lost): kept for
the whole run, the latest named in the header (what, its figure and limit, when) until the list (`a`) is read. The
pop-up of each closes after a few seconds; the header and the list stay."""

from __future__ import annotations

import time

from rich.text import Text

from gputop_tracker.core.model import Event, escape_controls
from gputop_tracker.tui.live.texts import ALERT_RANK as RANK  # the alert types, mildest first
from gputop_tracker.tui.widgets.panels import clock, short_bytes

STYLE = {"warning": "yellow", "gpu_lost": "yellow", "critical": "red", "oom": "red", "gpu_oom": "red"}


def wall_time(t: float) -> str:
    """The local time of day an alert fired."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def figure(e: Event) -> str:
    """What crossed which limit: "RAM 96% of 8.00 GB (7.70 GB)", "GPU 1 memory 81% of 80.0 GB (64.8 GB)"; the
    message for the others (an OOM, a GPU lost)."""
    if e.percent is not None and e.limit:
        what = "RAM" if e.resource in (None, "ram") else f"GPU {e.resource.removeprefix('gpu')} memory"
        used = f" ({short_bytes(e.value)})" if e.value is not None else ""
        return f"{what} {e.percent:.0f}% of {short_bytes(e.limit)}{used}"
    return escape_controls(" ".join(e.message.split())) or e.type


class AlertLog:
    """Every alert of the run, and how many came since the list was last read."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.unread = 0

    def add(self, e: Event) -> bool:
        """Keep `e` if it is an alert (True); peaks and process events stay in the session's timeline."""
        if e.type not in RANK:
            return False
        self.events.append(e)
        self.unread += 1
        return True

    @property
    def worst(self) -> str | None:
        """The worst alert type so far (the header's colour); a later, milder one does not lower it."""
        return max((e.type for e in self.events), key=RANK.__getitem__, default=None)

    def read(self) -> None:
        self.unread = 0

    def header(self) -> Text | None:
        """The header's word on the latest alert: its type, figure and limit, and time; bright until read."""
        if not self.events:
            return None
        latest = self.events[-1]
        worst = self.worst or latest.type
        text = f"{latest.type.upper().replace('_', ' ')} {figure(latest)} at {wall_time(latest.time)}"
        if self.unread:
            unread = self.events[-self.unread :]
            top = max((e.type for e in unread), key=RANK.__getitem__)
            notes = [f"+{self.unread - 1} more"] if self.unread > 1 else []
            if RANK[top] > RANK[latest.type]:  # a critical one among them, a milder one last
                notes.append(f"worst {top.upper()}")
            more = f" ({', '.join(notes)})" if notes else ""
            return Text.assemble((f" {text}{more} ", f"bold reverse {STYLE[worst]}"), (" a: alerts", "dim"))
        return Text.assemble((text, STYLE[worst]), (" (a)", "dim"))

    def lines(self, start: float | None = None) -> list[Text]:
        """The list, newest first: the time of day, the time into the run, the type, what crossed which limit."""
        out = []
        for e in reversed(self.events):
            elapsed = e.elapsed or (e.time - start if start is not None else 0.0)
            line = Text.assemble(
                (wall_time(e.time), "bold"),
                (f"  +{clock(max(elapsed, 0.0))}  ", "dim"),
                (f"{e.type.upper().replace('_', ' '):<9}", f"bold {STYLE[e.type]}"),
                " ",
                figure(e),
            )
            if e.message and e.percent is not None:
                line.append(f"\n{'':>23}{escape_controls(e.message)}", "dim")
            if e.dump:
                line.append(f"\n{'':>23}dump: {e.dump}", "dim")
            out.append(line)
        return out
