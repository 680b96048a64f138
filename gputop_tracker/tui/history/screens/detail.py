"""One saved session in full: charts over time, the text report, the processes, the output, the blocks."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, ScrollableContainer, VerticalScroll
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from gputop_tracker.core.model import clean_output, human_bytes
from gputop_tracker.core.report import (
    load_full,
    percent_or_dash,
)
from gputop_tracker.core.report import render as report
from gputop_tracker.core.store import sessions as store
from gputop_tracker.tui.history.parts import TitleLine, headline
from gputop_tracker.tui.history.screens.base import HistoryScreenBase
from gputop_tracker.tui.history.screens.export import ask_export
from gputop_tracker.tui.live.output_pane import OutputPane
from gputop_tracker.tui.widgets.charts import session_charts
from gputop_tracker.tui.widgets.job_panel import job_headline


class SessionDetailScreen(HistoryScreenBase):
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
                        Text(
                            "\n".join(report.blocks_text(session.summary.blocks, len(session.summary.gpus))),
                            no_wrap=True,
                        ),
                        id="blocks-text",
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
        ask_export(self, self.entry)


OUTPUT_TAIL = 256_000  # bytes of a saved output log the Output tab shows
