"""The live view: a Textual app fed by a data source (the sampler process, or a fake in tests).

Two thread workers read the source (samples, and the command's output) and hand everything to the UI
thread with `post_message`; widgets are only touched in the message handlers. The process table is
diffed by row key (add / update / remove, then one sort) — never cleared and refilled.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Footer, Log

from gputop_tracker.core import channel
from gputop_tracker.core.channel import (
    STOP_SIGNAL,
    EventMessage,
    Failed,
    Progress,
    SampleMessage,
    Started,
    Summary,
)
from gputop_tracker.core.livestats import SampleHistory
from gputop_tracker.core.models import ProcessSample, ResourceUsage, Sample
from gputop_tracker.core.text import escape_controls
from gputop_tracker.tui.live_blocks import OpenBlocks
from gputop_tracker.tui.live_control import DataSource, RunControl
from gputop_tracker.tui.process_rows import (
    COLUMNS,
    SORT_LABEL,
    SORTS,
    final_processes,
    fit_columns,
    ordered_processes,
    process_cells,
    sort_mark,
)
from gputop_tracker.tui.proctable import ProcessTable
from gputop_tracker.tui.widgets import (
    GpuPanel,
    HelpScreen,
    HostPanel,
    Panel,
    SummaryPanel,
    clock,
)

NARROW = 100  # columns: below this the panels stack and the table drops a column
LOG_LINES = 2000
SIDE_WIDTH = 54  # columns of the side panels in the wide layout (live.tcss #side)
ALERT_STYLE = {"warning": "yellow", "gpu_lost": "yellow", "critical": "red", "oom": "red"}


class SamplerEvent(Message):
    """One message from the sampler, handed to the UI thread."""

    def __init__(self, msg: channel.Message) -> None:
        super().__init__()
        self.msg = msg


class SourceEnded(Message):
    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class OutputText(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


def side_width(width: int) -> int:
    return SIDE_WIDTH if width >= 150 else SIDE_WIDTH - 10


class LiveApp(RunControl):
    """Full-screen live view of one tracked command or attached process."""

    CSS_PATH = "live.tcss"
    TITLE = "gputop-track"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", id="quit", tooltip="Quit; asks first while the command runs"),
        Binding("p", "pause", "Pause", id="pause", tooltip="Freeze the display; sampling goes on"),
        Binding("s", "sort", "Sort", id="sort", tooltip="Cycle the sort column"),
        Binding("t", "tree", "Tree/flat", id="tree", tooltip="Indented tree or flat list"),
        Binding("k", "signal", "Signal", id="signal", tooltip="Send a signal to the selected process"),
        Binding("h", "history", "History", id="history", tooltip="Saved sessions"),
        Binding("question_mark", "help", "Help", id="help", key_display="?", tooltip="Keys and columns"),
    ]

    paused: reactive[bool] = reactive(False)
    """Display frozen; samples keep arriving and the run summary keeps counting."""
    tree_view: reactive[bool] = reactive(True)
    """Indented process tree (True) or a flat list sorted by the sort column."""
    sort_key: reactive[str] = reactive("pid")
    """Column the rows (siblings, in the tree view) are ordered by."""

    def __init__(
        self,
        source: DataSource,
        *,
        interval: float,
        command: list[str] | None = None,
        mode: str = "launch",
        store_dir: Path | None = None,
        output_path: Path | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.interval = interval
        self.command = list(command or [])
        self.mode = mode
        self.store_dir = store_dir
        self.output_path = output_path
        self.history = SampleHistory()
        self.progress: ResourceUsage | None = None  # the sampler's running summary (the report's figures)
        self.main_pid: int | None = None
        self.session_id: str | None = None
        self.latest: Sample | None = None
        self.final: ResourceUsage | None = None
        self.failure: Failed | None = None
        self.source_error: str | None = None
        self.ended = False  # the source has no more messages
        self.quit_choice: str | None = None  # "stop" / "detach" once the user asked to leave
        self.n_messages = 0
        self._columns: list[str] = []
        self._name_width = 0
        self._gpu_panels: dict[int, GpuPanel] = {}
        self._held_output: list[str] = []
        self.alert: str | None = None  # the worst alert so far (warning, critical, oom): colours the header
        self.open_blocks = OpenBlocks()  # the code blocks running now (shown in the header)

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        with Horizontal(id="main"):
            table = ProcessTable(id="procs")
            table.border_title = "processes"
            yield table
            with VerticalScroll(id="side"):
                yield HostPanel(id="host", classes="panel")
                yield SummaryPanel(id="summary", classes="panel")
        log = Log(id="output", max_lines=LOG_LINES, auto_scroll=True)
        log.border_title = "output"
        if self.output_path is not None:
            log.border_subtitle = str(self.output_path)
        yield log
        yield Footer()

    def on_mount(self) -> None:
        self._apply_width(self.size.width)
        self._draw_header()
        self.query_one("#procs").focus()  # arrows move the row cursor, not the output pane
        self.read_samples()
        self.read_output()

    def on_resize(self, event: events.Resize) -> None:
        self._apply_width(event.size.width)
        self._redraw()

    @property
    def narrow(self) -> bool:
        return self.has_class("narrow")

    def _apply_width(self, width: int) -> None:
        narrow = width < NARROW
        self.set_class(narrow, "narrow")
        side = 0 if narrow else side_width(width)
        if not narrow:
            self.query_one("#side").styles.width = side
        cols, name_w = fit_columns(width - side)
        keys = [c[0] for c in cols]
        if keys == self._columns and name_w == self._name_width:
            return
        # Only on a resize: the widths change, so rebuild the columns once and re-add the rows.
        self._columns = keys
        self._name_width = name_w
        table = self.query_one("#procs", ProcessTable)
        table.set_columns([(key, label, w or name_w, right) for key, label, w, right in cols])
        self._label_sort_column()
        if self.latest is not None:
            self._update_table(self.latest)

    # ------------------------------------------------------------------ workers (off the UI thread)

    @work(thread=True, group="sampler", exclusive=True, exit_on_error=False)
    def read_samples(self) -> None:
        try:
            for msg in self.source.messages():
                self.post_message(SamplerEvent(msg))
        except Exception as e:  # a broken pipe or a bad line: say so on screen, never crash the view
            self.post_message(SourceEnded(f"{type(e).__name__}: {e}"))
        else:
            self.post_message(SourceEnded(None))

    @work(thread=True, group="output", exclusive=True, exit_on_error=False)
    def read_output(self) -> None:
        for text in self.source.output():
            self.post_message(OutputText(text))

    # ------------------------------------------------------------------ messages (UI thread)

    def on_sampler_event(self, event: SamplerEvent) -> None:
        self.n_messages += 1
        msg = event.msg
        if isinstance(msg, SampleMessage):
            self.history.add(msg.sample)  # sparklines keep every sample, paused or not
            self.latest = msg.sample
            if not self.paused:
                with self.batch_update():  # one screen update per sample, not one per widget
                    self._redraw()
        elif isinstance(msg, Progress):
            self.progress = msg.usage  # drawn with the next sample: one screen update a second
        elif isinstance(msg, Started):
            self.main_pid = msg.pid
            self.session_id = msg.session_id
            if self.store_dir is None:
                self.store_dir = Path(msg.store)
            self._draw_header()
        elif isinstance(msg, EventMessage):
            self._on_alert(msg)
        elif isinstance(msg, Summary):
            self.final = msg.usage
            self._on_finished()
        elif isinstance(msg, Failed):
            self.failure = msg
            self._on_finished()

    def _on_alert(self, msg: EventMessage) -> None:
        e = msg.event
        if self.open_blocks.feed(e):
            self._draw_header()
            return
        rank = {"warning": 1, "gpu_lost": 1, "critical": 2, "oom": 3}
        if e.type not in rank:
            return  # peaks and process events stay in the session's timeline
        if rank[e.type] >= rank.get(self.alert or "", 0):
            self.alert = e.type
        self.notify(
            e.message + (f"\ndump: {e.dump}" if e.dump else ""),
            title=e.type.upper(),
            severity="warning" if rank[e.type] == 1 else "error",
        )
        self._draw_header()

    def on_source_ended(self, event: SourceEnded) -> None:
        self.ended = True
        self.source_error = event.error
        if self.final is None and self.failure is None:
            self._on_finished()

    def on_output_text(self, event: OutputText) -> None:
        if self.paused:
            self._held_output.append(event.text)
            return
        self.query_one("#output", Log).write(event.text)

    def _on_finished(self) -> None:
        self._redraw()
        if self.quit_choice is not None:
            self.source.close()
            self.exit(self.exit_code, return_code=self.exit_code)
            return
        if self.final is not None:
            where = self.final.session_path
            self.notify(f"session saved: {where}" if where else "session not saved", title=self._status_text())
        elif self.failure is not None:
            self.notify(self.failure.message, severity="error", title="could not track")

    # ------------------------------------------------------------------ drawing

    def _status_text(self) -> str:
        if self.failure is not None:
            return f"failed: {self.failure.message}"
        u = self.final
        if u is not None:
            if u.status == "detached":
                return "detached (still running)"
            if u.mode == "attach":
                return "target exited" if u.status == "exited" else "tracking stopped"
            if u.exit_signal:
                return f"killed by signal {u.exit_signal} (exit code {u.exit_code})"
            return f"exited with code {u.exit_code}"
        if self.ended:
            return "sampler stopped unexpectedly" + (f": {self.source_error}" if self.source_error else "")
        if self.quit_choice == "stop":
            return "stopping…"
        if self.quit_choice == "detach":
            return "detaching…"
        return "running"

    def _draw_header(self) -> None:
        command = self.command or (self.final.command if self.final is not None else [])
        cmd = escape_controls(" ".join(command)) or "-"
        if self.mode == "attach":
            cmd = f"attached to {self.main_pid or '?'}" + (f": {cmd}" if cmd != "-" else "")
        status = self._status_text()
        style = "bold green" if status == "running" else "bold yellow" if self.final is None else "bold cyan"
        if self.failure is not None or (self.final is not None and self.final.exit_code not in (0, None)):
            style = "bold red"
        elapsed = (
            self.final.compute_time.time if self.final is not None else self.latest.elapsed if self.latest else 0.0
        )
        n = self.latest.tree.n_processes if self.latest else 0
        extras: list[tuple[str, str] | str] = []
        if self.paused:
            extras.append(("  PAUSED", "bold reverse yellow"))
        if self.alert is not None:
            extras.append((f"  {self.alert.upper().replace('_', ' ')}", f"bold reverse {ALERT_STYLE[self.alert]}"))
        if running_blocks := self.open_blocks.text():
            extras.append((f"  {running_blocks}", "bold blue"))
        if self.latest is not None and any(g.simulated for g in self.latest.gpus):
            extras.append(("  SIMULATED GPUs", "bold magenta"))
        line2 = Text.assemble(
            ("PID ", "dim"),
            str(self.main_pid or "-"),
            "  ",
            (f"● {status}", style),
            ("  elapsed ", "dim"),
            clock(elapsed),
            ("  every ", "dim"),
            f"{self.interval:g} s",
            ("  processes ", "dim"),
            str(n),
            *extras,
        )
        line1 = Text.assemble(("▶ ", "bold"), (cmd, "bold"))
        line1.truncate(max(self.size.width - 2, 10), overflow="ellipsis")
        self.query_one("#header", Panel).update(Text.assemble(line1, "\n", line2))

    def _redraw(self) -> None:
        if self.paused:
            self._draw_header()
            return
        self._draw_header()
        s = self.latest
        if self.final is not None and self.final.processes:
            self._update_table(self.latest, final_processes(self.final))
        elif s is not None:
            self._update_table(s)
        if s is not None:
            self._update_gpus(s)
            self.query_one("#host", HostPanel).show(s.host, self.panel_width)
        summary = self.query_one("#summary", SummaryPanel)
        if self.final is not None:
            summary.show_final(self.final, self.narrow)
            self.query_one("#procs", ProcessTable).border_title = "processes: peaks over the run"
        elif self.failure is not None:
            summary.update(Text(self.failure.message, style="bold red"))
        elif self.progress is not None:
            summary.show_live(self.progress, self.narrow)

    @property
    def panel_width(self) -> int:
        """Content width of a side panel (known from the layout rules, not from a size not yet laid out)."""
        return self.size.width - 2 if self.narrow else side_width(self.size.width) - 6

    def _update_gpus(self, s: Sample) -> None:
        side = self.query_one("#side", VerticalScroll)
        for g in s.gpus:
            panel = self._gpu_panels.get(g.index)
            if panel is None:
                panel = self._gpu_panels[g.index] = GpuPanel(g.index)
                side.mount(panel, before=self.query_one("#host"))
            mean = (
                next((x.mean_utilization for x in self.progress.gpus if x.index == g.index), None)
                if self.progress
                else None
            )
            panel.show(g, self.history.gpus.get(g.index), mean, self.narrow, self.panel_width)

    def _update_table(self, s: Sample | None, processes: list[ProcessSample] | None = None) -> None:
        if processes is None:
            if self.final is not None and self.final.processes:
                processes = final_processes(self.final)
            else:
                processes = s.processes if s is not None else []
        ordered = ordered_processes(processes, self.sort_key, self.tree_view)
        rows = [(p.pid, process_cells(p, depth, self._columns)) for p, depth in ordered]
        self.query_one("#procs", ProcessTable).update_rows(rows)

    def _label_sort_column(self) -> None:
        table = self.query_one("#procs", ProcessTable)
        for key, label, _width, _right in COLUMNS:
            if key in table.columns:
                mark = sort_mark(key, self.sort_key)
                table.set_label(key, label + mark, "bold" if mark else "")

    def selected_pid(self) -> int | None:
        return self.query_one("#procs", ProcessTable).cursor_key

    def on_process_table_header_selected(self, event: ProcessTable.HeaderSelected) -> None:
        if event.column in SORTS:
            self.sort_key = event.column

    # ------------------------------------------------------------------ reactives

    def watch_paused(self, paused: bool) -> None:
        if not paused:
            if self._held_output:
                self.query_one("#output", Log).write("".join(self._held_output))
                self._held_output.clear()
            self._redraw()
        else:
            self._draw_header()

    def watch_tree_view(self) -> None:
        if self.latest is not None and not self.paused:
            self._update_table(self.latest)

    def watch_sort_key(self) -> None:
        if not self._columns:  # not laid out yet
            return
        self._label_sort_column()
        if self.latest is not None and not self.paused:
            self._update_table(self.latest)

    # ------------------------------------------------------------------ actions

    def action_pause(self) -> None:
        self.paused = not self.paused

    def action_sort(self) -> None:
        self.sort_key = SORTS[(SORTS.index(self.sort_key) + 1) % len(SORTS)]
        self.notify(f"sorted by {SORT_LABEL[self.sort_key]}", timeout=1.5)

    def action_tree(self) -> None:
        self.tree_view = not self.tree_view

    def action_history(self) -> None:
        try:
            from gputop_tracker.tui.history import HistoryScreen
        except ImportError:
            self.notify("history not available", severity="warning")
            return
        store = self.store_dir
        if store is None:
            self.notify("history not available: no session store", severity="warning")
            return
        self.push_screen(HistoryScreen(store))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def on_unmount(self) -> None:
        self.source.close()  # lets the reader threads end, so the app can shut down


__all__ = ["STOP_SIGNAL", "DataSource", "LiveApp"]
