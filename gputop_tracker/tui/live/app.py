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
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.driver import Driver
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from gputop_tracker.core.model import (
    BlocksMessage,
    EventMessage,
    Failed,
    ProcessSample,
    Progress,
    ResourceUsage,
    Sample,
    SampleMessage,
    Started,
    Summary,
    escape_controls,
)
from gputop_tracker.core.sampling import STOP_SIGNAL, channel
from gputop_tracker.core.summary import SampleHistory
from gputop_tracker.tui.live.alerts import RANK as ALERT_RANK
from gputop_tracker.tui.live.alerts import AlertLog
from gputop_tracker.tui.live.blocks import BlocksPane, OpenBlocks
from gputop_tracker.tui.live.charts import LiveCharts
from gputop_tracker.tui.live.control import RunControl
from gputop_tracker.tui.live.gcfreeze import freeze_startup_objects
from gputop_tracker.tui.live.keys import BINDINGS, ViewKeys
from gputop_tracker.tui.live.layout import MIN_SIZE, NARROW, ROW_STEP, fit_heights, wide_fits, with_spare_rows
from gputop_tracker.tui.live.line_compositor import use_line_compositor
from gputop_tracker.tui.live.messages import OutputText, SamplerEvent, SourceEnded, Told
from gputop_tracker.tui.live.output_pane import OutputPane
from gputop_tracker.tui.live.process_info import ExitedRows
from gputop_tracker.tui.live.process_rows import (
    COLUMNS,
    RowCells,
    final_processes,
    fit_columns,
    fit_label,
    ordered_processes,
    sort_mark,
)
from gputop_tracker.tui.live.quiet_driver import quiet_driver
from gputop_tracker.tui.live.texts import DrawPacer, command_line, detached_text, left_running, run_so_far, status_text
from gputop_tracker.tui.live.view import DataSource, LiveView
from gputop_tracker.tui.widgets.job_panel import JobPanel
from gputop_tracker.tui.widgets.job_panel import rows as job_rows
from gputop_tracker.tui.widgets.panels import (
    GpuPanel,
    HostPanel,
    Panel,
    SummaryPanel,
    clock,
    plain,
    set_border_text,
    side_width,
)
from gputop_tracker.tui.widgets.proctable import ProcessTable

LOG_LINES = 2000
ATTACHED_OUTPUT = (
    "Attached to a running process: its output is not captured here;\n"
    "it goes where it went before (its terminal, a file). Launched by gputop-track, a command's shows here.\n"
)


