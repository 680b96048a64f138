"""The live view's keys that change what is shown: pause, sort (and reverse), tree/flat, filter the processes,
find in the output, zoom the output, details, help, history. A base class of LiveApp (it draws)."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import Input

from gputop_tracker.core.model.models import ProcessSample, ResourceUsage, Sample
from gputop_tracker.core.summary.livestats import SampleHistory
from gputop_tracker.tui.live.blocks import MAX_ROWS, BlocksPane, OpenBlocks
from gputop_tracker.tui.live.control import RunControl
from gputop_tracker.tui.live.output_pane import OutputPane
from gputop_tracker.tui.live.process_info import ExitedRows, ProcessDetailScreen, detail_text
from gputop_tracker.tui.live.process_rows import BOUND_LEGEND, SORT_LABEL, SORTS, short_command
from gputop_tracker.tui.widgets.panels import HelpScreen, plain, side_width
from gputop_tracker.tui.widgets.proctable import ProcessTable

# every key has an id (remappable with Textual's keymaps) and is in the footer or in the `?` help
BINDINGS: list[BindingType] = [
    Binding("q", "quit", "Quit", id="quit", tooltip="Quit; asks first while the command runs"),
    Binding("question_mark,f1", "help", "Help", id="help", key_display="?", tooltip="Keys and columns"),
    Binding("ctrl+c", "quit", "Quit", id="quit_ctrl_c", show=False, priority=True, tooltip="As q"),
    Binding("f10", "quit", "Quit", id="quit_f10", show=False),
    Binding("p", "pause", "Pause", id="pause", tooltip="Freeze the display; sampling goes on"),
    Binding("s,f6", "sort", "Sort", id="sort", tooltip="Cycle the sort column"),
    Binding("r", "reverse", "Reverse", id="reverse", show=False, tooltip="Reverse the sort order"),
    Binding("t,f5", "tree", "Tree/flat", id="tree", tooltip="Indented tree or flat list"),
    Binding("slash,f4", "filter", "Filter", id="filter", key_display="/", tooltip="Show only matching processes"),
    Binding("k,f9", "signal", "Signal", id="signal", tooltip="Send a signal to the selected process or its subtree"),
    Binding("enter", "details", "Details", id="details", key_display="⏎", tooltip="The selected process in full"),
    Binding("o", "zoom_output", "Output", id="zoom_output", tooltip="Enlarge the output pane (again: back)"),
    Binding("f,f3", "find", "Find", id="find", tooltip="Find in the output"),
    Binding("n", "match(1)", "Next match", id="next_match", show=False, tooltip="The next match of the find, below"),
    Binding("N", "match(-1)", "Previous match", id="previous_match", show=False, tooltip="The match above"),
    Binding("tab", "focus_next_pane", "Pane", id="next_pane", show=False, tooltip="Table or output"),
    Binding("escape", "escape", "Close", id="escape", show=False, tooltip="Close the filter or search"),
    Binding("h", "history", "History", id="history", tooltip="Saved sessions"),
    Binding("b", "blocks", "Blocks", id="blocks", show=False, tooltip="The code blocks table (again: hidden)"),
    Binding("ctrl+z", "suspend_process", "Suspend", id="suspend", show=False, tooltip="Back to the shell (fg)"),
]

OWN_ACTIONS = {b.action for b in BINDINGS if isinstance(b, Binding)}
EVERYWHERE = {"quit", "suspend_process"}


class ViewKeys(RunControl):
    """What the view shows and how; LiveApp sets the attributes and draws."""

    BINDINGS: ClassVar[list[BindingType]] = BINDINGS

    paused: reactive[bool] = reactive(False)
    """Display frozen; samples keep arriving and the run summary keeps counting."""
    tree_view: reactive[bool] = reactive(True)
    """Indented process tree (True) or a flat list sorted by the sort column."""
    sort_key: reactive[str] = reactive("pid")
    """Column the rows (siblings, in the tree view) are ordered by."""
    sort_reverse: reactive[bool] = reactive(False)
    """The sort column's order reversed (r, or a second click on its label)."""
    row_filter: reactive[str] = reactive("")
    """Only processes whose PID or command line holds this text (case-insensitive); empty: all."""

    history: SampleHistory
    exited: ExitedRows
    store_dir: object
    _columns: list[str]
    _held_output: list[str]
    _paused_latest: Sample | None
    _prompt_mode: str  # "filter" or "find" while the prompt is open
    blocks_pane: BlocksPane
    open_blocks: OpenBlocks
    _paused_blocks: str
    view_size: tuple[int, int]
    final: ResourceUsage | None
    _bound_seen: bool
    _table_title = ""

    # drawn by LiveApp
    @property
    def narrow(self) -> bool:
        raise NotImplementedError

    def _redraw(self) -> None:
        raise NotImplementedError

    def _update_table(self, s: Sample | None) -> None:
        raise NotImplementedError

    def _label_sort_column(self) -> None:
        raise NotImplementedError

    def _apply_width(self, width: int, height: int | None = None) -> None:
        raise NotImplementedError

    def _process(self, pid: int | None) -> ProcessSample | None:
        raise NotImplementedError

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The live view's keys act only while the live view is on show: under the history screen or a dialog,
        `k` must not open a signal dialog for a row out of sight (and the footer lists only that screen's keys).
        Quitting (Ctrl-C, which asks first) and suspending stay everywhere."""
        if action in EVERYWHERE or action not in OWN_ACTIONS:
            return True
        return self.screen is self.screen_stack[0] if self.screen_stack else True

    # ------------------------------------------------------------------ reactives

    def watch_paused(self, paused: bool) -> None:
        if not paused:
            if self._paused_latest is not None:
                self.latest, self._paused_latest = self._paused_latest, None
            if self._held_output:
                self.query_one("#output", OutputPane).write("".join(self._held_output))
                self._held_output.clear()
            self._redraw()
        else:
            self._paused_blocks = self.open_blocks.text()  # the header's block name freezes with the table
            self._draw_header()

    def _rows_changed(self) -> None:
        """Sort, tree, filter: redrawn at once, paused or not (paused, from the frozen sample)."""
        if not self._columns:  # not laid out yet
            return
        self._label_sort_column()
        if self.latest is not None:
            self._update_table(self.latest)

    def watch_tree_view(self) -> None:
        self._rows_changed()

    def watch_sort_key(self) -> None:
        self._rows_changed()

    def watch_sort_reverse(self) -> None:
        self._rows_changed()

    def watch_row_filter(self) -> None:
        self._rows_changed()  # the table's title follows with its rows (`show_table_title`)

    def show_table_title(self, any_row: bool = True) -> None:
        """What the process table shows: the ≥ legend once a row showed one, the peaks once the run is over, and
        the filter with whether anything matched (the next sample used to put "processes" back over it)."""
        if self.final is not None:
            title = "processes: peaks over the run"
        else:
            title = f"processes · {BOUND_LEGEND}" if self._bound_seen else "processes"
        if self.row_filter:
            title = f"{title.split(' · ')[0]} matching “{self.row_filter}”" + ("" if any_row else ": none")
        if title != self._table_title:  # setting it repaints the whole table, even unchanged
            self._table_title = title
            self.query_one("#procs", ProcessTable).border_title = plain(title)

    def keep_row(self, p: ProcessSample) -> bool:
        f = self.row_filter.lower()
        return not f or f in str(p.pid) or f in short_command(p).lower() or f in " ".join(p.cmdline).lower()

    # ------------------------------------------------------------------ actions

    def action_pause(self) -> None:
        self.paused = not self.paused

    def action_sort(self) -> None:
        self.sort_reverse = False
        self.sort_key = SORTS[(SORTS.index(self.sort_key) + 1) % len(SORTS)]
        self.notify(f"sorted by {SORT_LABEL[self.sort_key]}", timeout=1.5)

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse

    def on_process_table_header_selected(self, event: ProcessTable.HeaderSelected) -> None:
        if event.column not in SORTS:
            return
        if event.column == self.sort_key:  # a second click: the other order
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_reverse = False
            self.sort_key = event.column

    def action_tree(self) -> None:
        self.tree_view = not self.tree_view

    def action_details(self) -> None:
        pid = self.selected_pid()
        p = self._process(pid)
        if pid is None or p is None:
            self.notify("select a process first", severity="warning")
            return
        gpus = self.latest.gpus if self.latest is not None else []
        text = detail_text(p, self.history.processes.get(pid), gpus, self.exited.label(pid))
        self.push_screen(ProcessDetailScreen(text))

    def action_zoom_output(self) -> None:
        zoomed = not self.has_class("output-zoom")
        self.set_class(zoomed, "output-zoom")
        self._apply_width(*self.size)
        self.query_one("#output" if zoomed else "#procs").focus()

    def action_focus_next_pane(self) -> None:
        table = self.query_one("#procs", ProcessTable)
        (self.query_one("#output", OutputPane) if table.has_focus else table).focus()

    # ------------------------------------------------------------------ the prompt: filter and find

    def action_filter(self) -> None:
        self._open_prompt("filter", "filter processes: PID or command (enter: keep, esc: clear)", self.row_filter)

    def action_find(self) -> None:
        term = self.query_one("#output", OutputPane).term
        self._open_prompt("find", "find in the output (enter: keep, esc: clear)", term)

    def _open_prompt(self, mode: str, placeholder: str, value: str) -> None:
        self._prompt_mode = mode
        prompt = self.query_one("#prompt", Input)
        prompt.placeholder = placeholder
        prompt.value = value
        prompt.display = True
        prompt.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "prompt" or not event.input.display:
            return
        if self._prompt_mode == "filter":
            self.row_filter = event.value
        else:
            self._find(event.value)

    def _find(self, term: str) -> None:
        output = self.query_one("#output", OutputPane)
        output.search(term)
        self._show_match(output)

    def _show_match(self, output: OutputPane) -> None:
        term = output.term
        where, lines = output.match_number()
        n = output.count(term)
        found = f"“{term}”: {n} found, line {where} of {lines} (n/N: next/previous)"
        output.border_subtitle = plain(found if term and where else (f"“{term}”: not found" if term else None))

    def action_match(self, step: int) -> None:
        """n / N: the next match below / above the last one (wrapping around)."""
        output = self.query_one("#output", OutputPane)
        if not output.term:
            self.notify("nothing to find yet: f", timeout=2, markup=False)
            return
        output.next_match(step)
        self._show_match(output)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "prompt":
            event.input.display = False
            self.query_one("#procs" if self._prompt_mode == "filter" else "#output").focus()

    def action_escape(self) -> None:
        prompt = self.query_one("#prompt", Input)
        mode = self._prompt_mode
        prompt.display = False
        if mode == "filter" or (not prompt.has_focus and self.row_filter):
            self.row_filter = ""
        if mode == "find":
            self._find("")
        self._prompt_mode = ""
        self.query_one("#procs").focus()

    def action_history(self) -> None:
        try:
            from gputop_tracker.tui.history.screen import HistoryScreen
        except ImportError:
            self.notify("history not available", severity="warning")
            return
        from pathlib import Path

        store = self.store_dir
        if not isinstance(store, Path):
            self.notify("history not available: no session store", severity="warning")
            return
        self.push_screen(HistoryScreen(store))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_suspend_process(self) -> None:
        """Ctrl-Z: the view stops (the sampler, a process of its own, samples on); after `fg` the whole screen
        is drawn again, not only what changed meanwhile: the shell wrote over it."""
        super().action_suspend_process()  # returns once continued
        self.call_after_refresh(self.screen.refresh, repaint=True, layout=True)

    # ------------------------------------------------------------------ code blocks (b)

    def _draw_blocks(self) -> None:
        """The blocks table: the whole width under the processes and panels from LARGE up, else in the process
        table's place while b is on."""
        pane, size = self.blocks_pane, self.view_size
        shown = pane.shown(size)
        split = shown and pane.large(size)
        self.set_class(shown and not split, "blocks-only")
        self.set_class(split, "blocks-split")
        if not shown:
            return
        table = self.query_one("#blocks-wide" if split else "#blocks", ProcessTable)
        now = self.latest.time if self.latest else None  # the age of open runs: by the samples' clock
        pane.draw(table, size[0] - (0 if split or self.narrow else side_width(size[0])), now)
        if split:  # at most MAX_ROWS rows (the rest scroll): the processes and side panels keep their room
            table.styles.height = min(table.row_count, MAX_ROWS) + 3

    def action_blocks(self) -> None:
        shown = self.blocks_pane.toggle(self.view_size)
        self._draw_blocks()
        self._draw_header()
        self.query_one("#blocks" if shown and not self.blocks_pane.large(self.view_size) else "#procs").focus()
