"""Stopping the tracked tree on request (the live view's `k`, a stop key): the signal to the command's process group
or to every process of the tree, the stop event, and which processes were still alive when tracking ended."""

from __future__ import annotations

import os
import select
import signal
import time
from typing import TYPE_CHECKING, Any

from gputop_tracker.core.model.config import LAUNCH, EngineConfig

if TYPE_CHECKING:
    from gputop_tracker.core.sampling.sampler import _Sampling


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


class TreeStop:
    """The live view asked to stop the whole tree (`{"cmd": "stop_tree", "signal": N}`): the process group and
    every tracked process (also those that left the group) get the signal; sampling goes on until the whole
    tree is gone, not just the main process; the session notes what was sent and what survived."""

    def __init__(self, pgid: int | None) -> None:
        self.pgid = pgid  # the command's process group (launched in a new session), or None (attached)
        self.sent: list[str] = []

    @staticmethod
    def serve(request: dict[str, Any], s: _Sampling | None, cfg: EngineConfig) -> None:
        if request.get("cmd") != "stop_tree" or s is None:
            return
        if s.tree_stop is None:
            s.tree_stop = TreeStop(s.tree.root if cfg.mode == LAUNCH and cfg.new_session else None)
        s.tree_stop.send(request.get("signal"), s)

    def send(self, sig: object, s: _Sampling) -> None:
        """`sig` to the process group and to each tracked process; an event in the session's timeline."""
        sig = sig if isinstance(sig, int) and sig in signal.valid_signals() else signal.SIGTERM
        if self.pgid:
            try:
                os.killpg(self.pgid, sig)
            except OSError:
                pass
        reached = 0
        for pid in sorted(set(s.tree.handles) - {os.getpid()}):
            try:
                os.kill(pid, sig)
                reached += 1
            except OSError:
                pass
        name = signal.Signals(sig).name
        processes = f"{reached} process{'es' if reached != 1 else ''}"
        self.sent.append(f"{name} to {processes}")
        s.builder.events.add("stop", time.time(), f"{name} sent to {processes} of the tree", pid=self.pgid)

    @staticmethod
    def draining(s: _Sampling) -> bool:
        """True while the tree is being stopped and a process of it still runs, though the main one may be gone."""
        if s.tree_stop is None:
            return False
        if s.pidfd >= 0 and readable(s.pidfd):  # the main process's end is seen: from now wait on the clock
            os.close(s.pidfd)
            s.pidfd = -1
        return any(running(pid) for pid in s.tree.handles)

    @staticmethod
    def alive_at_end(s: _Sampling) -> set[int]:
        """The tracked processes still running when tracking ends; noted in the session after a stop."""
        alive = {pid for pid in s.tree.handles if running(pid)}
        if s.tree_stop is not None:
            s.builder.note(s.tree_stop.report(alive))
        return alive

    def report(self, alive: set[int]) -> str:
        """The note the session keeps: what was sent, and what survived it."""
        text = f"stopped from the live view: {', then '.join(self.sent)} of the tree"
        if alive:
            shown = ", ".join(str(p) for p in sorted(alive)[:20])
            return f"{text}; {len(alive)} still running when tracking ended (PIDs {shown})"
        return f"{text}; none survived"


def running(pid: int) -> bool:
    """Running (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return b") Z" not in f.read()
    except OSError:
        return False
