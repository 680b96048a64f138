"""Job control when the front end has left the terminal's job (headless, in an interactive shell's foreground).

The front end moves out of the shell's job once the command runs in it, so that a signal sent to the whole job
(`kill -TERM -PGID`, the shell passing on a hang-up, Ctrl-C) reaches the command once, from its sender, and is
not forwarded a second time. The shell, though, waits on the front end: when Ctrl-Z (or a read from the
terminal in the background) stops the command, `StopMirror` stops the front end too, so the shell sees its
job stopped and takes the terminal back; when `fg` or `bg` continue the command, it continues the front end.
Plain Python, in the sampler (which is in neither the job nor stopped).
"""

from __future__ import annotations

import os
import signal

from gputop_tracker.core.proc.procfs import parse_stat


class StopMirror:
    def __init__(self, front_pid: int, main_pid: int) -> None:
        self.front_pid = front_pid
        self.main_pid = main_pid

    def check(self) -> None:
        """Once a sample: the front end stopped exactly while the command is stopped."""
        command, front = process_state(self.main_pid), process_state(self.front_pid)
        if front is None:
            return
        if command == "T" and front != "T":
            self._signal(signal.SIGSTOP)
        elif command != "T" and front == "T":  # continued, or gone: the front end must report
            self._signal(signal.SIGCONT)

    def release(self) -> None:
        """Tracking is over: never leave the front end stopped."""
        if process_state(self.front_pid) == "T":
            self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.front_pid, sig)
        except OSError:
            pass


def process_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat (R, S, T, Z…); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            _name, fields = parse_stat(f.read())
        return fields[0].decode()
    except (OSError, ValueError, IndexError):
        return None


def not_ignored(signals: tuple[int, ...]) -> tuple[int, ...]:
    """Of `signals`, those not ignored now. One we were started with ignored (SIGINT in a script's `&` job,
    SIGHUP under `nohup`) stays ignored by us and by the command, as a shell and Python keep it: we never catch,
    block (a blocked signal is queued, not dropped) or pass it on."""
    return tuple(s for s in signals if signal.getsignal(s) is not signal.SIG_IGN)


def is_session_leader() -> bool:
    return os.getsid(0) == os.getpid()


def leave_job(into_pgrp: int) -> bool:
    """Move this process out of its process group (the shell's job) into `into_pgrp` (the sampler's);
    False where it cannot (a session leader cannot change its group)."""
    if is_session_leader():
        return False
    try:
        os.setpgid(0, into_pgrp)
    except OSError:
        return False
    # the report is written from a background group now: with `stty tostop` a write would stop us
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    return True
