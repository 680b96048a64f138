"""Small parts of the live view kept out of its App: the lines it and the terminal after it both say, the
pacing of its draws, the header's command line, the run so far. No Textual import here: `run` imports this module
before the view loads."""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from rich.text import Text

from gputop_tracker.core.model import ResourceUsage, Sample, escape_controls


def detached_text(pid: int | None, mode: str, output_path: object = None) -> str:
    """What detaching left behind: the process runs on, and (launched here) where its output goes now."""
    who = f"PID {pid}" if pid else "the command"
    if mode == "attach":
        return f"detached: {who} keeps running, untouched"
    out = f"its output goes on to {output_path}" if output_path else "its output goes to a deleted file (--no-save)"
    return f"detached: {who} keeps running; {out}"


def left_running(u: ResourceUsage | None) -> bool:
    """Tracking stopped while the command (or the attached process) ran on: detached. Attached, the sampler
    calls it "stopped" (the process was never ours to stop)."""
    return u is not None and (u.status == "detached" or (u.mode == "attach" and u.status == "stopped"))


@functools.lru_cache(maxsize=256)
def typed_command(argv: tuple[str, ...]) -> tuple[str, ...]:
    """A command line as the user would type it: a program found on PATH by its name alone (an attached
    process's command line starts with the interpreter's full path, `/usr/bin/python3 train.py`, where a
    launched one reads as typed, `python3 train.py`)."""
    if not argv or "/" not in argv[0]:
        return argv
    prog = argv[0]
    name = os.path.basename(prog)
    found = shutil.which(name)
    try:
        same = found is not None and os.path.samefile(found, prog)
    except OSError:
        same = False
    return (name if same else prog, *argv[1:])


def status_text(
    u: ResourceUsage | None, failed: str | None, ended: bool, source_error: str | None, quit_choice: str | None
) -> str:
    """The header's status: running, stopping…, exited with code N, detached (still running), …"""
    if failed is not None:
        return f"failed: {failed}"
    if u is not None:
        if left_running(u):
            return "detached (still running)"
        if u.mode == "attach":
            return "target exited" if u.status == "exited" else "tracking stopped"
        if u.exit_signal:
            return f"killed by signal {u.exit_signal} (exit code {u.exit_code})"
        return f"exited with code {u.exit_code}"
    if ended:
        return "sampler stopped unexpectedly" + (f": {source_error}" if source_error else "")
    return {"stop": "stopping…", "detach": "detaching…"}.get(quit_choice or "", "running")


ALERT_RANK = {"warning": 1, "gpu_lost": 1, "critical": 2, "oom": 3, "gpu_oom": 3}  # the alert types, mildest first

# The screen is redrawn from the newest sample at most this often, htop's default (nvitop: 2 s): at the default
# 0.5 s interval three samples are drawn as one (the charts and the summary keep every one; the reader hands them
# over together, `SamplerSource.batches`), and the output that came meanwhile is drawn in the same screen update.
# Drawing each sample cost the view twice its CPU. Keys redraw at once.
DRAW_PERIOD = 1.5


def draw_period(interval: float) -> float:
    """Seconds at least between two draws of samples taken every `interval` s (0: each as it comes). Samples a
    second or more apart are each drawn: folding them would draw at uneven times, and costs no more than that."""
    return DRAW_PERIOD if interval < 1.0 else 0.0


class DrawPacer:
    """Draws the newest sample at most once a period (`draw_period` of the samples' interval): one that comes
    within it is drawn at its end (a timer of the app), folded with any that come meanwhile. Period 0: every
    sample at once."""

    def __init__(self, app: Any, interval: float, draw: Callable[[], None], *, paced: bool = False) -> None:
        self.app = app  # what sets the timer (Textual's App.set_timer)
        self.every = draw_period(interval)
        """The screen's period: what the output pane's draws follow."""
        # `paced`: the source hands samples over about once a period itself (`SamplerSource.batches`): each
        # hand-over is drawn at once, unless one came less than half a period ago (an alert, the start: what the
        # source hands over at once). Two clocks spacing the same draws by a whole period drift apart: a hand-over
        # a little early set a timer, and every draw after it came a second late.
        self.period = self.every / 2 if paced else self.every
        self.draw = draw
        self.last = -1e9  # monotonic time of the last draw
        self.timer: Any = None

    def sample_came(self) -> None:
        wait = self.last + self.period - time.monotonic()
        if wait <= 0.1 * self.period:
            if self.timer is not None:
                self.timer.stop()
            self._draw()
        elif self.timer is None:
            self.timer = self.app.set_timer(wait, self._draw)

    def _draw(self) -> None:
        self.timer = None
        self.last = time.monotonic()
        self.draw()


@functools.lru_cache(maxsize=8)
def command_line(command: tuple[str, ...], mode: str, main_pid: int | None, width: int) -> Text:
    """The header's first line: the command, cut to the width (kept: it changes only with the width)."""
    cmd = escape_controls(" ".join(typed_command(command) if mode == "attach" else command)) or "-"
    if mode == "attach":
        cmd = f"attached to {main_pid or '?'}" + (f": {cmd}" if cmd != "-" else "")
    line = Text.assemble(("▶ ", "bold"), (cmd, "bold"))
    line.truncate(max(width - 2, 10), overflow="ellipsis")
    return line


def run_so_far(u: ResourceUsage, s: Sample | None) -> ResourceUsage:
    """The sampler's running summary with the newest sample folded in. It comes at most once a second and a
    sample may come between two: a peak on screen must never read below a current figure beside it. The
    tree's RAM counts as the core counts it (Σ PSS, never below the largest process's RSS)."""
    if s is None:
        return u
    t = s.tree
    ram = u.max_ram.combined
    top = max([t.combined_total, *(p.rss for p in s.processes)])
    updates: dict[str, object] = {}
    if top > ram.total_rss or t.combined_private > ram.private_rss:
        ram = ram.model_copy(
            update={"total_rss": max(ram.total_rss, top), "private_rss": max(ram.private_rss, t.combined_private)}
        )
        updates["max_ram"] = u.max_ram.model_copy(update={"combined": ram})
    if t.gpu_memory > u.max_gpu_ram.combined:
        updates["max_gpu_ram"] = u.max_gpu_ram.model_copy(update={"combined": float(t.gpu_memory)})
    cpu = u.cpu_utilization.combined
    if t.cpu_percent > cpu.max_sum_percent:
        cpu = cpu.model_copy(update={"max_sum_percent": t.cpu_percent})
        updates["cpu_utilization"] = u.cpu_utilization.model_copy(update={"combined": cpu})
    if t.threads > u.peak_threads:
        updates["peak_threads"] = t.threads
    if t.n_processes > u.n_processes:
        updates["n_processes"] = t.n_processes
    util = {g.index: g.utilization_gpu for g in s.gpus if g.utilization_gpu is not None}
    if any(util.get(g.index, 0.0) > (g.max_utilization or 0.0) for g in u.gpus):
        updates["gpus"] = [
            g.model_copy(update={"max_utilization": max(g.max_utilization or 0.0, util.get(g.index, 0.0))})
            for g in u.gpus
        ]
    return u.model_copy(update=updates) if updates else u
