"""Lines the live view and the terminal after it both say (no Textual here: `run` imports it before the view)."""

from __future__ import annotations


def detached_text(pid: int | None, mode: str, output_path: object = None) -> str:
    """What detaching left behind: the process runs on, and (launched here) where its output goes now."""
    who = f"PID {pid}" if pid else "the command"
    if mode == "attach":
        return f"detached: {who} keeps running, untouched"
    out = f"its output goes on to {output_path}" if output_path else "its output goes to a deleted file (--no-save)"
    return f"detached: {who} keeps running; {out}"
