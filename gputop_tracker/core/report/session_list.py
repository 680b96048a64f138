"""`sessions list`: the saved sessions as rows (text, one line each, cut to a terminal's width only on a
terminal) or as JSON objects (metadata, headline peaks, or why a file cannot be read)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from gputop_tracker.core.model.text import command_line, escape_controls
from gputop_tracker.core.model.units import human_bytes, human_seconds
from gputop_tracker.core.store import sessions as store


def _list_status(e: store.Entry) -> str:
    if e.session is None:
        return "unreadable"
    if e.running:
        return "running"
    return "stale" if e.session.meta.status == "running" else e.session.meta.status


def listing_item(e: store.Entry) -> dict[str, object]:
    """One session of `sessions list -f json`: its metadata and headline figures, or why it cannot be read."""
    item: dict[str, object] = {"id": e.id, "path": str(e.path), "status": _list_status(e), "error": e.error}
    if e.session is not None:
        u = e.session.summary
        item["meta"] = e.session.meta.model_dump(mode="json")
        item["duration_seconds"] = u.compute_time.time if u else None
        item["peak_ram_bytes"] = u.max_ram.combined.total_rss if u else None
        item["peak_gpu_ram_bytes"] = u.max_gpu_ram.combined if u and u.gpus else None
    return item


def _list_row(e: store.Entry) -> list[str]:
    """The cells of one `sessions list` row: seven, or three (id, UNREADABLE, the reason) for an unreadable file."""
    sid = escape_controls(e.id)
    if e.session is None:
        return [sid, "UNREADABLE", escape_controls(e.error or "")]
    s = e.session
    u = s.summary
    return [
        sid,
        _list_status(e),
        human_seconds(u.compute_time.time) if u else "-",
        "" if s.meta.exit_code is None else str(s.meta.exit_code),
        human_bytes(u.max_ram.combined.total_rss) if u else "-",
        human_bytes(u.max_gpu_ram.combined) if u and u.gpus else "-",
        command_line(s.meta.command) or "-",
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
    rows += [_list_row(e) for e in listing.entries]
    full = [r for r in rows if len(r) == 7]
    widths = [max(len(r[i]) for r in (rows if i < 2 else full)) for i in range(6)]
    room = max(shutil.get_terminal_size().columns - sum(w + 2 for w in widths), 20) if listing.trunc else 0
    lines = []
    for r in rows:
        if len(r) < 7:  # unreadable: id, UNREADABLE, the reason
            lines.append(f"{r[0]:<{widths[0]}}  {r[1]}  {r[2]}")
            continue
        cmd = r[6][: room - 1] + "…" if listing.trunc and len(r[6]) > room else r[6]
        cells = [
            r[0].ljust(widths[0]),
            r[1].ljust(widths[1]),
            *(c.rjust(w) for c, w in zip(r[2:6], widths[2:6], strict=True)),
            cmd,
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
