"""The command's side of the sampler: launch it (or adopt a running pid), reap our children, relay signals.

`Launcher` starts the command in its job cgroup (exit codes 127/126 as a shell gives them), becomes the
subreaper of its tree, reaps every child with its rusage (handed to a callback, never dropped), forwards the
signals we get to the command and knows its exit status. Plain Python: it runs in the sampler.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable

from gputop_tracker.core.model.config import ATTACH, JOB_SIGNALS, LAUNCH, STOP_SIGNAL, EngineConfig
from gputop_tracker.core.model.text import escape_controls
from gputop_tracker.core.proc import cgroup as cgroups
from gputop_tracker.core.proc.procfs import parse_stat
from gputop_tracker.core.proc.vmhwm import own_peak_rss

PR_SET_CHILD_SUBREAPER = 36
RELAYED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, *JOB_SIGNALS, STOP_SIGNAL)

# (pid, user seconds, system seconds, peak RSS bytes, exit code as waitstatus_to_exitcode gives it)
# (pid, user s, system s, ru_maxrss bytes, exit code, (name, ppid, had children) read from its zombie or None)
ReapedCallback = Callable[[int, float, float, int, int, tuple[str, int, bool] | None], None]


class Launcher:
    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.main_pid = 0
        self.popen: subprocess.Popen[bytes] | None = None
        self.cgroup: cgroups.JobCgroup | None = None
        self.main_exit: tuple[int | None, int | None] | None = None  # (exit code, signal) once reaped
        self.spawner_hwm = 0  # our own peak RSS just before the fork: what an exec'd child inherits in ru_maxrss
        self.stop_requested = False
        self.to_forward: list[int] = []
        self.on_relayed: Callable[[int], None] = _nothing  # each signal once passed on (or its target gone)
        self.wake_fd = -1

    # ------------------------------------------------------------------ signals

    def install_signals(self) -> int:
        """Catch the relayed signals; the read end of a pipe that wakes the loop when one arrives."""
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w)
        for s in RELAYED_SIGNALS:
            signal.signal(s, self._on_signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED_SIGNALS)  # blocked since the fork (run_forked_child)
        self.wake_fd = r
        return r

    @staticmethod
    def release_signals() -> None:
        """Default handlers again (in a helper process forked from the sampler)."""
        for s in RELAYED_SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum == STOP_SIGNAL or (self.cfg.mode == ATTACH and signum not in JOB_SIGNALS):
            self.stop_requested = True
        elif self.cfg.mode != ATTACH:  # an attached process is not ours to signal
            self.to_forward.append(signum)

    def forward_signals(self) -> None:
        while self.to_forward:
            sig = self.to_forward.pop(0)
            if self.main_pid and self.main_exit is None:
                try:
                    if not (sig == signal.SIGHUP and self.cfg.new_session and self._hang_up_group()):
                        self._send_to_command(sig)
                except ProcessLookupError:
                    pass
            self.on_relayed(sig)

    def _send_to_command(self, sig: int) -> None:
        """SIGINT, SIGTERM and SIGHUP go to the command's whole process group where it leads one of its own (batch
        jobs, pipes, `timeout`): without us, the signal sent to the job's group (or a terminal's Ctrl-C) reaches
        every process of it. A shell script ends at SIGINT only when the child it waits for gets it too; sent to
        the script alone, it ran on. SIGUSR1/2 (a checkpoint request), or a command in the terminal's job with
        us (which got the terminal's signals itself), get it alone."""
        own_group = self.cfg.process_group == 0 or self.cfg.new_session
        if sig not in JOB_SIGNALS and own_group and os.getpgid(self.main_pid) == self.main_pid:
            os.killpg(self.main_pid, sig)
        else:
            os.kill(self.main_pid, sig)

    def _hang_up_group(self) -> bool:
        """The command's session has no terminal (the live view's): our terminal's hang-up is its job's, which the
        kernel would send to the whole foreground process group. False where the command left its group."""
        try:
            if os.getpgid(self.main_pid) != self.main_pid:
                return False
            os.killpg(self.main_pid, signal.SIGHUP)
        except OSError:
            return False
        return True

    # ------------------------------------------------------------------ launch / attach

    def make_cgroup(self, session_id: str) -> tuple[int, str] | None:
        """Become the subreaper of the command's tree and create its job cgroup (with the enforced limit);
        None, or (exit code, message) when the run cannot go on."""
        cfg = self.cfg
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        if cfg.use_cgroup:
            self.cgroup = cgroups.create_job_cgroup(session_id)
        if (
            cfg.enforce_mem_limit
            and cfg.mem_limit
            and (self.cgroup is None or not self.cgroup.set_limit(cfg.mem_limit))
        ):
            return self._failed(2, "--enforce-mem-limit: cannot create a memory cgroup with a limit on this machine")
        return None

    def launch(self, output_ends: tuple[int, int] | None = None) -> tuple[int, str] | None:
        """Start the command in its cgroup; None, or (exit code, message) when it could not start (its cgroup
        then removed). `output_ends`: fds the command gets as stdout and stderr instead of the configured ones
        (write ends of the tee's pipes: closed here either way)."""
        cfg = self.cfg
        join_fd = self.cgroup.join_fd() if self.cgroup else -1
        stdout, stderr = output_ends if output_ends else (cfg.stdout, cfg.stderr)
        try:
            self.spawner_hwm = own_peak_rss()
            self.popen = self._popen(stdout, stderr, join_fd)
        except OSError as e:
            name = escape_controls(cfg.argv[0])  # one line, whatever bytes the name holds
            if isinstance(e, FileNotFoundError):
                return self._failed(127, f"{name}: command not found")
            if isinstance(e, PermissionError):
                return self._failed(126, f"{name}: permission denied")
            return self._failed(126, f"{name}: cannot run: {e.strerror}")
        finally:
            for fd in (join_fd, *(output_ends or ())):
                if fd >= 0:
                    os.close(fd)
        self.main_pid = self.popen.pid
        return None

    def _popen(self, stdout: int | None, stderr: int | None, join_fd: int) -> subprocess.Popen[bytes]:
        cfg = self.cfg

        def start(argv: list[str]) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL if cfg.stdin is None and cfg.control_stdin else cfg.stdin,
                stdout=stdout,
                stderr=stderr,
                process_group=cfg.process_group,
                start_new_session=cfg.new_session,
                preexec_fn=_cgroup_joiner(join_fd) if join_fd >= 0 else None,
            )

        try:
            return start(cfg.argv)
        except OSError as e:
            name = cfg.argv[0]
            path = name if "/" in name else (shutil.which(name) or name)
            if e.errno != errno.ENOEXEC or _looks_binary(path):
                raise
        # An executable text file without a `#!` line: a shell, `env` and execvp() run it with /bin/sh (POSIX).
        # A binary one (another machine's executable) stays an error, as bash and dash say it.
        return start(["/bin/sh", path, *cfg.argv[1:]])

    def attach(self) -> None:
        self.main_pid = self.cfg.pid
        self.cgroup = cgroups.existing_job_cgroup(self.cfg.pid)

    def _failed(self, code: int, message: str) -> tuple[int, str]:
        self.remove_cgroup()
        return code, message

    def remove_cgroup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()

    # ------------------------------------------------------------------ reaping

    def reap(self, on_reaped: ReapedCallback) -> None:
        """Reap every child that exited (launch mode: we are the subreaper of the tree), each handed to
        `on_reaped`; the command's own exit sets `main_exit`."""
        if self.cfg.mode != LAUNCH:
            return
        while True:
            try:
                # peek first (WNOWAIT): the zombie's /proc/PID/stat still names it, for a child no sample saw
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if info is None:
                    return
                who = _zombie_name(info.si_pid)
                pid, status, ru = os.wait4(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            on_reaped(pid, ru.ru_utime, ru.ru_stime, ru.ru_maxrss * 1024, code, who)
            if pid == self.main_pid:
                if self.popen is not None:
                    self.popen.returncode = code
                self.main_exit = _exit_status(code)

    def wait_for_exit(self, on_reaped: ReapedCallback, wait: Callable[[], None]) -> None:
        """Tracking crashed, the command runs on: forward signals and reap until it exited, `wait()` between
        two rounds. Should that fail too, no bookkeeping is left to trust: just wait for the command itself."""
        while self.main_exit is None:
            try:
                self.forward_signals()
                self.reap(on_reaped)
                if self.main_exit is None:
                    wait()
            except Exception:
                try:
                    _pid, status = os.waitpid(self.main_pid, 0)
                    self.main_exit = _exit_status(os.waitstatus_to_exitcode(status))
                except ChildProcessError:
                    self.main_exit = (None, None)

    @property
    def launched(self) -> bool:
        return self.cfg.mode == LAUNCH and self.popen is not None

    def exit_code(self, default: int) -> int:
        """The command's exit code (128 + signal when killed), or `default` when we never saw it exit."""
        code = self.main_exit[0] if self.main_exit else None
        return code if code is not None else default

    def outcome(self) -> tuple[str, str | None]:
        """How tracking ended for the command (the session's status), and a note when one is due."""
        if self.main_exit is not None:
            return ("killed" if self.main_exit[1] else "exited"), None
        if self.cfg.mode == ATTACH:
            return ("stopped" if self.main_alive() else "exited"), None
        return "detached", "tracking stopped while the command was still running (detached)"

    def main_alive(self) -> bool:
        try:
            with open(f"/proc/{self.main_pid}/stat", "rb") as f:
                return b") Z" not in f.read()
        except OSError:
            return False


def _looks_binary(path: str) -> bool:
    """bash's test before it runs a file without `#!` as a script: an ELF header or a NUL byte early on."""
    try:
        with open(path, "rb") as f:
            head = f.read(80)
    except OSError:
        return True
    return head.startswith(b"\x7fELF") or b"\0" in head


def _nothing(_sig: int) -> None:
    pass


def _exit_status(code: int) -> tuple[int, int | None]:
    """(exit code, signal) from a waitstatus_to_exitcode() figure: killed by signal N is 128 + N, as in a shell."""
    return (128 - code, -code) if code < 0 else (code, None)


def _cgroup_joiner(join_fd: int) -> Callable[[], None]:
    """Run in the forked child before exec: move it into the job cgroup."""

    def join_cgroup() -> None:
        try:
            os.write(join_fd, str(os.getpid()).encode())
        except OSError:
            pass

    return join_cgroup


def raise_open_files_limit() -> None:
    """Many open handles for a large tree: soft limit up to the hard one (only after launch, so the command
    keeps the limits it was given)."""
    try:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


def _zombie_name(pid: int) -> tuple[str, int, bool] | None:
    """(comm, ppid, whether it ever waited for a child) of a child that exited and is not reaped yet: its
    stat still holds cminflt/cmajflt and cutime/cstime, the marks of children it reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            name, fields = parse_stat(f.read())
        had_children = any(int(fields[i]) for i in (8, 10, 13, 14))
        return name, int(fields[1]), had_children
    except (OSError, ValueError, IndexError):
        return None
