"""`sessions list`: the saved sessions as rows (text, one line each, cut to a terminal's width only on a
terminal) or as JSON objects (metadata, headline peaks, or why a file cannot be read)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gputop_tracker.core.model.text import command_line, escape_controls
from gputop_tracker.core.model.units import human_bytes, human_seconds
from gputop_tracker.core.store import sessions as store

if TYPE_CHECKING:
    from gputop_tracker.core.model.models import ResourceUsage


def _list_status(entry: store.Entry) -> str:
    if entry.session is None:
        return "unreadable"
    if entry.running:
        return "running"
    return "stale" if entry.session.meta.status == "running" else entry.session.meta.status


def listing_item(entry: store.Entry) -> dict[str, object]:
    """One session of `sessions list -f json`: its metadata and headline figures, or why it cannot be read."""
    item: dict[str, object] = {
        "id": entry.id,
        "path": str(entry.path),
        "status": _list_status(entry),
        "error": entry.error,
    }
    if entry.session is not None:
        usage = entry.session.summary
        item["meta"] = entry.session.meta.model_dump(mode="json")
        item["duration_seconds"] = usage.compute_time.time if usage else None
        item["peak_ram_bytes"] = _whole(usage.peak_ram_read) if usage else None
        item["peak_gpu_ram_bytes"] = _whole(usage.max_gpu_ram.combined) if usage and usage.gpus else None
        item["simulated_gpus"] = _simulated(usage)
    return item


def _simulated(usage: ResourceUsage | None) -> bool:
    """Its GPUs were simulated (`--simulate-gpus`): a demo's figures, not a measurement."""
    return usage is not None and any(gpu.simulated for gpu in usage.gpus)


def _whole(count: float | None) -> int | None:
    """A byte count as the integer it is (the summary keeps them as floats, in gpu-tracker's units)."""
    return None if count is None else round(count)


def _list_row(entry: store.Entry) -> list[str]:
    """The cells of one `sessions list` row: seven, or three (id, UNREADABLE, the reason) for an unreadable file."""
    sid = escape_controls(entry.id)
    if entry.session is None:
        return [sid, "UNREADABLE", escape_controls(entry.error or "")]
    session = entry.session
    usage = session.summary
    return [
        sid,
        _list_status(entry),
        human_seconds(usage.compute_time.time) if usage else "-",
        "" if session.meta.exit_code is None else str(session.meta.exit_code),
        human_bytes(peak) if usage and (peak := usage.peak_ram_read) is not None else "-",
        human_bytes(usage.max_gpu_ram.combined) if usage and usage.gpus else "-",
        # as the history view marks it: a demo's GPU figures, not a measurement
        ("[sim] " if _simulated(usage) else "") + (command_line(session.meta.command) or "-"),
    ]


@dataclass(frozen=True)
class Listing:
    store_dir: Path
    entries: list[store.Entry]
    trunc: bool  # cut the command to the terminal's width


def listing_text(listing: Listing) -> str:
    """One line per session; control characters escaped: one session, one line."""
    if not listing.entries:
        return f"no sessions in {escape_controls(str(listing.store_dir))}\n"
    rows = [["id", "status", "duration", "exit", "peak RAM", "peak GPU", "command"]]
    rows += [_list_row(entry) for entry in listing.entries]
    full = [row for row in rows if len(row) == 7]
    widths = [max(len(row[i]) for row in (rows if i < 2 else full)) for i in range(6)]
    room = max(shutil.get_terminal_size().columns - sum(width + 2 for width in widths), 20) if listing.trunc else 0
    lines = []
    for session_cells in rows:
        if len(session_cells) < 7:  # unreadable: id, UNREADABLE, the reason
            lines.append(f"{session_cells[0]:<{widths[0]}}  {session_cells[1]}  {session_cells[2]}")
            continue
        cmd = session_cells[6][: room - 1] + "…" if listing.trunc and len(session_cells[6]) > room else session_cells[6]
        cells = [
            session_cells[0].ljust(widths[0]),
            session_cells[1].ljust(widths[1]),
            *(cell.rjust(width) for cell, width in zip(session_cells[2:6], widths[2:6], strict=True)),
            cmd,
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
