"""The session on disk while it runs and when it ends: checkpoints and the final save (`save_session`), and the
figures so far for a history list in another process (`RunningFigures`).

A running session's file is rewritten once a minute (a checkpoint: a kill -9 loses at most that), which is too
seldom for a list on show and too costly to do every few seconds (the timeline is megabytes). So a history list
asks: while it shows a running session of another process it touches `.ID.watch` in the store every 2 s, and
the sampler, which looks at that file at most once a second (`PERIOD`), writes the session's meta and summary
without the timeline to `.ID.running.json` (dot files: never listed as sessions) as long as the request is fresh.
Nothing is written while no one watches; both files go when the session ends.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gputop_tracker._version import SCHEMA_VERSION
from gputop_tracker.core.model import paths
from gputop_tracker.core.model.config import EngineConfig
from gputop_tracker.core.store import sessions as store
from gputop_tracker.core.summary.builder import SummaryBuilder

PERIOD = 1.0  # seconds between two looks at the request (and two writes while it stands: ~0.2 ms each)
FRESH = 10.0  # a request older than this has been left: the list went away without a word


def save_session(
    cfg: EngineConfig, store_dir: Path, session_id: str, interval: float, builder: SummaryBuilder, *, running: bool
) -> dict[str, Any]:
    """Write the session (a checkpoint while `running`, else the final one) unless --no-save; its summary."""
    summary = builder.summary(job=cfg.slurm)  # with the job's context and efficiency
    session = _session(cfg, store_dir, session_id, interval, builder, summary, running=running)
    session["timeline"] = builder.timeline()
    if cfg.save:
        try:
            # a running checkpoint is atomic but not worth an fsync (the final save has one)
            store.save_session(store_dir, session, durable=not running)
        except OSError as e:
            if not running:
                summary["notes"].append(f"session NOT saved: {e}")
                summary["session_path"] = None
    return summary


def _session(
    cfg: EngineConfig,
    store_dir: Path,
    session_id: str,
    interval: float,
    builder: SummaryBuilder,
    summary: dict[str, Any],
    *,
    running: bool,
) -> dict[str, Any]:
    summary["session_id"] = session_id
    if cfg.save:
        summary["session_path"] = str(paths.session_file(store_dir, session_id))
    return {
        "schema_version": SCHEMA_VERSION,
        "meta": {
            "id": session_id,
            "status": "running" if running else "finished",
            "command": builder.command,
            "mode": cfg.mode,
            "pid": builder.main_pid,
            "engine_pid": os.getpid(),
            "host": builder.host,
            "start_time": builder.start_time,
            "end_time": None if running else builder.end_time,
            "exit_code": builder.outcome.exit_code,
            "interval": interval,
        },
        "summary": summary,
    }


class RunningFigures:
    """The running session's figures for a history list in another process, written only while one asks."""

    def __init__(self, cfg: EngineConfig, store_dir: Path, session_id: str, interval: float) -> None:
        self.cfg, self.store_dir, self.session_id, self.interval = cfg, store_dir, session_id, interval
        self.watch = paths.watch_file(store_dir, session_id)
        self.out = paths.running_file(store_dir, session_id)
        self.next_look = 0.0

    def asked(self, now_mono: float, now_wall: float) -> bool:
        """Whether a list asked within FRESH seconds (one stat, at most every PERIOD)."""
        if not self.cfg.save or now_mono < self.next_look:
            return False
        self.next_look = now_mono + PERIOD
        try:
            return now_wall - os.stat(self.watch).st_mtime <= FRESH
        except OSError:
            return False

    def write(self, builder: SummaryBuilder) -> None:
        """Meta and the summary so far (no timeline, no per-process details), atomically; a failure only means
        the list shows the last checkpoint's figures."""
        summary = builder.summary(details=False, job=self.cfg.slurm)
        session = _session(self.cfg, self.store_dir, self.session_id, self.interval, builder, summary, running=True)
        try:
            store.write_running(self.out, session)
        except OSError:
            pass

    def close(self) -> None:
        store.forget_running(self.store_dir, self.session_id)
