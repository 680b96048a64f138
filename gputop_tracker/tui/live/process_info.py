"""Telling processes apart in the live view: rows of processes that just exited (with how they ended) and
the detail pane of one process (Enter)."""

from __future__ import annotations

import shlex

from rich.text import Text

from gputop_tracker.core.model import Event, GpuSample, ProcessSample, Sample, escape_controls
from gputop_tracker.core.summary import ProcessMemo
from gputop_tracker.tui.live.process_rows import bound_bytes, process_state
from gputop_tracker.tui.widgets.panels import clock, short_bytes

BOUND_NOTE = "≥: lower bounds; its memory changed since smaps_rollup was last read (or never read yet)"
EXITED_ROWS = 5  # samples an exited process stays on screen, dimmed, with how it ended


def exit_label(e: Event) -> str:
    if e.signal:
        return f"sig {e.signal}"
    if e.exit_code is not None:
        return f"exit {e.exit_code}"
    return "exited"


class ExitedRows:
    """Processes that left the tree moments ago: their last row, how they ended, samples left on screen."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[ProcessSample, str, int]] = {}
        self._last: dict[int, ProcessSample] = {}

    def seen(self, s: Sample) -> None:
        """A new sample: remember each row; exited rows age by one sample."""
        self._last = {p.pid: p for p in s.processes}
        for pid, (p, label, left) in list(self.rows.items()):
            if left <= 1 or pid in self._last:
                del self.rows[pid]
            else:
                self.rows[pid] = (p, label, left - 1)

    def exited(self, e: Event) -> None:
        p = self._last.get(e.pid) if e.pid is not None else None
        if p is not None:
            self.rows[p.pid] = (p, exit_label(e), EXITED_ROWS)

    def ghosts(self, current: list[ProcessSample]) -> list[tuple[ProcessSample, str]]:
        pids = {p.pid for p in current}
        return [(p, label) for pid, (p, label, _left) in self.rows.items() if pid not in pids]

    def label(self, pid: int) -> str | None:
        row = self.rows.get(pid)
        return row[1] if row else None


def gpu_lines(p: ProcessSample, memo: ProcessMemo | None, gpus: list[GpuSample]) -> list[str]:
    index = {g.uuid: g.index for g in gpus}
    uuids = sorted({*p.gpu_memory, *(memo.peak_gpu if memo else {})}, key=lambda u: index.get(u, 99))
    lines = []
    for uuid in uuids:
        name = f"GPU {index[uuid]}" if uuid in index else uuid
        peak = memo.peak_gpu.get(uuid) if memo else None
        lines.append(f"  {name}: {short_bytes(p.gpu_memory.get(uuid, 0))} now, peak {short_bytes(peak)}")
    return lines


def detail_text(p: ProcessSample, memo: ProcessMemo | None, gpus: list[GpuSample], state: str | None) -> Text:
    """Everything the view knows of one process."""
    command = escape_controls(shlex.join(p.cmdline)) if p.cmdline else f"[{p.name}] (command line not readable)"
    figure = bound_bytes if p.mem_bound else short_bytes
    peak_private = memo.peak_private if memo else p.private
    rows = [
        ("PID", str(p.pid)),
        ("PPID", str(p.ppid)),
        ("name", p.name + ("  (the tracked command)" if p.role == "main" else "")),
        ("state", state or process_state(p) or "-"),
        ("first seen", f"at {clock(memo.first_seen)} of the run" if memo else "-"),
        (
            "CPU",
            f"{p.cpu_percent:.1f}% now, {p.cpu_seconds:.2f} CPU-seconds, peak {memo.peak_cpu_percent:.0f}%"
            if memo
            else f"{p.cpu_percent:.1f}% now, {p.cpu_seconds:.2f} CPU-seconds",
        ),
        ("RSS", f"{short_bytes(p.rss)} now, peak {short_bytes(max(p.peak_rss, memo.peak_rss if memo else 0))}"),
        ("private", f"{figure(p.private)} now, peak {short_bytes(peak_private)}"),
        ("shared", f"{figure(p.shared)} now" if p.pss >= 0 else "-"),
        ("threads", str(p.threads)),
    ]
    out = Text()
    for label, value in rows:
        out.append(f"{label:<11}", style="bold")
        out.append(value + "\n")
    if p.mem_bound:
        out.append(f"{'':<11}{BOUND_NOTE}\n", style="italic")
    out.append("GPU memory", style="bold")
    lines = gpu_lines(p, memo, gpus)
    out.append("\n" + "\n".join(lines) if lines else " none")
    out.append("\n\ncommand line\n", style="bold")
    out.append(command)
    return out
