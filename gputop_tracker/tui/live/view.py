"""What the live view's parts (its keys, its run control) see of it: Textual's App, the run's state as the App
keeps it, and a few drawing calls. The parts hold their own state (a prompt, tags, the quit choice) and reach the
App only through this face: never its private members, and no import of the App itself (it imports them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from textual.app import App
from textual.reactive import reactive

from gputop_tracker.core.model import Failed, ProcessSample, ResourceUsage, Sample
from gputop_tracker.core.sampling import channel
from gputop_tracker.core.summary import SampleHistory
from gputop_tracker.tui.live.alerts import AlertLog
from gputop_tracker.tui.live.blocks import BlocksPane
from gputop_tracker.tui.live.process_info import ExitedRows


class DataSource(Protocol):
    """What the live view reads: the sampler's messages, the command's output, and two controls."""

    # optional: `hold`, seconds > 0 where the source hands samples over at most that often (each is then drawn
    # at once: the source spaces the draws); without it the view spaces them itself
    def messages(self) -> Iterator[channel.Message]: ...
    def output(self) -> Iterator[str]: ...
    def signal(self, sig: int) -> None: ...
    def stop_tree(self, sig: int) -> bool: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


class LiveView(App[int]):
    """The live view as its parts see it (`LiveApp` is the one there is)."""

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

    # the run, as the App keeps it from the sampler's messages
    source: DataSource
    mode: str  # launch or attach
    store_dir: Path | None
    main_pid: int | None
    latest: Sample | None  # the newest sample drawn (paused: the one frozen on screen)
    final: ResourceUsage | None  # the final report, once the run ended
    failure: Failed | None
    ended: bool  # the source has no more messages
    history: SampleHistory
    exited: ExitedRows
    blocks_pane: BlocksPane
    alerts: AlertLog
    bound_seen: bool  # a row showed a ≥ lower bound
    view_size: tuple[int, int]  # the terminal's size as last laid out

    @property
    def narrow(self) -> bool:
        raise NotImplementedError

    def draw_header(self) -> None:
        """The header's two lines again (status, alerts, blocks)."""
        raise NotImplementedError

    def redraw(self) -> None:
        """Everything again, from the newest sample."""
        raise NotImplementedError

    def relayout(self, size: tuple[int, int] | None = None) -> None:
        """The heights and the table's columns fitted again (to `size`, else the size last laid out)."""
        raise NotImplementedError

    def refresh_rows(self) -> None:
        """The process rows again: sort, tree, filter or tags changed (paused: from the frozen sample)."""
        raise NotImplementedError

    def process(self, pid: int | None) -> ProcessSample | None:
        """The process `pid` as last sampled (or just exited), None if not in the tree."""
        raise NotImplementedError

    def selected_pid(self) -> int | None:
        raise NotImplementedError

    def shown_command(self) -> list[str]:
        raise NotImplementedError

    def running_summary(self) -> tuple[str, ResourceUsage] | None:
        raise NotImplementedError

    def tagged_pids(self) -> list[int]:
        """The processes tagged with Space, in the table's order."""
        raise NotImplementedError

    def untag(self) -> None:
        raise NotImplementedError
