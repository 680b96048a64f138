"""The front end's fallback when the sampler process dies before the command (a SIGKILL, the OOM killer).

The sampler is the command's parent. The front end makes itself a child subreaper before forking it, so when
the sampler dies the command (and any orphan of its tree) is reparented to the front end, which then waits
for the command itself — the exit code stays the command's — and marks the session "interrupted", keeping
what the sampler's last checkpoint measured. Standard library only: it runs after the sampler is gone.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from gputop_tracker.core.model import paths
from gputop_tracker.core.model.config import LAUNCH, EngineConfig
from gputop_tracker.core.store import sessions as store

PR_SET_CHILD_SUBREAPER = 36
EXIT_FAILURE = 1  # as console.EXIT_FAILURE
INTERRUPTED = "interrupted"  # SessionMeta.status of a session whose sampler died before the command


def become_subreaper() -> bool:
    """Orphans of our descendants come to us (call before forking the sampler)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def is_our_child(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2 :].split()[1]) == os.getpid()
    except (OSError, ValueError, IndexError):
        return False


def wait_for_command(pid: int) -> tuple[int, int | None] | None:
    """Wait until `pid` (reparented to us) exits, reaping any other orphan meanwhile: (its exit code as a
    shell gives it, 128+N after signal N; the signal N or None), or None when it is not ours to wait for."""
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return None
        if got == pid:
            code = os.waitstatus_to_exitcode(status)
            return (128 - code, -code) if code < 0 else (code, None)


def mark_interrupted(
    store_dir: str | os.PathLike[str], session_id: str, why: str, ended: tuple[int, int | None] | None
) -> bool:
    """Rewrite the session's last checkpoint as "interrupted" (its figures kept), with `why` in its notes and
    the command's end (exit code, signal) when we saw it."""
    path = paths.session_file(Path(store_dir), session_id)
    try:
        with store.open_regular(path) as f:
            session = json.loads(f.read())
        meta, summary = session["meta"], session.get("summary") or {}
        meta["status"] = INTERRUPTED
        meta["end_time"] = time.time()
        meta["exit_code"] = summary["exit_code"] = ended[0] if ended else None
        summary["exit_signal"] = ended[1] if ended else None
        summary["status"] = INTERRUPTED
        summary.setdefault("notes", []).append(why)
        store.save_session(Path(store_dir), session)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    store.forget_running(Path(store_dir), session_id)  # figures newer than the file, now the file's
    return True


def describe_death(status: int | None) -> str:
    """'killed by SIGKILL' / 'exited with status 3' for the sampler's wait status (waitstatus_to_exitcode)."""
    if status is not None and status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


class Takeover:
    """The sampler died before the command it launched (which runs on, reparented to us)."""

    def __init__(self, cfg: EngineConfig, sampler_status: int | None, pid: int, session_id: str, store_dir: str):
        self.cfg = cfg
        self.how = describe_death(sampler_status)
        self.pid = pid
        self.session_id = session_id
        self.store_dir = store_dir
        self.why = f"the sampler process was {self.how} while the command ran; the figures stop at its last checkpoint"

    def run(self, say: Callable[[str], None], retarget: Callable[[int], None] | None = None) -> int:
        """Say so in one line, mark the session interrupted (its last checkpoint's figures kept), wait for the
        command (`retarget`: signals go to it directly from now on) and return its exit code (1 when it is
        not ours to wait for: attached, or already gone)."""
        saved = self.cfg.save
        session = f"session {self.session_id} marked interrupted" if saved else "no session saved"
        ours = self.cfg.mode == LAUNCH and is_our_child(self.pid)
        if ours:
            say(f"the sampler process was {self.how}: waiting for the command (PID {self.pid}) untracked; {session}")
            if retarget is not None:
                retarget(self.pid)  # before the rewrite: a signal sent while the session is rewritten reaches it
        if saved:
            mark_interrupted(self.store_dir, self.session_id, self.why, None)
        if not ours:
            say(f"error: the sampler process was {self.how}; {session} (figures up to its last checkpoint)")
            return EXIT_FAILURE
        ended = wait_for_command(self.pid)
        if saved:
            mark_interrupted(self.store_dir, self.session_id, self.why, ended)
        return ended[0] if ended is not None else EXIT_FAILURE
