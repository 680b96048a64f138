"""The pieces the history screens share: the list's cells and row table, a session's title line and headline."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Static

from gputop_tracker.core.model import Session, escape_controls, human_bytes, human_seconds
from gputop_tracker.core.report import (
    Row,
    local_time,
    percent_or_dash,
)
from gputop_tracker.tui.widgets.charts import short_time


class ListCell:
    """A list cell that DataTable does not measure: the list's columns have fixed widths, and measuring
    every Text of 1,000 rows (three terminal-size queries each) took longer than reading the store."""

    __slots__ = ("text",)

    def __init__(self, text: str, style: str = "", right: bool = False) -> None:
        self.text = Text(text, style=style, justify="right" if right else "left", no_wrap=True, overflow="ellipsis")

    def __rich_console__(self, console: Any, options: Any) -> Iterable[Text]:
        yield self.text

    def __str__(self) -> str:
        return self.text.plain


# --------------------------------------------------------------------------- screens


class RowTable(DataTable[Any]):
    """A DataTable whose Home and End move the row cursor (DataTable's only scroll, leaving it where it was)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home", "first_row", "First", show=False, id="history.first_row"),
        Binding("end", "last_row", "Last", show=False, id="history.last_row"),
    ]

    def action_first_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=0)

    def action_last_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)


def headline(session: Session) -> Text:
    """What the run came to, before any chart: exit status, duration to the ms, peaks, CPU-seconds."""
    meta, usage = session.meta, session.summary
    text = Text()  # wraps between figures on a narrow terminal (two lines at most)
    status = usage.status if usage is not None else meta.status
    code = usage.exit_code if usage is not None else meta.exit_code
    sig = usage.exit_signal if usage is not None else None
    if meta.status == "running":
        text.append("running (not finished)", style="bold yellow")
    elif status in ("detached", "stopped"):
        text.append(status, style="bold yellow")
    elif sig:
        text.append(f"killed by signal {sig} (exit {code})", style="bold red")
    elif code == 0:
        text.append("exit 0", style="bold green")
    elif code is None:
        text.append(status, style="bold")
    else:
        text.append(f"exit {code}", style="bold red")
    if usage is None:
        return text
    wall = usage.compute_time.time
    text.append(f" · {wall:.3f} s" if wall < 60 else f" · {human_seconds(wall)} ({wall:.3f} s)")
    text.append(" · peak RAM ", style="dim")
    peak = usage.peak_ram_read
    text.append(human_bytes(peak) if peak is not None else "- (ended before a sample)", style="bold")
    if usage.gpus:
        text.append(" · peak GPU ", style="dim")
        text.append(human_bytes(usage.max_gpu_ram.combined), style="bold")
        if any(gpu.simulated for gpu in usage.gpus):
            text.append(" SIMULATED", style="bold magenta")
    text.append(" · CPU ", style="dim")
    text.append(f"{usage.cpu_time.total:.3f} s", style="bold")
    cores = usage.cpu_utilization.n_expected_cores or usage.cpu_utilization.system_core_count or 1
    text.append(
        f" ({usage.cpu_time.mean_percent:.0f}% of a core, {usage.cpu_time.mean_percent / cores:.0f}% of {cores})"
    )
    return text


class TitleLine(Static):
    """A session's command, start, host and id in at most two lines: a command too long for them is cut (…) so
    the start, host and id stay on screen (a 30-argument command left only its first arguments)."""

    def __init__(self, session: Session, prefix: Text | None = None) -> None:
        super().__init__(classes="history-title")
        self.prefix = prefix or Text()
        self.command = escape_controls(" ".join(session.meta.command)) or "-"
        meta = session.meta
        when = local_time(meta.start_time, "%Y-%m-%d %H:%M:%S") if meta.start_time else "-"
        self.suffix = Text.assemble((f"  {when} on {meta.host or '?'}  ", "dim"), (meta.id, "dim"))

    def render(self) -> Text:
        width = max(self.content_size.width, 1)
        room = 2 * width - self.prefix.cell_len - self.suffix.cell_len
        command = self.command if len(self.command) <= room else self.command[: max(room - 1, 1)] + "…"
        text = Text.assemble(self.prefix, (command, "bold"), self.suffix)
        if len(text.wrap(self.app.console, width)) <= 2:
            return text
        # broken at the width, not between words: a word wrap needs a third line the title does not have
        return Text("\n").join(text.divide(range(width, len(text), width)))


def gpu_cell(row: Row) -> str:
    """Peak GPU memory (magenta, and `[sim]` before the command, when the GPUs were simulated)."""
    return human_bytes(row.peak_gpu) if row.peak_gpu is not None else "-"


def gpu_util_cell(row: Row) -> str:
    """Mean utilization per GPU, with ×N for N GPUs (a sum of two read as 146 %)."""
    if row.gpu_util is None:
        return "-"
    return percent_or_dash(row.gpu_util) + (f"×{row.n_gpus}" if row.n_gpus > 1 else "")


def list_duration(seconds: float) -> str:
    """A run's duration in the list: under a second to the millisecond (a 0.02 s run read `0s`), else as the
    chart axes write it."""
    return f"{seconds:.3f}s" if seconds < 1 else short_time(seconds)
