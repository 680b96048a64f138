"""The live view's code blocks: the block(s) running now in the header, from the streamed block events, and
the blocks table (key b) from the sampler's `blocks` messages.

The sampler sends `block_start` / `block_end` events for the first runs of each block (bounded): a block
that runs for a while (a phase, an epoch) shows; a step called a million times shows while its runs have
events, then no more. Innermost last, per process.
"""

from __future__ import annotations

from gputop_tracker.core.model import Event, LiveBlock, LiveBlocks, ResourceUsage, escape_controls, human_bytes
from gputop_tracker.tui.live.process_rows import name_width
from gputop_tracker.tui.widgets.panels import clock, set_border
from gputop_tracker.tui.widgets.proctable import Cell, Column, ProcessTable

MAX_SHOWN = 3  # blocks named in the header; more are counted
MAX_ROWS = 6  # rows of the blocks table under the processes; more scroll (a block name per epoch took 16 rows)
CURRENT_STYLE = "bold reverse"  # the block running now (the open one that started last)


class OpenBlocks:
    def __init__(self) -> None:
        self.running: list[tuple[int, str]] = []  # (pid, name), in order of start

    def feed(self, e: Event) -> bool:
        """Take a block event (True: the header changed); any other event: False."""
        if e.type == "block_start":
            self.running.append((e.pid or 0, e.name or "?"))
            return True
        if e.type == "block_end":
            key = (e.pid or 0, e.name or "?")
            for i in range(len(self.running) - 1, -1, -1):  # the innermost run of that name ends first
                if self.running[i] == key:
                    del self.running[i]
                    return True
        return False

    def text(self) -> str:
        """ "block load data ▸ train step" (the latest MAX_SHOWN), or "" when none runs."""
        if not self.running:
            return ""
        names = [escape_controls(name[:30]) for _pid, name in self.running[-MAX_SHOWN:]]
        more = len(self.running) - len(names)
        return "block " + (f"(+{more}) " if more else "") + " ▸ ".join(names)


# --------------------------------------------------------------------------- the blocks table (key b)

# key, label, width, right-aligned; keys apart from the process table's (its sort keys)
BLOCK_COLUMNS: list[Column] = [
    ("b_name", "block", 0, False),
    ("b_calls", "calls", 5, True),
    ("b_open", "open", 9, True),
    ("b_total", "total", 8, True),
    ("b_mean", "mean", 8, True),
    ("b_peak", "peak RAM", 9, True),
    ("b_private", "private", 9, True),
    ("b_tree", "tree RAM", 9, True),
    ("b_cpu", "CPU s", 7, True),
    ("b_gpu", "GPU RAM", 9, True),
    ("b_marks", "marks", 5, True),
]
BLOCK_DROP = ("b_gpu", "b_private", "b_mean", "b_tree")  # least useful first, until the names have room
MIN_BLOCK_NAME = 14
LARGE = (150, 45)  # from this size the table sits under the process table, shown once the run has blocks


def block_columns(table_width: int) -> list[Column]:
    """The columns that fit, the name column given the room left."""
    cols = list(BLOCK_COLUMNS)

    def room(cols: list[Column]) -> int:
        return name_width(table_width, [("name" if c[0] == "b_name" else c[0], *c[1:]) for c in cols])

    for drop in BLOCK_DROP:
        if room(cols) >= MIN_BLOCK_NAME:
            break
        cols = [c for c in cols if c[0] != drop]
    width = max(MIN_BLOCK_NAME // 2, room(cols))
    return [(k, label, width if k == "b_name" else w, right) for k, label, w, right in cols]


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.1f} ms"
    if s < 60:
        return f"{s:.2f} s"
    return _minutes(s)


def _minutes(s: float) -> str:
    """1:05 under an hour, 1:02:03 from one."""
    return f"{int(s) // 60}:{int(s) % 60:02d}" if s < 3600 else clock(s)


def _age(s: float) -> str:
    return f"{s:.0f}s" if s < 59.5 else _minutes(s)


def _open(b: LiveBlock, now: float | None) -> Cell:
    if not b.open:
        return ("", "")
    age = f" {_age(max(now - b.open_since, 0.0))}" if now is not None and b.open_since is not None else ""
    return (("yes" if b.open == 1 else f"×{b.open}") + age, "bold blue")


def current_block(blocks: list[LiveBlock]) -> str | None:
    """The block running now: of the open ones, the one that started last (the innermost)."""
    open_ = [b for b in blocks if b.open]
    return max(open_, key=lambda b: b.open_since or 0.0).name if open_ else None


