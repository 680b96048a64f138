"""The live view's keys that change what is shown: pause, sort (and reverse), tree/flat, filter the processes,
find in the output, zoom the output, details, help, history, alerts, tags. A part the live view owns
(`LiveApp.view_keys`): it holds its own state (the prompt, the tags) and sees the view through `view.LiveView`
(the reactives `paused`, `sort_key`, ..., the run's state, a few drawing calls); the view holds the bindings and
hands each key to this part."""

from __future__ import annotations

from textual.actions import SkipAction
from textual.binding import Binding, BindingType
from textual.widgets import Input

from gputop_tracker.core.model import ProcessSample
from gputop_tracker.tui.live.blocks import MAX_ROWS
from gputop_tracker.tui.live.help_text import HELP
from gputop_tracker.tui.live.output_pane import OutputPane
from gputop_tracker.tui.live.process_info import detail_text
from gputop_tracker.tui.live.process_rows import BOUND_LEGEND, SORT_LABEL, SORTS, short_command
from gputop_tracker.tui.live.screens.alerts_dialog import AlertsScreen
from gputop_tracker.tui.live.screens.process_detail import ProcessDetailScreen
from gputop_tracker.tui.live.view import LiveView
from gputop_tracker.tui.screens.help import HelpScreen
from gputop_tracker.tui.widgets.panels import plain, set_border_text, side_width
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
    Binding("P", "sort_by('cpu')", "Sort CPU", id="sort_cpu", show=False, tooltip="Sort by CPU % (htop's P)"),
    Binding("M", "sort_by('mem')", "Sort MEM", id="sort_mem", show=False, tooltip="Sort by memory (htop's M)"),
    Binding("T", "sort_by('time')", "Sort TIME", id="sort_time", show=False, tooltip="Sort by CPU time (htop's T)"),
    Binding("space", "tag", "Tag", id="tag", show=False, tooltip="Tag the selected process (k signals the tagged)"),
    Binding("t,f5", "tree", "Tree/flat", id="tree", tooltip="Indented tree or flat list"),
    Binding("slash,f4", "filter", "Filter", id="filter", key_display="/", tooltip="Show only matching processes"),
    Binding("k,f9", "signal", "Signal", id="signal", tooltip="Send a signal to the selected process or its subtree"),
    Binding("enter", "details", "Details", id="details", key_display="⏎", tooltip="The selected process in full"),
    Binding("o", "zoom_output", "Output", id="zoom_output", tooltip="Enlarge the output pane (again: back)"),
    Binding("f,f3", "find", "Find", id="find", tooltip="Find in the output"),
    Binding("n", "match(1)", "Next match", id="next_match", show=False, tooltip="The next match of the find, below"),
    Binding("N", "match(-1)", "Previous match", id="previous_match", show=False, tooltip="The match above"),
    Binding(
        "tab", "focus_next_pane", "Pane", id="next_pane", show=False, priority=True, tooltip="Table, blocks or output"
    ),
    Binding("escape", "escape", "Close", id="escape", show=False, tooltip="Close the filter or search"),
    Binding("h", "history", "History", id="history", tooltip="Saved sessions"),
    Binding("a", "alerts", "Alerts", id="alerts", tooltip="Every alert of the run (the header names the latest)"),
    Binding("b", "blocks", "Blocks", id="blocks", show=False, tooltip="The code blocks table (again: hidden)"),
    Binding("ctrl+z", "suspend_process", "Suspend", id="suspend", show=False, tooltip="Back to the shell (fg)"),
]

OWN_ACTIONS = {b.action for b in BINDINGS if isinstance(b, Binding)}
EVERYWHERE = {"quit", "suspend_process"}


