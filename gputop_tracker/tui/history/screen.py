"""Session history: browse, inspect, compare, export and delete the sessions saved in the store.

`HistoryScreen(store_dir)` is a plain Screen so the live app can push it (`h`); `run_history` shows it in
its own small app (`gputop-track --history`). The list reads each file without its timeline
(`store.list_entries(timeline=False)`: 1,000 sessions in ~0.15 s; on the UI thread for a usual store, in a
worker past SYNC_LOAD_MAX files); the detail and compare screens read the one or two files they show in
full. Unreadable files are rows with the reason, never exceptions. The rows, their filter and sort and
the comparison of two sessions are worked out in `core.history`; the charts are `tui.charts`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from rich.markup import escape
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, ScrollableContainer, Vertical, VerticalScroll
from textual.events import Resize
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, Input, Label, Static, TabbedContent, TabPane

from gputop_tracker.core.model import Session, clean_output, escape_controls, human_bytes, human_seconds
from gputop_tracker.core.report import (
    COLUMN_BY_KEY,
    COLUMNS,
    SORTABLE,
    Column,
    Row,
    compare_rows,
    count_session_files,
    filter_rows,
    group_label,
    grouped,
    is_group,
    load_full,
    local_time,
    percent_or_dash,
    timeline_series,
)
from gputop_tracker.core.report import render as report
from gputop_tracker.core.store import export_session
from gputop_tracker.core.store import sessions as store
from gputop_tracker.tui.live.output_pane import OutputPane
from gputop_tracker.tui.widgets.charts import Series, TimeChart, session_charts, short_time
from gputop_tracker.tui.widgets.job_panel import job_headline
from gputop_tracker.tui.widgets.panels import HelpScreen

CSS_FILE = "history.tcss"
NARROW = 100  # columns: under this the list and the detail use their compact layouts
MIN_COMMAND = 27  # cells of the list's command column (what tells sessions apart) before others leave room
OPTIONAL = ["host", "gpu_util", "cpu"]  # the list's columns that leave first, in this order, on a narrow terminal


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


SYNC_LOAD_MAX = 2000  # session files read on the UI thread when the list opens; more are read in a worker


class _HistoryScreenBase(Screen[None]):
    """Every history screen: shares history.tcss and switches to the compact layout in narrow terminals."""

    CSS_PATH = CSS_FILE
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark,f1", "keys_help", "Help", key_display="?", id="history.help", show=False)
    ]

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.width < NARROW, "narrow")

    def action_keys_help(self) -> None:
        """Every key of this screen, those the footer has no room for included (from its bindings: complete
        and remapped as they are); a live view's own keys under it are left out."""
        rows: dict[tuple[str, str], list[str]] = {}
        for active in self.active_bindings.values():
            binding = active.binding
            if active.node is self.app or binding.system or binding.action == "keys_help":
                continue
            text = binding.tooltip or binding.description
            rows.setdefault((binding.action, text), []).append(self.app.get_key_display(binding))
        lines = [f"[b]{escape(' '.join(keys))}[/b]  {escape(text)}" for (_a, text), keys in rows.items()]
        title = f"[b]{escape((type(self).__doc__ or 'Keys').splitlines()[0])}[/b]"
        self.app.push_screen(HelpScreen("\n".join([title, "", *lines, "", "Press escape or ? to close."])))


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


