"""The list of saved sessions: sort, filter, mark two to compare, open, export, delete."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.events import Resize
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Static

from gputop_tracker.core.model import ResourceUsage, escape_controls, human_bytes
from gputop_tracker.core.report import (
    COLUMN_BY_KEY,
    COLUMNS,
    SORTABLE,
    Column,
    Row,
    count_session_files,
    filter_rows,
    group_label,
    grouped,
    is_group,
    local_time,
    percent_or_dash,
)
from gputop_tracker.core.store import sessions as store
from gputop_tracker.tui.history.parts import ListCell, RowTable, gpu_cell, gpu_util_cell, list_duration
from gputop_tracker.tui.history.screens.base import NARROW, HistoryScreenBase
from gputop_tracker.tui.history.screens.compare import CompareScreen
from gputop_tracker.tui.history.screens.confirm import ConfirmScreen
from gputop_tracker.tui.history.screens.detail import SessionDetailScreen
from gputop_tracker.tui.history.screens.export import ask_export
from gputop_tracker.tui.live.texts import typed_command

MIN_COMMAND = 27  # cells of the list's command column (what tells sessions apart) before others leave room
OPTIONAL = ["host", "gpu_util", "cpu"]  # the list's columns that leave first, in this order, on a narrow terminal

RUNNING_REFRESH = 2.0  # seconds between two reads of the running sessions' figures while the list is on show
SYNC_LOAD_MAX = 2000  # session files read on the UI thread when the list opens; more are read in a worker


class HistoryScreen(HistoryScreenBase):
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

    def __init__(self, store_dir: Path, live: Callable[[], tuple[str, ResourceUsage] | None] | None = None) -> None:
        super().__init__(classes="history-screen")
        self.store_dir = store_dir
        self.live = live
        """Opened from the live view: the id of the session it tracks and its running summary (a second old)."""
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
        self.set_interval(RUNNING_REFRESH, self.refresh_running)
        self.query_one("#history-table", DataTable).focus()
        if count_session_files(self.store_dir) <= SYNC_LOAD_MAX:
            # Read at once: ~0.15 s per 1,000 files. A thread racing the app's own start-up for the GIL
            # took three times as long; past SYNC_LOAD_MAX the worker keeps the screen responsive.
            self.on_history_screen_loaded(self.Loaded(*self._read()))
        else:
            self._load()

    def refresh_running(self) -> None:
        """The running sessions' rows, while the list is on show: the live view's own session from its running
        summary, the others from the figures their samplers write while asked (a checkpoint is written once a
        minute: a 50 s old run read `0.068s`, its figures from the checkpoint after its first sample)."""
        if not self.loaded or not self.is_current or not any(row.running for row in self.rows):
            return
        live = self.live() if self.live is not None else None
        table = self.query_one("#history-table", DataTable)
        start_fmt = "%m-%d %H:%M:%S" if self._narrow else "%Y-%m-%d %H:%M:%S"
        for i, row in enumerate(self.rows):
            if not row.running or row.entry.path is None:
                continue
            entry = _running_entry(row.entry, live)
            new = self.rows[i] = Row.of(entry)
            if new.id not in table.rows or any(shown.id == new.id and shown.depth for shown in self.shown):
                continue  # not in the list as it is filtered, or under a job's row: the next rebuild shows it
            self.shown = [new if shown.id == new.id else shown for shown in self.shown]
            cells = self._cells(new, start_fmt)
            for column, cell in zip(COLUMNS, cells, strict=True):
                if column.key in self._shown_keys:
                    table.update_cell(new.id, column.key, cell)

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
        live = self.live() if self.live is not None else None
        self.rows = [Row.of(_with_live(entry, live)) for entry in message.entries]  # the live one as it stands
        self.load_seconds = message.seconds
        self.loaded = True
        for row in self.rows:  # another run's sampler starts writing its figures now, not at the first refresh
            if row.running and row.entry.path is not None and (live is None or live[0] != row.id):
                store.ask_running(row.entry.path)
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
        command = ListCell(_listed_command(row) or "-")
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
            ListCell(gpu_cell(row), "magenta" if row.simulated else "", right=True),
            ListCell(percent_or_dash(row.cpu), right=True),
            ListCell(gpu_util_cell(row), "magenta" if row.simulated else "", right=True),
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
            ask_export(self, row.entry)

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


def _running_entry(entry: store.Entry, live: tuple[str, ResourceUsage] | None) -> store.Entry:
    """A running session as it stands: the live view's own from its running summary, another's from the figures
    its sampler writes while asked (asked again now: the next read gets newer ones), else its last checkpoint."""
    if live is not None and live[0] == entry.id:
        return _with_live(entry, live)
    fresh = store.load_running(entry.path) or store.load(entry.path, timeline=False)
    if fresh.running:
        store.ask_running(entry.path)
    else:  # it ended since the last look: nothing more to ask (a request made just before the end goes too)
        store.forget_running(entry.path.parent, entry.id)
    return fresh


def _with_live(entry: store.Entry, live: tuple[str, ResourceUsage] | None) -> store.Entry:
    """The live view's own session with its running summary (its file has the last checkpoint's)."""
    if live is None or live[0] != entry.id or entry.session is None:
        return entry
    session = entry.session.model_copy(update={"summary": live[1]})
    return store.Entry(entry.id, entry.path, session, partial=True)


def _listed_command(row: Row) -> str:
    """The command as the user would type it: an attached process's starts with its program's full path
    (`/usr/bin/python3 train.py`), listed as `python3 train.py` like a launched one where PATH finds it so."""
    session = row.entry.session
    if session is None or session.meta.mode != "attach":
        return row.command
    return escape_controls(" ".join(typed_command(tuple(session.meta.command))))