class ViewKeys:
    """What the view shows and how: the keys' logic; the view it belongs to holds the state and draws."""

    def __init__(self, app: LiveView) -> None:
        self.app = app
        self.prompt_mode = ""  # "filter" or "find" while the prompt is open
        self.tagged: set[int] = set()  # processes tagged with Space: k signals them (htop's way)
        self._split = False  # the blocks table is under the process table

    def allows(self, action: str) -> bool:
        """The live view's keys act only while the live view is on show: under the history screen or a dialog,
        `k` must not open a signal dialog for a row out of sight (and the footer lists only that screen's keys).
        Quitting (Ctrl-C, which asks first) and suspending stay everywhere."""
        app = self.app
        if action in EVERYWHERE or action not in OWN_ACTIONS:
            return True
        return app.screen is app.screen_stack[0] if app.screen_stack else True

    # ------------------------------------------------------------------ reactives

    def rows_changed(self) -> None:
        """Sort, tree, filter: redrawn at once, paused or not (paused, from the frozen sample)."""
        self.app.refresh_rows()

    def show_table_title(self, any_row: bool = True) -> None:
        """What the process table shows: the ≥ legend once a row showed one, the peaks once the run is over, and
        the filter with whether anything matched (the next sample used to put "processes" back over it)."""
        app = self.app
        if app.final is not None:
            title = "processes: peaks over the run"
        else:
            title = f"processes · {BOUND_LEGEND}" if app.bound_seen else "processes"
        if app.row_filter:
            title = f"{title.split(' · ')[0]} matching “{app.row_filter}”" + ("" if any_row else ": none")
        set_border_text(self.app.query_one("#procs", ProcessTable), "border_title", title)

    def keep_row(self, p: ProcessSample) -> bool:
        f = self.app.row_filter.lower()
        return not f or f in str(p.pid) or f in short_command(p).lower() or f in " ".join(p.cmdline).lower()

    # ------------------------------------------------------------------ actions

    def pause(self) -> None:
        self.app.paused = not self.app.paused

    def sort(self) -> None:
        app = self.app
        app.sort_reverse = False
        app.sort_key = SORTS[(SORTS.index(app.sort_key) + 1) % len(SORTS)]
        app.notify(f"sorted by {SORT_LABEL[app.sort_key]}", timeout=1.5)

    def sort_by(self, key: str) -> None:
        """P, M, T (htop's keys): sort by CPU %, memory, CPU time, largest first; again: the other way."""
        app = self.app
        if app.sort_key == key:
            app.sort_reverse = not app.sort_reverse
            return
        app.sort_reverse = False
        app.sort_key = key
        app.notify(f"sorted by {SORT_LABEL[key]}", timeout=1.5)

    def tag(self) -> None:
        """Space: tag the selected process (again: untag) and move to the next row, as htop does."""
        table = self.app.query_one("#procs", ProcessTable)
        pid = table.cursor_key
        if pid is None:
            return
        self.tagged ^= {pid}
        self.rows_changed()
        table.action_cursor(1)

    def untag(self) -> None:
        if self.tagged:
            self.tagged.clear()
            self.rows_changed()

    def keep_tags(self, alive: set[int]) -> None:
        self.tagged &= alive

    def tagged_in_order(self) -> list[int]:
        """The tagged processes in the table's order."""
        return [pid for pid in self.app.query_one("#procs", ProcessTable).ordered_keys if pid in self.tagged]

    def reverse(self) -> None:
        self.app.sort_reverse = not self.app.sort_reverse

    def header_selected(self, event: ProcessTable.HeaderSelected) -> None:
        if event.column not in SORT_LABEL:  # every figure's label sorts (MEM % too, which `s` skips: as RSS)
            return
        app = self.app
        if event.column == app.sort_key:  # a second click: the other order
            app.sort_reverse = not app.sort_reverse
        else:
            app.sort_reverse = False
            app.sort_key = event.column

    def tree(self) -> None:
        self.app.tree_view = not self.app.tree_view

    def details(self) -> None:
        app = self.app
        pid = app.selected_pid()
        p = app.process(pid)
        if pid is None or p is None:
            app.notify("select a process first", severity="warning")
            return
        gpus = app.latest.gpus if app.latest is not None else []
        text = detail_text(p, app.history.processes.get(pid), gpus, app.exited.label(pid))
        app.push_screen(ProcessDetailScreen(text))

    def zoom_output(self) -> None:
        app = self.app
        zoomed = not app.has_class("output-zoom")
        app.set_class(zoomed, "output-zoom")
        app.relayout(app.size)
        app.query_one("#output" if zoomed else "#procs").focus()

    def focus_next_pane(self) -> None:
        """Tab: the next pane on show (the process table or the blocks in its place, the blocks under it, the
        output), from the first press: Textual's own Tab went to the side panels' scroll first. In the prompt, Tab
        is the prompt's."""
        app = self.app
        if app.query_one("#prompt", Input).has_focus:
            raise SkipAction()
        panes = [w for w in app.query("#procs, #blocks, #blocks-wide, #output").results() if w.display]
        if not panes:
            raise SkipAction()
        here = next((i for i, w in enumerate(panes) if w.has_focus), -1)
        panes[(here + 1) % len(panes)].focus()

    # ------------------------------------------------------------------ the prompt: filter and find

    def filter(self) -> None:
        self._open_prompt("filter", "filter processes: PID or command (enter: keep, esc: clear)", self.app.row_filter)

    def find(self) -> None:
        term = self.app.query_one("#output", OutputPane).term
        self._open_prompt("find", "find in the output (enter: keep, esc: clear)", term)

    def _open_prompt(self, mode: str, placeholder: str, value: str) -> None:
        self.prompt_mode = mode
        prompt = self.app.query_one("#prompt", Input)
        prompt.placeholder = placeholder
        prompt.value = value
        prompt.display = True
        prompt.focus()

    def prompt_changed(self, event: Input.Changed) -> None:
        if event.input.id != "prompt" or not event.input.display:
            return
        if self.prompt_mode == "filter":
            self.app.row_filter = event.value
        else:
            self._find(event.value)

    def _find(self, term: str) -> None:
        output = self.app.query_one("#output", OutputPane)
        output.search(term)
        self._show_match(output)

    def _show_match(self, output: OutputPane) -> None:
        term = output.term
        where, lines = output.match_number()
        n = output.count(term)
        found = f"“{term}”: {n} found, line {where} of {lines} (n/N: next/previous)"
        output.border_subtitle = plain(found if term and where else (f"“{term}”: not found" if term else None))

    def match(self, step: int) -> None:
        """n / N: the next match below / above the last one (wrapping around)."""
        output = self.app.query_one("#output", OutputPane)
        if not output.term:
            self.app.notify("nothing to find yet: f", timeout=2, markup=False)
            return
        output.next_match(step)
        self._show_match(output)

    def prompt_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "prompt":
            event.input.display = False
            self.app.query_one("#procs" if self.prompt_mode == "filter" else "#output").focus()

    def escape(self) -> None:
        prompt = self.app.query_one("#prompt", Input)
        mode = self.prompt_mode
        prompt.display = False
        if mode == "filter" or (not prompt.has_focus and self.app.row_filter):
            self.app.row_filter = ""
        if mode == "find":
            self._find("")
        self.prompt_mode = ""
        self.app.query_one("#procs").focus()

    def history(self) -> None:
        try:
            from gputop_tracker.tui.history.screens.sessions import HistoryScreen
        except ImportError:
            self.app.notify("history not available", severity="warning")
            return
        from pathlib import Path

        store = self.app.store_dir
        if not isinstance(store, Path):
            self.app.notify("history not available: no session store", severity="warning")
            return
        self.app.push_screen(HistoryScreen(store, self.app.running_summary))

    def alerts(self) -> None:
        """The run's alerts, newest first; read, the header's word on the latest goes quiet."""
        app = self.app
        start = app.latest.time - app.latest.elapsed if app.latest is not None else None
        app.push_screen(AlertsScreen(app.alerts.lines(start)))
        app.alerts.read()
        app.draw_header()

    def help(self) -> None:
        self.app.push_screen(HelpScreen(HELP))

    # ------------------------------------------------------------------ code blocks (b)

    def draw_blocks(self) -> None:
        """The blocks table: the whole width under the processes and panels from LARGE up, else in the process
        table's place while b is on."""
        app = self.app
        pane, size = app.blocks_pane, app.view_size
        shown = pane.shown(size)
        split = shown and pane.large(size)
        app.set_class(shown and not split, "blocks-only")
        app.set_class(split, "blocks-split")
        if split != self._split:  # the blocks table under the processes takes the rows the output had spare
            self._split = split
            app.relayout()
        if not shown:
            return
        table = app.query_one("#blocks-wide" if split else "#blocks", ProcessTable)
        now = app.latest.time if app.latest else None  # the age of open runs: by the samples' clock
        pane.draw(table, size[0] - (0 if split or app.narrow else side_width(size[0])), now)
        if split:  # at most MAX_ROWS rows (the rest scroll): the processes and side panels keep their room
            table.styles.height = min(table.row_count, MAX_ROWS) + 3

    def blocks(self) -> None:
        app = self.app
        shown = app.blocks_pane.toggle(app.view_size)
        self.draw_blocks()
        app.draw_header()
        app.query_one("#blocks" if shown and not app.blocks_pane.large(app.view_size) else "#procs").focus()