class LiveApp(LiveView):
    """Full-screen live view of one tracked command or attached process. It lays out and draws; two parts it owns
    hold the rest: `control` (whether the run goes on, its exit code; quit, stop, detach, signal) and `view_keys`
    (what is shown and how: pause, sort, tree, filter, find, zoom, details, help, history, blocks)."""

    CSS_PATH = "live.tcss"
    TITLE = "gputop-track"
    BINDINGS: ClassVar[list[BindingType]] = BINDINGS

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
        self.control = RunControl(self)  # the run: quit, stop, detach, signal, exit code
        self.view_keys = ViewKeys(self)  # the keys that change what is shown
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
        self.n_messages = 0
        self._columns: list[str] = []
        self._row_cells = RowCells()  # each process's row as last formatted
        self._name_width = 0
        self._has_gpus = False  # a GPU was seen: the table has its GPU columns
        self._n_gpus = 0  # the most GPUs a sample had: a side panel each
        self._gpu_panels: dict[int, GpuPanel] = {}
        self._held_output: list[str] = []
        self.exited = ExitedRows()  # processes that just left the tree, shown a few samples with how they ended
        self._paused_latest: Sample | None = None  # the newest sample while the display is frozen
        self.view_size = (0, 0)  # the terminal's size as last laid out (columns, rows)
        self.pacer = DrawPacer(self, interval, self._draw_sample, paced=getattr(source, "hold", 0.0) > 0)
        self.alerts = AlertLog()  # every alert of the run; the header names the latest until they are read (a)
        self.open_blocks = OpenBlocks()  # the code blocks running now (shown in the header)
        self._paused_blocks = ""  # the header's blocks when the display was paused (frozen with the rest)
        self.job_panel = JobPanel(id="job", classes="panel")  # how much of the job's request is used
        self.blocks_pane = BlocksPane()  # the blocks table (key b)
        self.bound_seen = False  # a row showed a ≥ lower bound: the table's title explains it from then on
        self._n_rows = 0  # the process table's rows: the output pane gets the rows it does not need

    # ------------------------------------------------------------------ keys: each action is the part's

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.view_keys.allows(action)

    async def action_quit(self) -> None:
        await self.control.quit()

    def action_signal(self) -> None:
        self.control.signal_selected()

    def action_pause(self) -> None:
        self.view_keys.pause()

    def action_sort(self) -> None:
        self.view_keys.sort()

    def action_sort_by(self, key: str) -> None:
        self.view_keys.sort_by(key)

    def action_tag(self) -> None:
        self.view_keys.tag()

    def action_reverse(self) -> None:
        self.view_keys.reverse()

    def action_tree(self) -> None:
        self.view_keys.tree()

    def action_details(self) -> None:
        self.view_keys.details()

    def action_zoom_output(self) -> None:
        self.view_keys.zoom_output()

    def action_focus_next_pane(self) -> None:
        self.view_keys.focus_next_pane()

    def action_filter(self) -> None:
        self.view_keys.filter()

    def action_find(self) -> None:
        self.view_keys.find()

    def action_match(self, step: int) -> None:
        self.view_keys.match(step)

    def action_escape(self) -> None:
        self.view_keys.escape()

    def action_history(self) -> None:
        self.view_keys.history()

    def action_help(self) -> None:
        self.view_keys.help()

    def action_blocks(self) -> None:
        self.view_keys.blocks()

    def action_alerts(self) -> None:
        self.view_keys.alerts()

    @property
    def alert(self) -> str | None:
        """The worst alert so far (warning, critical, oom): colours the header."""
        return self.alerts.worst

    def action_suspend_process(self) -> None:
        """Ctrl-Z: the view stops (the sampler, a process of its own, samples on); after `fg` the whole screen
        is drawn again, not only what changed meanwhile: the shell wrote over it."""
        super().action_suspend_process()  # returns once continued
        self.call_after_refresh(self.screen.refresh, repaint=True, layout=True)

    def watch_paused(self, paused: bool) -> None:
        if not paused:  # what came meanwhile: the newest sample, the output held
            if self._paused_latest is not None:
                self.latest, self._paused_latest = self._paused_latest, None
            if self._held_output:
                self.query_one("#output", OutputPane).write("".join(self._held_output))
                self._held_output.clear()
            self._redraw()
        else:
            self._paused_blocks = self.open_blocks.text()  # the header's block name freezes with the table
            self.draw_header()

    # ------------------------------------------------------------------ what the parts call (LiveView)

    def redraw(self) -> None:
        self._redraw()

    def relayout(self, size: tuple[int, int] | None = None) -> None:
        self._apply_width(*(size or self.view_size))

    def refresh_rows(self) -> None:
        if not self._columns:  # not laid out yet
            return
        self._label_sort_column()
        if self.latest is not None:
            self._update_table(self.latest)

    def tagged_pids(self) -> list[int]:
        return self.view_keys.tagged_in_order()

    def untag(self) -> None:
        self.view_keys.untag()

    def watch_tree_view(self) -> None:
        self.view_keys.rows_changed()

    def watch_sort_key(self) -> None:
        self.view_keys.rows_changed()

    def watch_sort_reverse(self) -> None:
        self.view_keys.rows_changed()

    def watch_row_filter(self) -> None:
        self.view_keys.rows_changed()  # the table's title follows with its rows (`show_table_title`)

    def on_process_table_header_selected(self, event: ProcessTable.HeaderSelected) -> None:
        self.view_keys.header_selected(event)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.view_keys.prompt_changed(event)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.view_keys.prompt_submitted(event)

    # ------------------------------------------------------------------ the driver

    def get_driver_class(self) -> type[Driver]:
        return quiet_driver(super().get_driver_class())  # no input poll ten times a second

    def get_default_screen(self) -> Screen[object]:
        return use_line_compositor(super().get_default_screen())  # each second's few changed lines, not the screen

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                table = ProcessTable(id="procs")
                table.border_title = "processes"
                yield table
                yield ProcessTable(id="blocks")
            with VerticalScroll(id="side", can_focus=False):  # figures to read: Tab goes from table to output
                yield self.job_panel  # shown once a request is known
                yield HostPanel(id="host", classes="panel")
                yield SummaryPanel(id="summary", classes="panel")
        yield ProcessTable(id="blocks-wide")
        yield LiveCharts(id="charts")
        attached = self.mode == "attach"
        title = "output: not captured" if attached else "output"
        log = OutputPane(LOG_LINES, id="output", title=title, frame=self.pacer.every)  # drawn with the samples
        if self.output_path is not None:
            log.border_subtitle = plain(str(self.output_path))
        yield log
        prompt = Input(id="prompt")
        prompt.display = False
        yield prompt
        yield Static(id="too-small")
        yield Footer()

    def on_mount(self) -> None:
        self._apply_width(self.size.width, self.size.height)
        self.draw_header()
        self.query_one("#procs").focus()  # arrows move the row cursor, not the output pane
        if self.mode == "attach":  # an empty pane looked like a process that printed nothing
            self.query_one("#output", OutputPane).write(ATTACHED_OUTPUT)
        self.read_samples()
        self.read_output()

    def on_resize(self, event: events.Resize) -> None:
        self._apply_width(event.size.width, event.size.height)
        self._redraw()

    @property
    def narrow(self) -> bool:
        return self.has_class("narrow")

    def _apply_width(self, width: int, height: int | None = None) -> None:
        # during a resize self.size is still the old one: everything drawn from here on uses view_size
        self.view_size = (width, height if height is not None else self.view_size[1] or self.size.height)
        height = self.view_size[1]
        self._too_small(width, height)
        narrow = width < NARROW or not wide_fits(height, self._side_need(False))
        self.set_class(narrow, "narrow")
        heights = fit_heights(height, narrow, self._side_need(narrow))
        charts_h, output_h, side_h = heights
        if not self.has_class("blocks-split"):  # the blocks table under the processes needs the room
            output_h = with_spare_rows(height, heights, self._side_need(narrow), self._n_rows, narrow)
        self.query_one("#charts").styles.height = charts_h
        self.query_one("#output").styles.height = "1fr" if self.has_class("output-zoom") else output_h
        self.query_one("#side").styles.max_height = side_h if narrow else None
        side = 0 if narrow else side_width(width)
        self.query_one("#side").styles.width = "1fr" if narrow else side  # inline: set both ways
        cols, name_w = fit_columns(width - side, self._has_gpus)
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

    def _side_need(self, narrow: bool) -> int:
        """Rows the side panels take. Wide: the host (3), the run so far (its figures, two more with a GPU, the
        saved path at the end), a panel per GPU (5), the job's request (a line per resource). Narrow, without
        borders: the host's line, the summary's (two where it wraps), a line per GPU, one for the request."""
        n, job = self._n_gpus, self.job_panel.display
        if narrow:
            return 3 + n + (1 if job else 0)
        return 3 + 8 + (2 if n else 0) + 5 * n + (self._job_rows() + 2 if job else 0)

    def _job_rows(self) -> int:
        u = self.final or self.progress
        return max(1, len(job_rows(u))) if u is not None else 1

    def _too_small(self, width: int, height: int) -> None:
        """Under MIN_SIZE the panels are not drawn (at 20x5 they were a few broken borders and a scrolling
        screen): one plain sentence says why, and what still works."""
        small = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        was = self.has_class("too-small")
        self.set_class(small, "too-small")
        if small:
            self.query_one("#too-small", Static).update(
                f"Terminal too small ({width}×{height}). q quits. The command runs on, still sampled; the live "
                f"view needs at least {MIN_SIZE[0]}×{MIN_SIZE[1]}."
            )
        elif was and self.focused is None:
            self.query_one("#procs").focus()  # hidden, the table lost the focus: arrows move its rows again

    # ------------------------------------------------------------------ workers (off the UI thread)

    @work(thread=True, group="sampler", exclusive=True, exit_on_error=False)
    def read_samples(self) -> None:
        try:
            batches = getattr(self.source, "batches", None)  # the sampler's: one hand-over per read
            for msgs in batches() if batches is not None else ([msg] for msg in self.source.messages()):
                self.post_message(SamplerEvent(msgs))
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
        latest = self.latest
        for msg in event.msgs:
            self._take(msg)
        if self.latest is not latest and self.final is None and self.failure is None:  # the end drew its own
            self.pacer.sample_came()  # one draw for the samples of a hand-over (the newest), not one each

    def _take(self, msg: channel.Message) -> None:
        self.n_messages += 1
        if isinstance(msg, SampleMessage):
            self._on_sample(msg.sample)
        elif isinstance(msg, Progress):
            self.progress = msg.usage  # drawn with the next sample: one screen update a second
        elif isinstance(msg, BlocksMessage):
            self.blocks_pane.latest = msg.blocks  # drawn with the next sample, as the progress
        elif isinstance(msg, Started):
            self._on_started(msg)
        elif isinstance(msg, EventMessage):
            if msg.event.type == "process_exited":
                self.exited.exited(msg.event)
            self._on_alert(msg)
        elif isinstance(msg, Summary | Failed):
            self._on_end(msg)

    def _on_sample(self, sample: Sample) -> None:
        self.history.add(sample)  # charts keep every sample, paused or not
        self._gpus_seen(sample)
        self.exited.seen(sample)
        if self.paused:
            self._paused_latest = sample
        else:
            self.latest = sample

    def _on_started(self, msg: Started) -> None:
        self.main_pid = msg.pid
        self.session_id = msg.session_id
        if self.store_dir is None:
            self.store_dir = Path(msg.store)
        self.draw_header()

    def _on_end(self, msg: Summary | Failed) -> None:
        if isinstance(msg, Summary):
            self.final = msg.usage
            self.blocks_pane.finished(msg.usage)
        else:
            self.failure = msg
        self._on_finished()

    def _gpus_seen(self, s: Sample) -> None:
        """The first sample with a GPU: the table gets its GPU columns."""
        if len(s.gpus) > self._n_gpus:
            self._has_gpus = True
            self._n_gpus = len(s.gpus)  # the side panels need more room: the layout is fitted again
            self._apply_width(*self.view_size)

    def _draw_sample(self) -> None:
        if self.paused:
            return
        with self.batch_update():  # one screen update per sample, not one per widget
            self._redraw(sample=True)
            self.query_one("#output", OutputPane).flush()  # output that waits for its frame: in this update
        freeze_startup_objects()

    def _on_alert(self, msg: EventMessage) -> None:
        e = msg.event
        if self.open_blocks.feed(e):
            self.draw_header()
            return
        if not self.alerts.add(e):
            return  # peaks and process events stay in the session's timeline
        self.notify(  # closes after a while; the header and the list (a) keep it
            e.message + (f"\ndump: {e.dump}" if e.dump else ""),
            title=e.type.upper(),
            severity="warning" if ALERT_RANK[e.type] == 1 else "error",
            markup=False,  # a process's name, a CUDA error line: text, not markup
        )
        self.draw_header()

    def on_source_ended(self, event: SourceEnded) -> None:
        self.ended = True
        self.source_error = event.error
        if self.final is None and self.failure is None:
            self._on_finished()
            job = "the command runs on untracked" if self.mode == "launch" else "the attached process is untouched"
            wait = ": quit (q) and this terminal waits for it, Ctrl-C then signals it" if self.mode == "launch" else ""
            self.notify(
                f"{job}{wait}; the session keeps the figures measured so far",
                title="the sampler process stopped",
                severity="error",
                timeout=3600,
                markup=False,
            )

    def tell(self, text: str, title: str = "") -> bool:
        """Show `text` as a warning notification; callable from any thread (`post_message` is thread-safe).
        False when the view is closing (the caller tells it elsewhere)."""
        return self.post_message(Told(text, title))

    def on_told(self, event: Told) -> None:
        self.notify(event.text, title=event.title, severity="warning", timeout=30, markup=False)

    def on_output_text(self, event: OutputText) -> None:
        if self.paused:
            self._held_output.append(event.text)
            return
        self.query_one("#output", OutputPane).feed(event.text)  # drawn once a frame at most

    def _on_finished(self) -> None:
        self.control.run_ended()
        self._redraw()
        if self.control.quit_choice is not None:
            self.source.close()
            self.exit(self.control.exit_code, return_code=self.control.exit_code)
            return
        if self.final is not None:
            where = self.final.session_path
            text = f"session saved: {where}" if where else "session not saved"
            if left_running(self.final):
                text = f"{self.detached_line()}\n{text}"
            self.notify(text, title=self._status_text(), markup=False, timeout=30)
        elif self.failure is not None:
            self.notify(self.failure.message, severity="error", title="could not track", markup=False)

    # ------------------------------------------------------------------ drawing

    def _status_text(self) -> str:
        failed = self.failure.message if self.failure is not None else None
        return status_text(self.final, failed, self.ended, self.source_error, self.control.quit_choice)

    def draw_header(self) -> None:
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
        if self.blocks_pane.latest is not None and not self.blocks_pane.shown(self.view_size):
            extras.append(("  b: blocks", "dim"))  # before the blocks' names, which may be cut at the edge
        if running_blocks := (self._paused_blocks if self.paused else self.open_blocks.text()):
            extras.append((f"  {running_blocks}", "bold blue"))
        if self.latest is not None and any(g.simulated for g in self.latest.gpus):
            extras.append(("  SIMULATED GPUs", "bold magenta"))
        line2 = Text.assemble(
            ("PID ", "dim"),
            str(self.main_pid or "-"),
            "  ",
            (f"● {status}", style),
            *(("  ", alert) if (alert := self.alerts.header()) is not None else ()),  # before what may be cut
            ("  elapsed ", "dim"),
            clock(elapsed),
            ("  every ", "dim"),
            f"{self.interval:g} s",
            ("  processes ", "dim"),
            str(n),
            *extras,
        )
        line2.truncate(max(self.view_size[0] - 2, 10), overflow="ellipsis")  # one line: a long alert is cut
        command = self.shown_command()
        line1 = command_line(tuple(command), self.mode, self.main_pid, self.view_size[0])
        self.query_one("#header", Panel).show_lines([line1, line2])

    def _redraw(self, *, sample: bool = False) -> None:
        """Everything from the latest sample; `sample`: a new one came (the charts may wait for the next)."""
        if self.paused:
            self.draw_header()
            return
        self.draw_header()
        s = self.latest
        if self.final is not None and self.final.processes:
            self._update_table(self.latest, final_processes(self.final))
        elif s is not None:
            self._update_table(s)
        self.view_keys.draw_blocks()
        if s is not None:
            self._update_gpus(s)
            self.query_one("#host", HostPanel).show(s.host, self.panel_width)
            self.query_one("#charts", LiveCharts).show(self.history, self.narrow, force=not sample)
        summary = self.query_one("#summary", SummaryPanel)
        if self.final is not None:
            note = self.detached_line() if left_running(self.final) else ""
            summary.show_final(self.final, self.narrow, note, width=self.panel_width)
            self.view_keys.show_table_title()
        elif self.failure is not None:
            summary.update(Text(self.failure.message, style="bold red"))
        elif self.progress is not None:
            summary.show_final(run_so_far(self.progress, s), self.narrow, live=True, width=self.panel_width)
        had_job = self.job_panel.display
        self.job_panel.show(self.final or self.progress, self.narrow, self.panel_width)
        if self.job_panel.display != had_job:  # the request's panel came: the side needs its rows
            self._apply_width(*self.view_size)

    def shown_command(self) -> list[str]:
        """The command line the header and the dialogs name: the one launched; attached, the process's own (from
        the samples: "attached to 4242" alone said nothing of what was watched until it ended)."""
        if self.command:
            return self.command
        if self.final is not None:
            return self.final.command
        procs = self.latest.processes if self.latest is not None else []
        return next((p.cmdline or [p.name] for p in procs if p.pid == self.main_pid), [])

    def running_summary(self) -> tuple[str, ResourceUsage] | None:
        """This run's session id and its running summary (the history lists it with these figures)."""
        if self.session_id is None or self.progress is None or self.final is not None:
            return None
        return self.session_id, run_so_far(self.progress, self.latest)

    def detached_line(self) -> str:
        return detached_text(self.main_pid or (self.final.pid if self.final else None), self.mode, self.output_path)

    @property
    def panel_width(self) -> int:
        """Content width of a side panel (known from the layout rules, not from a size not yet laid out)."""
        width = self.view_size[0]
        return width - 2 if self.narrow else side_width(width) - 6

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
        states: dict[int, str] = {}
        if processes is None:
            if self.final is not None and self.final.processes:
                processes = final_processes(self.final)
            else:
                processes = s.processes if s is not None else []
                ghosts = self.exited.ghosts(processes)
                states = {p.pid: label for p, label in ghosts}
                processes = processes + [p for p, _ in ghosts]
        if self.row_filter:
            processes = [p for p in processes if self.view_keys.keep_row(p)]
        ordered = ordered_processes(processes, self.sort_key, self.tree_view, reverse=self.sort_reverse)
        self.view_keys.keep_tags({p.pid for p in processes})  # a tag leaves with its process
        mem_total = s.host.memory_total if s is not None else 0
        rows = self._row_cells.rows(
            ordered, self._columns, states, self._name_width, mem_total=mem_total, tagged=self.view_keys.tagged
        )
        table = self.query_one("#procs", ProcessTable)
        table.update_rows(rows)
        if -(-(len(rows) + 1) // ROW_STEP) != -(-(self._n_rows + 1) // ROW_STEP):  # the output's room changes
            self._n_rows = len(rows)
            self._apply_width(*self.view_size)
        self._n_rows = len(rows)
        if self.final is None:  # the legend of ≥ from the first row that shows one on (no flicker)
            self.bound_seen = self.bound_seen or any(p.mem_bound for p, _ in ordered)
        self.view_keys.show_table_title(bool(rows))
        self._show_selected_command()

    def _show_selected_command(self) -> None:
        """The selected process's whole command line under the table (the column shortens it)."""
        table = self.query_one("#procs", ProcessTable)
        pid = table.cursor_key
        p = self.process(pid)
        text = escape_controls(" ".join(p.cmdline) or p.name) if p is not None else ""
        width = self.view_size[0]
        room = max(width - (0 if self.narrow else side_width(width)) - 8, 10)
        if len(text) > room:
            text = text[: room - 1] + "…"
        set_border_text(table, "border_subtitle", f"{pid}: {text}" if text else None)

    def process(self, pid: int | None) -> ProcessSample | None:
        if pid is None:
            return None
        procs = self.latest.processes if self.latest is not None else []
        ghosts = [p for p, _ in self.exited.ghosts(procs)]
        return next((p for p in [*procs, *ghosts] if p.pid == pid), None)

    def on_process_table_cursor_moved(self, _event: ProcessTable.CursorMoved) -> None:
        self._show_selected_command()

    def _label_sort_column(self) -> None:
        table = self.query_one("#procs", ProcessTable)
        widths = table.widths
        for key, label, _width, _right in COLUMNS:
            if key in table.columns:
                mark = sort_mark(key, self.sort_key, self.sort_reverse)
                table.set_label(key, fit_label(label, mark, widths[key]), "bold" if mark else "")

    def selected_pid(self) -> int | None:
        return self.query_one("#procs", ProcessTable).cursor_key

    def on_unmount(self) -> None:
        self.source.close()  # lets the reader threads end, so the app can shut down


__all__ = ["STOP_SIGNAL", "DataSource", "LiveApp"]