def block_cells(b: LiveBlock, cols: list[str], now: float | None, current: bool = False) -> tuple[Cell, ...]:
    values: dict[str, Cell] = {
        "b_name": (escape_controls(b.name), CURRENT_STYLE if current else "bold" if b.open else ""),
        "b_calls": (str(b.calls), ""),
        "b_open": _open(b, now),
        "b_total": (_duration(b.duration_total) if b.calls else "-", ""),
        "b_mean": (_duration(b.duration_mean), ""),
        "b_peak": (human_bytes(b.peak_ram), ""),
        "b_private": (human_bytes(b.peak_private), ""),
        "b_tree": (human_bytes(b.tree_peak_ram), ""),
        "b_cpu": (f"{b.cpu_seconds:.2f}" if b.calls else "-", ""),
        "b_gpu": (human_bytes(b.peak_gpu_ram), ""),
        "b_marks": (str(b.marks) if b.marks else "", ""),
    }
    return tuple(values[c] for c in cols)


class BlocksPane:
    """The live view's blocks table: the latest `LiveBlocks`, whether it shows (key b), and its rows.

    Where: from LARGE up, the whole width under the process table and the panels (shown by itself once the
    run has blocks); below it, in place of the process table while b is on. Rows are keyed by name (an int
    per name), diffed by the table.
    """

    def __init__(self) -> None:
        self.latest: LiveBlocks | None = None
        self.choice: bool | None = None  # b: shown / hidden; None: as the size decides
        self.keys: dict[str, int] = {}
        self.widths: dict[str | None, int] = {}  # table id -> the width its columns were fitted to

    def finished(self, usage: ResourceUsage) -> None:
        """The run ended: the final report's blocks (the last table may predate the last runs' ends)."""
        if not usage.blocks:
            return
        marks = sum(1 for e in usage.events if e.type == "mark") if usage.events else 0
        rows = [
            LiveBlock(
                name=b.name,
                calls=b.calls,
                duration_total=b.duration.total,
                duration_mean=b.duration.mean,
                peak_ram=int(b.peak_ram),
                peak_private=None if b.peak_private is None else int(b.peak_private),
                peak_gpu_ram=None if b.peak_gpu_ram is None else int(b.peak_gpu_ram),
                tree_peak_ram=None if b.tree_peak_ram is None else int(b.tree_peak_ram),
                cpu_seconds=b.cpu_seconds,
                marks=b.marks,
            )
            for b in usage.blocks
        ]
        names = max(len(rows), self.latest.names if self.latest is not None else 0)
        marks = max(marks, self.latest.marks if self.latest is not None else 0)
        self.latest = LiveBlocks(blocks=rows, names=names, marks=marks, open_runs=0)

    def shown(self, size: tuple[int, int]) -> bool:
        if self.choice is not None:
            return self.choice
        return self.large(size) and self.latest is not None and bool(self.latest.blocks)

    @staticmethod
    def large(size: tuple[int, int]) -> bool:
        return size[0] >= LARGE[0] and size[1] >= LARGE[1]

    def toggle(self, size: tuple[int, int]) -> bool:
        self.choice = not self.shown(size)
        return self.choice

    def draw(self, table: ProcessTable, table_width: int, now: float | None) -> None:
        if self.widths.get(table.id) != table_width:
            self.widths[table.id] = table_width
            table.set_columns(block_columns(table_width))
        cols = table.columns
        blocks = self.latest.blocks if self.latest is not None else []
        current = current_block(blocks)
        rows = [(self._key(b.name), block_cells(b, cols, now, b.name == current)) for b in blocks]
        table.update_rows(rows)
        set_border(table, "code blocks", self.subtitle())
        if current is not None and not table.has_focus:  # the running block in view (unless the user scrolls)
            table.call_after_refresh(table.scroll_to_row, self._key(current))  # once laid out at its new height

    def _key(self, name: str) -> int:
        key = self.keys.get(name)
        if key is None:
            key = self.keys[name] = len(self.keys) + 1
        return key

    def subtitle(self) -> str:
        lb = self.latest
        if lb is None or not lb.blocks:
            return "none yet: with block(…), @tracked, mark(…) in the program"
        parts = [f"{lb.names} blocks", f"{lb.open_runs} open", f"{lb.marks} marks"]
        if lb.names > len(lb.blocks):
            parts.append(f"the {len(lb.blocks)} latest shown")
        return " · ".join(parts) + " · open runs: sampled so far"
