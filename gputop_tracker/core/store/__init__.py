"""Saved sessions: the store (one JSON file per session), the history list's rows, and sessions as files.
Its face: `__all__` (`core/face.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop_tracker.core.face import lazy

_FACE = {
    "check_store": "sessions",
    "export_session": "session_files",
    "new_session_id": "sessions",
    "sessions": "",
    "write_output": "sessions",
}
__all__ = [
    "check_store",
    "export_session",
    "new_session_id",
    "sessions",
    "write_output",
]
__getattr__ = lazy(__name__, _FACE, globals())

if TYPE_CHECKING:
    from gputop_tracker.core.store import sessions
    from gputop_tracker.core.store.session_files import export_session
    from gputop_tracker.core.store.sessions import check_store, new_session_id, write_output
