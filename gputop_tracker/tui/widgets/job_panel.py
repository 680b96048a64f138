"""How much of the job's request the run uses, like jobstats' "Overall Utilization": a panel of
the live view, updated from the sampler's running summary, and a line of the history's session detail.

Drawn only when the report has a request (a SLURM job's, or `--request`); the figures are the report's own
`efficiency` fractions (`core.efficiency`), so the view and the saved report always agree.
"""

from __future__ import annotations

from rich.text import Text

from gputop_tracker.core.model import ResourceUsage, SlurmJob
from gputop_tracker.tui.widgets.panels import Panel, bar, clock, set_border, short_bytes

LABEL = 9  # "GPU util " and friends
SHORT = {"memory": "mem", "GPU mem": "GPU", "GPU util": "util"}  # the one-line form under 100 columns


def job_name(j: SlurmJob) -> str | None:
    """The job as squeue and sacct name it: an array task is 77_3 (its own job id means nothing to the user)."""
    return f"{j.array_job_id}_{j.array_task_id}" if j.array_job_id and j.array_task_id else j.job_id


def job_title(u: ResourceUsage) -> str:
    """'job 4242 on n01', 'job 77_3 on n01 (node 2 of 4)' or 'request (--request)'."""
    j = u.slurm
    if j is None or j.job_id is None:
        return "request (--request)"
    name = job_name(j)
    where = f" on {j.node}" if j.node else ""
    if j.num_nodes and j.num_nodes > 1:
        where += f" (node {(j.node_id or 0) + 1} of {j.num_nodes})"
    return f"job {name}{where}"


def rows(u: ResourceUsage) -> list[tuple[str, float, str]]:
    """(label, fraction, what it is of) for each known fraction of the request, in jobstats' order."""
    e, j = u.efficiency, u.slurm
    if e is None or j is None:
        return []
    r = j.requested
    wall = u.compute_time.time
    limit = r.cgroup_mem_bytes if e.memory_basis == "cgroup" else r.mem_bytes
    of_mem = f"{short_bytes(u.max_ram.combined.total_rss)}/{short_bytes(limit)}"
    n_gpus = len(r.gpu_uuids or []) or r.gpus or sum(g.counted for g in u.gpus)
    of_gpus = f"of {n_gpus} GPU{'s' if n_gpus != 1 else ''}"
    out = [
        ("memory", e.memory, of_mem),
        ("CPU", e.cpu, f"of {r.cpus} CPU{'s' if r.cpus != 1 else ''}"),
        ("time", e.time, f"{clock(wall)}/{clock(r.time_limit_s or 0)}"),
        ("GPU mem", e.gpu_memory, f"{short_bytes(u.max_gpu_ram.combined)} {of_gpus}"),
        ("GPU util", e.gpu_utilization, f"mean {of_gpus}"),
    ]
    return [(label, f, what) for label, f, what in out if f is not None]


def requested_text(u: ResourceUsage) -> str:
    """What was asked: 'mem 16 GB, 8 CPUs, 2 GPUs, time 2h 0m'."""
    if u.slurm is None:
        return ""
    r = u.slurm.requested
    asked = [
        f"mem {short_bytes(r.mem_bytes)}" if r.mem_bytes else "",
        f"{r.cpus} CPUs" if r.cpus else "",
        f"{r.gpus} GPU{'s' if r.gpus > 1 else ''}" if r.gpus else "",
        f"time {clock(r.time_limit_s)}" if r.time_limit_s else "",
        f"cgroup {short_bytes(r.cgroup_mem_bytes)}" if r.cgroup_mem_bytes else "",
    ]
    return ", ".join(a for a in asked if a) or "nothing known"


def _pct(f: float) -> str:
    return f"{f:.0%}" if f < 10 else ">999%"


class JobPanel(Panel):
    """The live view's job panel: hidden until the running summary carries a request."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.display = False

    def show(self, u: ResourceUsage | None, compact: bool, width: int) -> None:
        if u is None or u.slurm is None:
            if self.display:
                self.display = False
            return
        if not self.display:
            self.display = True
        shown = rows(u)
        if compact:
            self.update(_one_line(u, shown, width))
            return
        basis = u.efficiency.memory_basis if u.efficiency is not None else None
        of = "of the request; memory: cgroup limit" if basis == "cgroup" else "of the request"
        set_border(self, job_title(u), of)
        figure = min(max((len(what) for _l, _f, what in shown), default=0), max(width - LABEL - 7 - 4, 1))
        bw = max(4, width - LABEL - 7 - figure)
        lines: list[str | Text | tuple[str, str]] = []
        for label, f, what in shown:
            what = what if len(what) <= figure else what[: figure - 1] + "…"  # never wrap: figures give way
            lines += ["\n" if lines else "", (f"{label:<{LABEL}}", "bold"), bar(f, bw), f" {_pct(f):>5} ", what]
        self.update(Text.assemble(*lines) if lines else Text(f"asked {requested_text(u)}", style="dim"))


def _one_line(u: ResourceUsage, shown: list[tuple[str, float, str]], width: int) -> Text:
    """Under 100 columns: one line, the bars shortened (then dropped) until it fits."""
    j = u.slurm
    title = f"job {job_name(j)}" if j is not None and j.job_id else "request"
    for bw in (4, 3, 2, 0):
        parts: list[str | Text | tuple[str, str]] = [(title, "bold")]
        for label, f, _what in shown:
            parts += [f"  {SHORT.get(label, label)} ", bar(f, bw) if bw else "", f"{' ' if bw else ''}{_pct(f)}"]
        line = Text.assemble(*parts)
        if line.cell_len <= width:
            return line
    line.truncate(max(width, 10), overflow="ellipsis")
    return line


def job_headline(u: ResourceUsage | None) -> Text | None:
    """The history detail's line under the headline: the job and each fraction of its request used."""
    if u is None or u.slurm is None:
        return None
    t = Text()
    t.append(job_title(u), style="bold")
    t.append(f" · asked {requested_text(u)}", style="dim")
    shown = rows(u)
    if shown:
        t.append(" · used ", style="dim")
    for k, (label, f, _what) in enumerate(shown):
        style = "bold red" if f > 0.9 else "bold yellow" if f < 0.25 else "bold"
        t.append(("" if k == 0 else ", ") + f"{label} ")
        t.append(_pct(f), style=style)
    if u.efficiency is not None and u.efficiency.memory_basis == "cgroup":
        t.append(" (memory of the cgroup's limit)", style="dim")
    return t
