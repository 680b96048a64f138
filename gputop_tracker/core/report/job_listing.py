"""The history list grouped by cluster job: the sessions of one SLURM job (the tasks of an array,
the nodes of a multi-node job) fold into one row with the job's figures — n sessions, the largest peaks,
the longest wall time, failures — and open to show each session under it.

Pure functions of `core.history.Row`s: the history screen draws what these return.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputop_tracker.core.report.listing import Row, sort_rows

GROUP_PREFIX = "job:"  # a group row's id: job:77 (no session id looks like it)


def _max(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def group_row(job: str, members: list[Row]) -> Row:
    """One row for a job's sessions: the earliest start, the longest duration, the largest peaks, the mean
    utilizations; exit 0 when every session exited 0, else how many failed."""
    first = min(members, key=lambda r: (r.start or 0, r.id))
    failed = [r for r in members if r.exit not in ("0", "running")]
    running = any(r.running for r in members)
    hosts = sorted({r.host for r in members})
    row = Row(f"{GROUP_PREFIX}{job}", first.entry, first.start, command=first.command, members=members, job=job)
    row.host = hosts[0] if len(hosts) == 1 else f"{len(hosts)} nodes"
    row.duration = _max(r.duration for r in members)
    row.peak_ram = _max(r.peak_ram for r in members)
    row.peak_gpu = _max(r.peak_gpu for r in members)
    row.cpu = _mean(r.cpu for r in members)
    row.gpu_util = _mean(r.gpu_util for r in members)
    row.running = running
    if running:
        row.exit, row.exit_rank = "running", -1
    elif failed:
        row.exit, row.exit_rank = f"{len(failed)} fail", 1000 + len(failed)
    else:
        row.exit, row.exit_rank = "0", 0
    return row


def is_group(row: Row) -> bool:
    return row.members is not None


def grouped(rows: Iterable[Row], key: str, reverse: bool, expanded: set[str], enabled: bool = True) -> list[Row]:
    """The list with each job of two or more sessions as one group row, sorted by column `key` (group rows
    by the job's figures); the sessions of an `expanded` job (by job id) follow its row, sorted the same way.
    Not `enabled`: the sessions alone, as `sort_rows` orders them."""
    rows = list(rows)
    for r in rows:
        r.depth = 0
    if not enabled:
        return sort_rows(rows, key, reverse)
    by_job: dict[str, list[Row]] = {}
    singles: list[Row] = []
    for r in rows:
        if r.job and r.error is None:
            by_job.setdefault(r.job, []).append(r)
        else:
            singles.append(r)
    tops = list(singles)
    for job, members in by_job.items():
        tops.extend(members if len(members) == 1 else [group_row(job, members)])
    out: list[Row] = []
    for r in sort_rows(tops, key, reverse):
        out.append(r)
        if r.members is not None and r.job in expanded:
            for m in sort_rows(r.members, key, reverse):
                m.depth = 1
                out.append(m)
    return out


def group_label(row: Row, expanded: bool) -> str:
    """The command cell of a group row: '▶ job 77 · 5 tasks · python train.py' (or '2 nodes', 'N sessions')."""
    members = row.members or []
    tasks = {m.job_part for m in members if m.job_part.startswith("task ")}
    nodes = {m.host for m in members}
    what = f"{len(tasks)} tasks" if len(tasks) > 1 else f"{len(nodes)} nodes" if len(nodes) > 1 else ""
    if len(tasks) > 1 and len(nodes) > 1:
        what += f" on {len(nodes)} nodes"
    return f"{'▼' if expanded else '▶'} job {row.job} · {what or f'{len(members)} sessions'} · {row.command}"