class SessionDetailScreen(_HistoryScreenBase):
    """One session: charts over time, the text report, the processes with their peaks."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("1", "tab('charts')", "Charts", id="history.tab_charts"),
        Binding("2", "tab('summary')", "Summary", id="history.tab_summary"),
        Binding("3", "tab('processes')", "Processes", id="history.tab_processes"),
        Binding("4", "tab('output')", "Output", id="history.tab_output"),
        Binding("5", "tab('blocks')", "Blocks", id="history.tab_blocks"),
        Binding("e", "export", "Export", id="history.export"),
    ]

    def __init__(self, entry: store.Entry, store_dir: Path | None = None) -> None:
        super().__init__(classes="history-screen")
        self.entry = load_full(entry)
        self.store_dir = store_dir

    def compose(self) -> ComposeResult:
        session = self.entry.session
        if session is None:
            yield Static(Text(f"session {self.entry.id} is unreadable: {self.entry.error}", style="red"))
            yield Footer()
            return
        yield TitleLine(session)
        yield Static(headline(session), classes="history-headline")
        if (job := job_headline(session.summary)) is not None:  # a cluster job: how much of its request it used
            yield Static(job, classes="history-headline", id="history-job")
        with TabbedContent(initial="charts"):
            with TabPane("Charts", id="charts"), VerticalScroll(), Grid(classes="history-charts"):
                yield from session_charts(session)
            with TabPane("Summary", id="summary"), ScrollableContainer():
                text = (
                    report.to_text(session.summary, max_processes=50) if session.summary else "no summary saved yet\n"
                )
                if session.events:  # the event timeline, after the report (sessions from before events have none)
                    text += (
                        "\n".join(["", f"Events ({len(session.events)})", *report.events_lines(session.events)]) + "\n"
                    )
                yield Static(Text(text.rstrip("\n"), no_wrap=True), classes="history-report")
            with TabPane("Processes", id="processes"):
                yield DataTable(id="processes-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Output", id="output"):
                yield OutputPane(id="history-output")
            if session.summary is not None and session.summary.blocks:  # code blocks (`with block()`, `@tracked`)
                with TabPane("Blocks", id="blocks"), ScrollableContainer():
                    yield Static(
                        Text("\n".join(report.blocks_text(session.summary.blocks)), no_wrap=True), id="blocks-text"
                    )
        yield Footer()

    def on_mount(self) -> None:
        session = self.entry.session
        if session is None:
            return
        self._load_output()
        if session.summary is None:
            return
        table = self.query_one("#processes-table", DataTable)
        for label, right in (
            ("pid", True),
            ("ppid", True),
            ("role", False),
            ("name", False),
            ("peak RSS", True),
            ("private", True),
            ("PSS", True),
            ("peak GPU", True),
            ("CPU s", True),
            ("max CPU", True),
            ("threads", True),
            ("RSS from", False),
            ("exit", True),
            ("command line", False),
        ):
            table.add_column(Text(label, justify="right" if right else "left"), key=label)
        for process in sorted(session.summary.processes, key=lambda process: process.peak_rss, reverse=True):
            numbers = [
                str(process.pid),
                str(process.ppid),
                None,
                None,
                human_bytes(process.peak_rss),
                human_bytes(process.peak_private),
                human_bytes(process.peak_pss),
                human_bytes(process.peak_gpu_memory) if process.peak_gpu_memory else "-",
                f"{process.cpu_seconds:.1f}",
                percent_or_dash(process.max_cpu_percent),
                str(process.peak_threads),
                None,
                "" if process.exit_code is None else str(process.exit_code),
                None,
            ]
            texts = {2: process.role, 3: process.name, 11: process.peak_rss_source, 13: " ".join(process.cmdline)[:200]}
            table.add_row(
                *(
                    Text(number, justify="right") if number is not None else Text(texts[i])
                    for i, number in enumerate(numbers)
                ),
                key=str(process.pid),
            )

    def _load_output(self) -> None:
        """The command's saved output (live-view runs keep it next to the session), its last OUTPUT_TAIL bytes."""
        pane = self.query_one("#history-output", OutputPane)
        path = self.entry.path.with_name(f"{self.entry.id}.output.log") if self.entry.path else None
        try:
            with open(path or "", "rb") as file:
                size = file.seek(0, 2)
                file.seek(max(0, size - OUTPUT_TAIL))
                data = file.read()
        except OSError:
            pane.write("no output saved for this session (only live-view runs keep it)\n")
            return
        if size > OUTPUT_TAIL:
            pane.write(f"… the last {OUTPUT_TAIL // 1000} kB of {size // 1000} kB\n")
        pane.write(clean_output(data.decode("utf-8", "replace")))

    def action_tab(self, tab: str) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.query(f"#{tab}"):  # Blocks only when the run had code blocks
            tabs.active = tab

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "tab" and parameters == ("blocks",):  # listed only when the run had code blocks
            session = self.entry.session
            return bool(session is not None and session.summary is not None and session.summary.blocks)
        return True

    def action_export(self) -> None:
        _ask_export(self, self.entry)


OUTPUT_TAIL = 256_000  # bytes of a saved output log the Output tab shows


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


