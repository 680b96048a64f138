"""Signals aimed at the headless front end, passed on to the sampler (and so to the command): `SignalRelay`,
taken synchronously by one thread (sigwaitinfo), so that Ctrl-C on the terminal, which the command receives
itself, is told from a kill aimed at us, which must be passed on."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import TYPE_CHECKING

from gputop_tracker.core.model.config import JOB_SIGNALS
from gputop_tracker.core.sampling.jobctl import leave_job

if TYPE_CHECKING:
    from gputop_tracker.core.sampling.channel import SamplerHandle

SI_KERNEL = 0x80  # siginfo si_code of a signal the kernel sent itself, e.g. Ctrl-C on the terminal
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, *JOB_SIGNALS)  # JOB_SIGNALS: passed on, no more


def in_terminal_foreground() -> bool:
    """Whether we run in the foreground job of a controlling terminal (an interactive shell's command)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class SignalRelay:
    """Passes SIGINT, SIGTERM and SIGHUP aimed at us on to the sampler (which passes them to the command),
    but not Ctrl-C / hang-up from the terminal in launch mode: the command, in the terminal's job, got it —
    except a hang-up sent to us as the terminal's session leader (`ssh -t host gputop-track …` losing its
    connection): the kernel sends that to the session leader alone.
    Once the sampler has been reaped (`reaped` set) nothing is sent to it: its PID may belong to another
    process by then (a tiny window remains between the reaping and the flag). What comes meanwhile is held:
    should the sampler have died before the command, `retarget` passes it on to the command."""

    def __init__(
        self, handle: SamplerHandle, *, attach: bool, shares_terminal_job: bool = True, session_leader: bool = False
    ) -> None:
        self.handle = handle
        self.attach = attach
        self.shares_terminal_job = shares_terminal_job
        self.session_leader = session_leader
        self.interrupted: list[int] = []
        self.interrupted_at: list[float] = []  # when each came (time.time()): after the run's end, one gives up
        self.reaped = threading.Event()
        self.target = 0  # the command's pid once the sampler died (`retarget`): signals go to it directly
        self.held: list[int] = []  # signals for the command that came while there was nobody to send them to
        self.lock = threading.Lock()  # `forward` (the relay's thread) against `retarget` (the main thread)

    def forward(self, sig: int, si_code: int) -> None:
        if sig in JOB_SIGNALS:  # SIGUSR1/2 (a checkpoint request): the command's alone; tracking goes on
            if not self.attach:
                self._send(sig)
            return
        self.interrupted.append(sig)
        self.interrupted_at.append(time.time())
        from_terminal = (
            self.shares_terminal_job
            and si_code == SI_KERNEL
            and (sig == signal.SIGINT or (sig == signal.SIGHUP and not self.session_leader))
        )
        if self.attach or not from_terminal:
            self._send(sig)

    def _send(self, sig: int) -> None:
        with self.lock:
            # a sampler that has exited but is not reaped yet takes a signal and passes it nowhere: held too
            if self.reaped.is_set() or (not self.target and _exited(self.handle.pid)):
                self.held.append(sig)
            elif self.target:
                _send_to_command(self.target, sig)
            else:
                self.handle.signal(sig)

    def retarget(self, pid: int) -> None:
        """The sampler is gone: pass signals to the command `pid` itself (ours to wait for) until `reaped`,
        those held since the sampler was reaped first."""
        with self.lock:
            self.target = pid
            self.reaped.clear()
            # sent to the sampler as it died (SIGKILLed, not yet a zombie: nothing tells), never passed on
            for sig in [*self.handle.unrelayed(), *self.held]:
                _send_to_command(pid, sig)
            self.held.clear()

    def leave_terminal_job(self) -> None:
        """The command runs in the terminal's job: we leave it (for the sampler's group), so that what the
        shell or a user sends to the whole job reaches the command once; what still reaches us was aimed at
        us and is forwarded."""
        if leave_job(self.handle.pid):
            self.shares_terminal_job = False

    def run(self, signals: tuple[int, ...] = FORWARDED) -> None:
        while True:
            info = signal.sigwaitinfo(signals)
            self.forward(info.si_signo, info.si_code)


def _exited(pid: int) -> bool:
    """Whether our child `pid` has exited (a zombie, or reaped already), without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _send_to_command(pid: int, sig: int) -> None:
    """As the sampler passes them on: SIGINT, SIGTERM, SIGHUP to the command's whole process group where it leads
    one of its own (a shell script ends only when the child it waits for gets the signal too)."""
    try:
        if sig not in JOB_SIGNALS and os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:  # gone meanwhile: our wait ends with it
        pass
