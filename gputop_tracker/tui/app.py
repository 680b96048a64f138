"""Entry points of the terminal UI used by the CLI. Each imports its screens lazily."""

from __future__ import annotations

from pathlib import Path


def run_history(store_dir: Path) -> int:
    """`gputop-track --history`: browse the saved sessions."""
    try:
        from gputop_tracker.tui.history.app import run_history as _rh
    except ImportError as e:
        print(f"gputop-track: history view unavailable ({e})")
        return 1
    return _rh(store_dir)