class CompareScreen(_HistoryScreenBase):
    """Two sessions side by side: each figure, the difference (B − A) and which is better."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("x", "swap", "Swap A/B", id="history.swap"),
    ]

    def __init__(self, entry_a: store.Entry, entry_b: store.Entry) -> None:
        super().__init__(classes="history-screen")
        self.a = load_full(entry_a)
        self.b = load_full(entry_b)

    def compose(self) -> ComposeResult:
        sa, sb = self.a.session, self.b.session
        if sa is None or sb is None or sa.summary is None or sb.summary is None:
            bad = self.a if sa is None or sa.summary is None else self.b
            yield Static(Text(f"cannot compare: session {bad.id} is {bad.error or 'without a summary'}", "red"))
            yield Footer()
            return
        with Vertical(classes="history-compare-heads"):
            yield TitleLine(sa, Text("A  ", style="bold cyan"))
            yield TitleLine(sb, Text("B  ", style="bold magenta"))
        yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
        xa, ca = timeline_series(sa)
        xb, cb = timeline_series(sb)
        with Horizontal(classes="history-compare-charts"):
            for title, col, unit in (("RAM combined", "combined_total", "bytes"), ("CPU", "cpu_percent", "percent")):
                yield TimeChart(
                    title,
                    xa or xb,
                    [Series("A", ca.get(col, []), "cyan", xa), Series("B", cb.get(col, []), "magenta", xb)],
                    unit=unit,
                    y_top=100 if unit == "percent" else 0.0,
                    id=f"compare-{col}",
                )
        yield Footer()

    AUTO_FOCUS = ""  # none: focused in `_fill`, without the scroll that hid A's command line (below)

    def on_mount(self) -> None:
        self._fill()

    def _fill(self) -> None:
        sa, sb = self.a.session, self.b.session
        if sa is None or sb is None or sa.summary is None or sb.summary is None:
            return
        table = self.query_one("#compare-table", DataTable)
        table.clear(columns=True)
        table.add_column("figure", key="figure")
        table.add_column(Text("A", style="bold cyan", justify="right"), key="a")
        table.add_column(Text("B", style="bold magenta", justify="right"), key="b")
        table.add_column(Text("B − A", justify="right"), key="diff")
        table.add_column(Text("change", justify="right"), key="pct")
        table.add_column("better", key="better")
        for label, va, vb, diff, pct, verdict in compare_rows(sa.summary, sb.summary):
            style = {"A": "bold cyan", "B": "bold magenta"}.get(verdict, "dim")
            table.add_row(
                label,
                Text(va, justify="right"),
                Text(vb, justify="right"),
                Text(diff, justify="right"),
                Text(pct, justify="right"),
                Text(verdict, style=style),
                key=label,
            )
        # Taller than a short terminal (80x24), the screen scrolled to show the focused table whole, and A's
        # command line (which run is A) went above the edge: it stays at its top; the charts are a scroll away.
        self.set_focus(table, scroll_visible=False)
        self.scroll_home(animate=False, immediate=True)

    def action_swap(self) -> None:
        self.a, self.b = self.b, self.a
        self.refresh(recompose=True)
        self.call_after_refresh(self._fill)


class ExportScreen(ModalScreen[Path | None]):
    """Ask where to export; a name ending in .csv gets the timeline as CSV, anything else the full JSON."""

    CSS_PATH = CSS_FILE
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="history.cancel")]

    def __init__(self, entry: store.Entry) -> None:
        super().__init__(classes="history-modal")
        self.entry = entry

    def compose(self) -> ComposeResult:
        with Vertical(classes="history-dialog"):
            yield Label(Text(f"Export session {self.entry.id}", style="bold"))
            yield Label("Path (ending in .csv: timeline as CSV; otherwise: the whole session as JSON)")
            yield Input(str(Path.cwd() / f"{self.entry.id}.json"), id="export-path")
            yield Label("", id="export-error")
            with Horizontal(classes="history-buttons"):
                yield Button("Export", variant="primary", id="export-ok")
                yield Button("Cancel", id="export-cancel")

    @on(Input.Submitted, "#export-path")
    @on(Button.Pressed, "#export-ok")
    def _export(self) -> None:
        text = self.query_one("#export-path", Input).value.strip()
        if not text:
            self._error("type a path")
            return
        path = Path(text).expanduser()
        try:
            export_session(self.entry, path, make_dirs=True)  # typed in a dialog: its directory is made
        except (OSError, LookupError) as e:
            msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            self._error(f"cannot export: {msg}")
            return
        self.dismiss(path)

    def _error(self, message: str) -> None:
        self.query_one("#export-error", Label).update(Text(message, style="red"))

    @on(Button.Pressed, "#export-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


def _ask_export(screen: Screen[Any], entry: store.Entry) -> None:
    if entry.session is None:
        screen.notify(f"cannot export an unreadable session: {entry.error}", severity="error", markup=False)
        return

    def done(path: Path | None) -> None:
        if path is not None:
            screen.notify(f"exported {entry.id} to {path}", markup=False)

    screen.app.push_screen(ExportScreen(entry), done)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; No is the default."""

    CSS_PATH = CSS_FILE
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="history.yes"),
        Binding("n,escape", "answer(False)", "No", id="history.no"),
    ]

    def __init__(self, question: str, detail: str = "", yes: str = "Delete") -> None:
        super().__init__(classes="history-modal")
        self.question = question
        self.detail = detail
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="history-dialog"):
            yield Label(Text(self.question, style="bold"))
            if self.detail:
                yield Label(Text(self.detail))
            with Horizontal(classes="history-buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="confirm-yes")
                yield Button("Cancel (n)", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class HistoryScreen(_HistoryScreenBase):
    """Every saved session: sort, filter, mark two to compare, open, export, delete."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", id="history.back", show=False),
        Binding("q", "leave", "Back", id="history.leave", show=False, tooltip="Back to the live view (or quit)"),
        Binding("slash", "focus_filter", "Filter", key_display="/", id="history.filter"),
        Binding("enter", "open", "Open", key_display="⏎", id="history.open"),
        Binding("space", "mark", "Mark", id="history.mark", tooltip="mark up to two sessions to compare"),
        Binding("c", "compare", "Compare", id="history.compare"),
        Binding("s", "sort_next", "Sort", id="history.sort", tooltip="sort by the next column"),
        Binding("r", "sort_reverse", "Reverse", id="history.reverse"),
        Binding("e", "export", "Export", id="history.export"),
        Binding("d,delete", "delete", "Delete", id="history.delete"),
        Binding("f5,ctrl+r", "reload", "Reload", id="history.reload", show=False),
        Binding("g", "toggle_jobs", "Jobs", id="history.jobs", show=False, tooltip="group sessions by SLURM job"),
        Binding("j", "filter_job", "Job", id="history.job_filter", show=False, tooltip="only this row's job"),
    ]

    class Loaded(Message):
        """The store was read (in a worker thread)."""

        def __init__(self, entries: list[store.Entry], seconds: float) -> None:
            super().__init__()
            self.entries = entries
            self.seconds = seconds

    def __init__(self, store_dir: Path) -> None:
        super().__init__(classes="history-screen")
        self.store_dir = store_dir
        self.rows: list[Row] = []
        self.shown: list[Row] = []
        self.marked: list[str] = []
        self.sort_key = "start"
        self.sort_reverse = True
        self.loaded = False
        self.load_seconds = 0.0
        self._narrow: bool | None = None
        self._built_width = 0  # the width the columns were fitted to: a resize fits them again
        self._shown_keys: set[str] = set()  # the list's columns on screen (a narrow terminal leaves some out)
        self.group_jobs = True  # the sessions of one SLURM job as one row (g)
        self.expanded: set[str] = set()  # jobs whose group row is open (⏎), by job id

    def compose(self) -> ComposeResult:
        yield Input(placeholder="/ filter: command, host, date (e.g. train 2025-01-02)", id="history-filter")
        yield RowTable(id="history-table", cursor_type="row", zebra_stripes=True)
        yield Static(Text("reading sessions…"), id="history-status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#history-table", DataTable).focus()
        if count_session_files(self.store_dir) <= SYNC_LOAD_MAX:
            # Read at once: ~0.15 s per 1,000 files. A thread racing the app's own start-up for the GIL
            # took three times as long; past SYNC_LOAD_MAX the worker keeps the screen responsive.
            self.on_history_screen_loaded(self.Loaded(*self._read()))
        else:
            self._load()

    def _read(self) -> tuple[list[store.Entry], float]:
        t0 = time.perf_counter()
        entries = store.list_entries(self.store_dir, timeline=False)
        for entry in entries:
            _ = entry.running  # checks a pid
        return entries, time.perf_counter() - t0

    @work(thread=True, group="history-load", exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.Loaded(*self._read()))

    def on_history_screen_loaded(self, message: Loaded) -> None:
        self.rows = [Row.of(entry) for entry in message.entries]
        self.load_seconds = message.seconds
        self.loaded = True
        known = {row.id for row in self.rows}
        self.marked = [sid for sid in self.marked if sid in known]
        self._rebuild()

    # -- table

    def _columns_for(self, width: int) -> list[tuple[Column, int]]:
        """The columns shown, each with its width: the command gets what the others leave (the start is shorter
        when narrow). Where it would get less than MIN_COMMAND, the columns of OPTIONAL leave first (the GPU's
        peak too when no session has one): every command read "python3 -c x=by…" at 80 columns, and the table
        scrolled sideways."""
        narrow = width < NARROW
        widths = {column.key: (14 if column.key == "start" and narrow else column.width) for column in COLUMNS}
        optional = [*OPTIONAL, *(["gpu"] if not any(row.peak_gpu for row in self.rows) else [])]
        shown = list(COLUMNS)
        while True:
            fixed = sum(widths[column.key] + 2 for column in shown if column.key != "command")
            room = width - fixed - 2 - 2  # its cell padding, the scroll bar
            if room >= MIN_COMMAND or not optional:
                break
            gone = optional.pop(0)
            shown = [column for column in shown if column.key != gone]
        widths["command"] = max(16, min(60, room))
        return [(column, widths[column.key]) for column in shown]

    def _rebuild(self, width: int | None = None) -> None:
        table = self.query_one("#history-table", DataTable)
        width = width or self.size.width or 80
        self._built_width = width
        narrow = width < NARROW
        cursor_id = self._cursor_id()
        table.clear(columns=True)
        columns = self._columns_for(width)
        self._shown_keys = {column.key for column, _width in columns}
        for column, column_width in columns:
            label = column.label
            if column.key == self.sort_key:
                label += " ▼" if self.sort_reverse else " ▲"
            table.add_column(
                Text(label, justify="right" if column.right else "left"), width=column_width, key=column.key
            )
        self._narrow = narrow
        rows = filter_rows(self.rows, self.query_one("#history-filter", Input).value)
        self.shown = grouped(rows, self.sort_key, self.sort_reverse, self.expanded, self.group_jobs)
        start_fmt = "%m-%d %H:%M:%S" if narrow else "%Y-%m-%d %H:%M:%S"
        for row in self.shown:
            cells = self._cells(row, start_fmt)
            table.add_row(
                *(c for column, c in zip(COLUMNS, cells, strict=True) if column.key in self._shown_keys), key=row.id
            )
        if cursor_id is not None and cursor_id in table.rows:
            table.move_cursor(row=table.get_row_index(cursor_id), animate=False)
        self._status()

    def _cells(self, row: Row, start_fmt: str) -> list[ListCell]:
        mark = ListCell("✓", "bold green") if row.id in self.marked else ListCell("")
        start = ListCell(local_time(row.start, start_fmt) if row.start else "?")
        if row.error is not None:
            blank = ListCell("")
            error = [ListCell(f"unreadable: {row.error}", "red"), blank, ListCell("error", "red", right=True)]
            return [mark, start, *error, blank, blank, blank, blank, ListCell(row.id, "dim")]
        exit_style = {"running": "bold green", "stale": "yellow", "0": ""}.get(row.exit, "red")
        command = ListCell(row.command or "-")
        if row.simulated:  # a demo's GPU figures, not a measurement
            command = ListCell(f"[sim] {row.command}", "magenta")
        if is_group(row):
            command = ListCell(group_label(row, row.job in self.expanded), "bold")
        elif row.depth:
            command = ListCell(f"  └ {row.job_part or row.id}: {row.command}")
        return [
            mark,
            start,
            command,
            ListCell(list_duration(row.duration) if row.duration is not None else "-", right=True),
            ListCell(row.exit or "-", exit_style, right=True),
            ListCell(human_bytes(row.peak_ram) if row.peak_ram is not None else "-", right=True),
            ListCell(_gpu_cell(row), "magenta" if row.simulated else "", right=True),
            ListCell(percent_or_dash(row.cpu), right=True),
            ListCell(_gpu_util_cell(row), "magenta" if row.simulated else "", right=True),
            ListCell(row.host),
        ]

    def _status(self) -> None:
        n_bad = sum(row.error is not None for row in self.rows)
        n_run = sum(row.running for row in self.rows)
        parts = [f"{len(self.rows)} sessions in {self.store_dir}"]
        if n_run:
            parts.append(f"{n_run} running")
        if n_bad:
            parts.append(f"{n_bad} unreadable")
        if len(self.shown) != len(self.rows):
            parts.append(f"{len(self.shown)} match the filter")
        col = COLUMN_BY_KEY[self.sort_key]
        parts.append(f"sorted by {col.label} {'▼' if self.sort_reverse else '▲'}")
        if self.marked:
            parts.append(f"marked {len(self.marked)}/2")
        n_jobs = sum(is_group(row) for row in self.shown)
        if n_jobs:
            parts.append(f"{n_jobs} job{'s' if n_jobs > 1 else ''} grouped: ⏎ opens, g ungroups, j filters")
        self.query_one("#history-status", Static).update(Text(" · ".join(parts), no_wrap=True, overflow="ellipsis"))

    def _cursor_id(self) -> str | None:
        table = self.query_one("#history-table", DataTable)
        if not table.row_count:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except Exception:
            return None
        return key.value

    def _cursor_row(self) -> Row | None:
        sid = self._cursor_id()
        return next((row for row in self.shown if row.id == sid), None)

    def on_resize(self, event: Resize) -> None:
        super().on_resize(event)
        if self.loaded and event.size.width != self._built_width:  # the command column takes what is left
            self._rebuild(event.size.width)

    # -- filter and sort

    @on(Input.Changed, "#history-filter")
    def _filter_changed(self) -> None:
        if self.loaded:
            self._rebuild()

    @on(Input.Submitted, "#history-filter")
    def _filter_done(self) -> None:
        self.query_one("#history-table", DataTable).focus()

    def action_focus_filter(self) -> None:
        self.query_one("#history-filter", Input).focus()

    def action_leave(self) -> None:
        """Opened from the live view, q goes back to it (never to its quit dialog); on its own, q quits."""
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
        else:
            self.app.exit()

    def action_back(self) -> None:
        flt = self.query_one("#history-filter", Input)
        if flt.has_focus:
            self.query_one("#history-table", DataTable).focus()
        elif flt.value:
            flt.value = ""
        elif len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    @on(DataTable.HeaderSelected, "#history-table")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key not in SORTABLE:
            return
        self.sort_by(key, not self.sort_reverse if key == self.sort_key else COLUMN_BY_KEY[key].descending)

    def sort_by(self, key: str, reverse: bool) -> None:
        self.sort_key, self.sort_reverse = key, reverse
        self._rebuild()

    def action_sort_next(self) -> None:
        nxt = COLUMN_BY_KEY[SORTABLE[(SORTABLE.index(self.sort_key) + 1) % len(SORTABLE)]]
        self.sort_by(nxt.key, nxt.descending)

    def action_sort_reverse(self) -> None:
        self.sort_by(self.sort_key, not self.sort_reverse)

    # -- actions on sessions

    @on(DataTable.RowSelected, "#history-table")
    def _selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        row = self._cursor_row()
        if row is None:
            return
        if is_group(row):  # a job's group row opens (and closes) in place
            self.expanded ^= {row.job}
            self._rebuild()
            return
        if row.error is not None:
            self.notify(f"{row.id} is unreadable: {row.error}", severity="error", markup=False)
            return
        self.app.push_screen(SessionDetailScreen(row.entry, self.store_dir))

    def _session_row(self) -> Row | None:
        """The session under the cursor; on a job's group row, None and a word on what to do."""
        row = self._cursor_row()
        if row is not None and is_group(row):
            self.notify(
                f"job {row.job} is {len(row.members or [])} sessions: ⏎ shows them", severity="warning", markup=False
            )
            return None
        return row

    def action_toggle_jobs(self) -> None:
        self.group_jobs = not self.group_jobs
        self._rebuild()

    def action_filter_job(self) -> None:
        """Only the sessions of the job under the cursor (again: every session)."""
        row = self._cursor_row()
        flt = self.query_one("#history-filter", Input)
        want = f"job:{row.job}" if row is not None and row.job else ""
        if not want and not flt.value.startswith("job:"):
            self.notify("this session ran in no SLURM job", severity="warning", markup=False)
            return
        if flt.value == want or not want:
            self.expanded.discard(flt.value.removeprefix("job:"))  # the job it opened closes again
            flt.value = ""
        else:
            self.expanded.add(want.removeprefix("job:"))
            flt.value = want

    def action_mark(self) -> None:
        row = self._session_row()
        if row is None:
            return
        if row.id in self.marked:
            self.marked.remove(row.id)
        elif row.error is not None:
            self.notify("an unreadable session cannot be compared", severity="warning", markup=False)
            return
        else:
            self.marked.append(row.id)
            del self.marked[:-2]  # a third mark replaces the oldest
        table = self.query_one("#history-table", DataTable)
        for shown_row in self.shown:
            table.update_cell(
                shown_row.id, "mark", ListCell("✓", "bold green") if shown_row.id in self.marked else ListCell("")
            )
        table.action_cursor_down()
        self._status()

    def action_compare(self) -> None:
        by_id = {row.id: row for row in self.rows}
        ids = list(self.marked)
        if len(ids) == 1:
            cur = self._cursor_row()
            if cur is not None and cur.id != ids[0] and cur.error is None and not is_group(cur):
                ids.append(cur.id)
        if len(ids) != 2:
            self.notify("mark two sessions with space, then press c", severity="warning", markup=False)
            return
        # A is the earlier run, B the later: "did the change help?" reads B against A
        earlier, later = sorted((by_id[i] for i in ids), key=lambda row: (row.start or 0, row.id))
        self.app.push_screen(CompareScreen(earlier.entry, later.entry))

    def action_export(self) -> None:
        row = self._session_row()
        if row is not None:
            _ask_export(self, row.entry)

    def action_delete(self) -> None:
        row = self._session_row()
        if row is None:
            return
        if row.running:
            self.notify("this session is still running; stop its gputop-track first", severity="warning", markup=False)
            return
        detail = f"{row.command or row.error}\nThe file {row.entry.path} is removed; this cannot be undone."

        def done(yes: bool | None) -> None:
            if yes:
                self.delete_session(row)

        self.app.push_screen(ConfirmScreen(f"Delete session {row.id}?", detail), done)

    def delete_session(self, row: Row) -> None:
        try:
            store.delete(self.store_dir, row.id)
        except (OSError, LookupError) as e:
            msg = e.strerror if isinstance(e, OSError) else str(e)
            self.notify(f"cannot delete {row.id}: {msg}", severity="error", markup=False)
            return
        self.rows = [kept for kept in self.rows if kept.id != row.id]
        self.shown = [kept for kept in self.shown if kept.id != row.id]
        if row.id in self.marked:
            self.marked.remove(row.id)
        if row.job:  # its job's row sums it up: redraw it
            self._rebuild()
        else:
            self.query_one("#history-table", DataTable).remove_row(row.id)
            self._status()
        self.notify(f"deleted {row.id}", markup=False)

    def action_reload(self) -> None:
        self._load()


class HistoryApp(App[None]):
    """`gputop-track --history`: the history screen on its own."""

    TITLE = "gputop-track history"
    CSS_PATH = CSS_FILE  # the default screen's own CSS_PATH is not read by Textual
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit", id="history.quit")]

    def __init__(self, store_dir: Path) -> None:
        super().__init__()
        self.store_dir = store_dir

    def get_default_screen(self) -> Screen[Any]:
        return HistoryScreen(self.store_dir)


def run_history(store_dir: Path) -> int:
    HistoryApp(store_dir).run()
    return 0


def _gpu_cell(row: Row) -> str:
    """Peak GPU memory (magenta, and `[sim]` before the command, when the GPUs were simulated)."""
    return human_bytes(row.peak_gpu) if row.peak_gpu is not None else "-"


def _gpu_util_cell(row: Row) -> str:
    """Mean utilization per GPU, with ×N for N GPUs (a sum of two read as 146 %)."""
    if row.gpu_util is None:
        return "-"
    return percent_or_dash(row.gpu_util) + (f"×{row.n_gpus}" if row.n_gpus > 1 else "")


def list_duration(seconds: float) -> str:
    """A run's duration in the list: under a second to the millisecond (a 0.02 s run read `0s`), else as the
    chart axes write it."""
    return f"{seconds:.3f}s" if seconds < 1 else short_time(seconds)
