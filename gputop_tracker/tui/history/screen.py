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

from gputop_tracker.core.model.models import Session
from gputop_tracker.core.model.text import clean_output, escape_controls
from gputop_tracker.core.model.units import human_bytes, human_seconds
from gputop_tracker.core.report import render as report
from gputop_tracker.core.report.job_listing import group_label, grouped, is_group
from gputop_tracker.core.report.listing import (
    COLUMN_BY_KEY,
    COLUMNS,
    SORTABLE,
    Column,
    Row,
    compare_rows,
    count_session_files,
    filter_rows,
    load_full,
    local_time,
    percent_or_dash,
    timeline_series,
)
from gputop_tracker.core.store import sessions as store
from gputop_tracker.core.store.session_files import export_session
from gputop_tracker.tui.live.output_pane import OutputPane
from gputop_tracker.tui.widgets.charts import Series, TimeChart, session_charts, short_time
from gputop_tracker.tui.widgets.job_panel import job_headline
from gputop_tracker.tui.widgets.panels import HelpScreen

CSS_FILE = "history.tcss"
NARROW = 100  # columns: under this the list and the detail use their compact layouts


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
            b = active.binding
            if active.node is self.app or b.system or b.action == "keys_help":
                continue
            text = b.tooltip or b.description
            rows.setdefault((b.action, text), []).append(self.app.get_key_display(b))
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
        s = self.entry.session
        if s is None:
            yield Static(Text(f"session {self.entry.id} is unreadable: {self.entry.error}", style="red"))
            yield Footer()
            return
        yield Static(_title(s), classes="history-title")
        yield Static(headline(s), classes="history-headline")
        if (job := job_headline(s.summary)) is not None:  # a cluster job: how much of its request it used
            yield Static(job, classes="history-headline", id="history-job")
        with TabbedContent(initial="charts"):
            with TabPane("Charts", id="charts"), VerticalScroll(), Grid(classes="history-charts"):
                yield from session_charts(s)
            with TabPane("Summary", id="summary"), ScrollableContainer():
                text = report.to_text(s.summary, max_processes=50) if s.summary else "no summary saved yet\n"
                if s.events:  # the event timeline, after the report (sessions from before events have none)
                    text += "\n".join(["", f"Events ({len(s.events)})", *report.events_lines(s.events)]) + "\n"
                yield Static(Text(text.rstrip("\n"), no_wrap=True), classes="history-report")
            with TabPane("Processes", id="processes"):
                yield DataTable(id="processes-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Output", id="output"):
                yield OutputPane(id="history-output")
            if s.summary is not None and s.summary.blocks:  # code blocks (`with block()`, `@tracked`)
                with TabPane("Blocks", id="blocks"), ScrollableContainer():
                    yield Static(Text("\n".join(report.blocks_text(s.summary.blocks)), no_wrap=True), id="blocks-text")
        yield Footer()

    def on_mount(self) -> None:
        s = self.entry.session
        if s is None:
            return
        self._load_output()
        if s.summary is None:
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
        for p in sorted(s.summary.processes, key=lambda p: p.peak_rss, reverse=True):
            numbers = [
                str(p.pid),
                str(p.ppid),
                None,
                None,
                human_bytes(p.peak_rss),
                human_bytes(p.peak_private),
                human_bytes(p.peak_pss),
                human_bytes(p.peak_gpu_memory) if p.peak_gpu_memory else "-",
                f"{p.cpu_seconds:.1f}",
                percent_or_dash(p.max_cpu_percent),
                str(p.peak_threads),
                None,
                "" if p.exit_code is None else str(p.exit_code),
                None,
            ]
            texts = {2: p.role, 3: p.name, 11: p.peak_rss_source, 13: " ".join(p.cmdline)[:200]}
            table.add_row(
                *(Text(n, justify="right") if n is not None else Text(texts[i]) for i, n in enumerate(numbers)),
                key=str(p.pid),
            )

    def _load_output(self) -> None:
        """The command's saved output (live-view runs keep it next to the session), its last OUTPUT_TAIL bytes."""
        pane = self.query_one("#history-output", OutputPane)
        path = self.entry.path.with_name(f"{self.entry.id}.output.log") if self.entry.path else None
        try:
            with open(path or "", "rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - OUTPUT_TAIL))
                data = f.read()
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
            s = self.entry.session
            return bool(s is not None and s.summary is not None and s.summary.blocks)
        return True

    def action_export(self) -> None:
        _ask_export(self, self.entry)


OUTPUT_TAIL = 256_000  # bytes of a saved output log the Output tab shows


def headline(s: Session) -> Text:
    """What the run came to, before any chart: exit status, duration to the ms, peaks, CPU-seconds."""
    m, u = s.meta, s.summary
    t = Text()  # wraps between figures on a narrow terminal (two lines at most)
    status = u.status if u is not None else m.status
    code = u.exit_code if u is not None else m.exit_code
    sig = u.exit_signal if u is not None else None
    if m.status == "running":
        t.append("running (not finished)", style="bold yellow")
    elif status in ("detached", "stopped"):
        t.append(status, style="bold yellow")
    elif sig:
        t.append(f"killed by signal {sig} (exit {code})", style="bold red")
    elif code == 0:
        t.append("exit 0", style="bold green")
    elif code is None:
        t.append(status, style="bold")
    else:
        t.append(f"exit {code}", style="bold red")
    if u is None:
        return t
    wall = u.compute_time.time
    t.append(f" · {wall:.3f} s" if wall < 60 else f" · {human_seconds(wall)} ({wall:.3f} s)")
    t.append(" · peak RAM ", style="dim")
    t.append(human_bytes(u.max_ram.combined.total_rss), style="bold")
    if u.gpus:
        t.append(" · peak GPU ", style="dim")
        t.append(human_bytes(u.max_gpu_ram.combined), style="bold")
        if any(g.simulated for g in u.gpus):
            t.append(" SIMULATED", style="bold magenta")
    t.append(" · CPU ", style="dim")
    t.append(f"{u.cpu_time.total:.3f} s", style="bold")
    cores = u.cpu_utilization.n_expected_cores or u.cpu_utilization.system_core_count or 1
    t.append(f" ({u.cpu_time.mean_percent:.0f}% of a core, {u.cpu_time.mean_percent / cores:.0f}% of {cores})")
    return t


def _title(s: Session) -> Text:
    m = s.meta
    t = Text(overflow="fold")  # the command in full: it may take two lines
    t.append(escape_controls(" ".join(m.command)) or "-", style="bold")
    when = local_time(m.start_time, "%Y-%m-%d %H:%M:%S") if m.start_time else "-"
    t.append(f"  {when} on {m.host or '?'}  ", style="dim")
    t.append(m.id, style="dim")
    return t


class CompareScreen(_HistoryScreenBase):
    """Two sessions side by side: each figure, the difference (B − A) and which is better."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("x", "swap", "Swap A/B", id="history.swap"),
    ]

    def __init__(self, a: store.Entry, b: store.Entry) -> None:
        super().__init__(classes="history-screen")
        self.a = load_full(a)
        self.b = load_full(b)

    def compose(self) -> ComposeResult:
        sa, sb = self.a.session, self.b.session
        if sa is None or sb is None or sa.summary is None or sb.summary is None:
            bad = self.a if sa is None or sa.summary is None else self.b
            yield Static(Text(f"cannot compare: session {bad.id} is {bad.error or 'without a summary'}", "red"))
            yield Footer()
            return
        with Vertical(classes="history-compare-heads"):
            yield Static(Text("A  ", style="bold cyan") + _title(sa), classes="history-title")
            yield Static(Text("B  ", style="bold magenta") + _title(sb), classes="history-title")
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
        for e in entries:
            _ = e.running  # checks a pid
        return entries, time.perf_counter() - t0

    @work(thread=True, group="history-load", exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.Loaded(*self._read()))

    def on_history_screen_loaded(self, message: Loaded) -> None:
        self.rows = [Row.of(e) for e in message.entries]
        self.load_seconds = message.seconds
        self.loaded = True
        known = {r.id for r in self.rows}
        self.marked = [m for m in self.marked if m in known]
        self._rebuild()

    # -- table

    def _columns_for(self, width: int) -> list[tuple[Column, int]]:
        """Each column with its width: the command gets what the others leave (the start is shorter when narrow)."""
        narrow = width < NARROW
        widths = {c.key: (14 if c.key == "start" and narrow else c.width) for c in COLUMNS}
        fixed = sum(w + 2 for k, w in widths.items() if k != "command")
        widths["command"] = max(16, min(60, width - fixed - 2 - 2))  # its cell padding, the scroll bar
        return [(c, widths[c.key]) for c in COLUMNS]

    def _rebuild(self, width: int | None = None) -> None:
        table = self.query_one("#history-table", DataTable)
        width = width or self.size.width or 80
        self._built_width = width
        narrow = width < NARROW
        cursor_id = self._cursor_id()
        table.clear(columns=True)
        for c, w in self._columns_for(width):
            label = c.label
            if c.key == self.sort_key:
                label += " ▼" if self.sort_reverse else " ▲"
            table.add_column(Text(label, justify="right" if c.right else "left"), width=w, key=c.key)
        self._narrow = narrow
        rows = filter_rows(self.rows, self.query_one("#history-filter", Input).value)
        self.shown = grouped(rows, self.sort_key, self.sort_reverse, self.expanded, self.group_jobs)
        start_fmt = "%m-%d %H:%M:%S" if narrow else "%Y-%m-%d %H:%M:%S"
        for r in self.shown:
            table.add_row(*self._cells(r, start_fmt), key=r.id)
        if cursor_id is not None and cursor_id in table.rows:
            table.move_cursor(row=table.get_row_index(cursor_id), animate=False)
        self._status()

    def _cells(self, r: Row, start_fmt: str) -> list[ListCell]:
        mark = ListCell("✓", "bold green") if r.id in self.marked else ListCell("")
        start = ListCell(local_time(r.start, start_fmt) if r.start else "?")
        if r.error is not None:
            blank = ListCell("")
            error = [ListCell(f"unreadable: {r.error}", "red"), blank, ListCell("error", "red", right=True)]
            return [mark, start, *error, blank, blank, blank, blank, ListCell(r.id, "dim")]
        exit_style = {"running": "bold green", "stale": "yellow", "0": ""}.get(r.exit, "red")
        command = ListCell(r.command or "-")
        if r.simulated:  # a demo's GPU figures, not a measurement
            command = ListCell(f"[sim] {r.command}", "magenta")
        if is_group(r):
            command = ListCell(group_label(r, r.job in self.expanded), "bold")
        elif r.depth:
            command = ListCell(f"  └ {r.job_part or r.id}: {r.command}")
        return [
            mark,
            start,
            command,
            ListCell(list_duration(r.duration) if r.duration is not None else "-", right=True),
            ListCell(r.exit or "-", exit_style, right=True),
            ListCell(human_bytes(r.peak_ram) if r.peak_ram is not None else "-", right=True),
            ListCell(_gpu_cell(r), "magenta" if r.simulated else "", right=True),
            ListCell(percent_or_dash(r.cpu), right=True),
            ListCell(_gpu_util_cell(r), "magenta" if r.simulated else "", right=True),
            ListCell(r.host),
        ]

    def _status(self) -> None:
        n_bad = sum(r.error is not None for r in self.rows)
        n_run = sum(r.running for r in self.rows)
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
        n_jobs = sum(is_group(r) for r in self.shown)
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
        return next((r for r in self.shown if r.id == sid), None)

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
        for r in self.shown:
            table.update_cell(r.id, "mark", ListCell("✓", "bold green") if r.id in self.marked else ListCell(""))
        table.action_cursor_down()
        self._status()

    def action_compare(self) -> None:
        by_id = {r.id: r for r in self.rows}
        ids = list(self.marked)
        if len(ids) == 1:
            cur = self._cursor_row()
            if cur is not None and cur.id != ids[0] and cur.error is None and not is_group(cur):
                ids.append(cur.id)
        if len(ids) != 2:
            self.notify("mark two sessions with space, then press c", severity="warning", markup=False)
            return
        # A is the earlier run, B the later: "did the change help?" reads B against A
        a, b = sorted((by_id[i] for i in ids), key=lambda r: (r.start or 0, r.id))
        self.app.push_screen(CompareScreen(a.entry, b.entry))

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
        self.rows = [r for r in self.rows if r.id != row.id]
        self.shown = [r for r in self.shown if r.id != row.id]
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


def _gpu_cell(r: Row) -> str:
    """Peak GPU memory (magenta, and `[sim]` before the command, when the GPUs were simulated)."""
    return human_bytes(r.peak_gpu) if r.peak_gpu is not None else "-"


def _gpu_util_cell(r: Row) -> str:
    """Mean utilization per GPU, with ×N for N GPUs (a sum of two read as 146 %)."""
    if r.gpu_util is None:
        return "-"
    return percent_or_dash(r.gpu_util) + (f"×{r.n_gpus}" if r.n_gpus > 1 else "")


def list_duration(s: float) -> str:
    """A run's duration in the list: under a second to the millisecond (a 0.02 s run read `0s`), else as the
    chart axes write it."""
    return f"{s:.3f}s" if s < 1 else short_time(s)
