"""Every location the tool reads or writes. Tests redirect them with GPUTOP_TRACKER_STORE or XDG_DATA_HOME."""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "gputop-tracker"
STORE_ENV = "GPUTOP_TRACKER_STORE"


def data_dir() -> Path:
    """The user data dir (platformdirs; honours XDG_DATA_HOME)."""
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """The user cache dir (platformdirs; honours XDG_CACHE_HOME): what can be made again (the probe's copy)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def store_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where sessions live: --store, else $GPUTOP_TRACKER_STORE, else <data dir>/sessions."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    return data_dir() / "sessions"


def session_file(store: Path, session_id: str) -> Path:
    return store / f"{session_id}.json"


def watch_file(store: Path, session_id: str) -> Path:
    """A running session's request for fresh figures: a history list on show touches it (`core.sampling.saving`)."""
    return store / f".{session_id}.watch"


def running_file(store: Path, session_id: str) -> Path:
    """A running session's figures so far (meta and summary, no timeline), written while it is watched."""
    return store / f".{session_id}.running.json"


def output_file(store: Path, session_id: str) -> Path:
    """The command's captured output (live TUI mode only: headless passes output through untouched)."""
    return store / f"{session_id}.output.log"
