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
    known = [value for value in values if value is not None]
    return max(known) if known else None


def _mean(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def group_row(job: str, members: list[Row]) -> Row:
    """One row for a job's sessions: the earliest start, the longest duration, the largest peaks, the mean
    utilizations; exit 0 when every session exited 0, else how many failed."""
    first = min(members, key=lambda member: (member.start or 0, member.id))
    failed = [member for member in members if member.exit not in ("0", "running")]
    running = any(member.running for member in members)
    hosts = sorted({member.host for member in members})
    row = Row(f"{GROUP_PREFIX}{job}", first.entry, first.start, command=first.command, members=members, job=job)
    row.host = hosts[0] if len(hosts) == 1 else f"{len(hosts)} nodes"
    row.duration = _max(member.duration for member in members)
    row.peak_ram = _max(member.peak_ram for member in members)
    row.peak_gpu = _max(member.peak_gpu for member in members)
    row.cpu = _mean(member.cpu for member in members)
    row.gpu_util = _mean(member.gpu_util for member in members)
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
    for row in rows:
        row.depth = 0
    if not enabled:
        return sort_rows(rows, key, reverse)
    by_job: dict[str, list[Row]] = {}
    singles: list[Row] = []
    for row in rows:
        if row.job and row.error is None:
            by_job.setdefault(row.job, []).append(row)
        else:
            singles.append(row)
    tops = list(singles)
    for job, members in by_job.items():
        tops.extend(members if len(members) == 1 else [group_row(job, members)])
    out: list[Row] = []
    for row in sort_rows(tops, key, reverse):
        out.append(row)
        if row.members is not None and row.job in expanded:
            for member in sort_rows(row.members, key, reverse):
                member.depth = 1
                out.append(member)
    return out


def group_label(row: Row, expanded: bool) -> str:
    """The command cell of a group row: '▶ job 77 · 5 tasks · python train.py' (or '2 nodes', 'N sessions')."""
    members = row.members or []
    tasks = {member.job_part for member in members if member.job_part.startswith("task ")}
    nodes = {member.host for member in members}
    what = f"{len(tasks)} tasks" if len(tasks) > 1 else f"{len(nodes)} nodes" if len(nodes) > 1 else ""
    if len(tasks) > 1 and len(nodes) > 1:
        what += f" on {len(nodes)} nodes"
    return f"{'▼' if expanded else '▶'} job {row.job} · {what or f'{len(members)} sessions'} · {row.command}"
