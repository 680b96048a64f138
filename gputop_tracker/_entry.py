"""The `gputop-track` console script: a Ctrl-C while the tool is still loading ends it quietly (exit 130).

Its first instruction (`run`) takes the start-up signals over, before anything else is imported: a SIGINT ends
the process at once with 130 (no KeyboardInterrupt travelling through import machinery, which prints a long
traceback, or which Python wraps in a RuntimeError inside some parts of class creation: that one is an
interrupt too). SIGTERM and SIGHUP keep their default action (the process ends by the signal: 143, 129).
A SIGINT inherited as ignored (a `&` job of a script, `nohup`) stays ignored throughout, as the shells and Python
hold it. What comes before `run` is Python's own start-up (`site`, `.pth` files): a Ctrl-C there ends as any
Python program ends there, unless whoever starts us blocks the signals across the exec
(`env --block-signal=INT,TERM,HUP gputop-track ...`): `run` unblocks them, and one pending since then ends us as
above. Standard library modules only: os and sys (loaded by Python's start-up) and signal (about 0.5 ms)."""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # not `typing`'s: loading typing (~2.5 ms) would widen the window before `run`
if TYPE_CHECKING:
    from typing import NoReturn

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as console.EXIT_INTERRUPTED
START_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _end_interrupted(_sig: int, _frame: object) -> None:
    """SIGINT while starting up or finishing: nothing is running that needs us."""
    os._exit(EXIT_INTERRUPTED)


def take_start_up_signals() -> None:
    """A SIGINT ends us at once (130), unless it was inherited as ignored; the start-up signals a starter blocked
    across the exec are unblocked (one pending since then is taken now)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _end_interrupted)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, START_SIGNALS)


def _interrupts_raise() -> None:
    """Our code runs: a SIGINT is a KeyboardInterrupt again, which the commands end on cleanly (files of this
    run removed, exit 130); an ignored one stays ignored."""
    if signal.getsignal(signal.SIGINT) is _end_interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(e: BaseException | None) -> bool:
    """A KeyboardInterrupt, or an exception raised because of one."""
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, KeyboardInterrupt):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


class _ClosedStdout:
    """sys.stdout when fd 1 was closed at start: every write fails as a write to a closed descriptor does, so the
    command that writes there says so in one line and exits 1 (as coreutils do), instead of a traceback."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, _text: str) -> int:
        raise OSError(9, os.strerror(9))  # EBADF

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(9, os.strerror(9))


class _QuietStderr:
    """sys.stderr that never raises: when stderr is closed or full there is no one left to tell."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)  # type: ignore[attr-defined,no-any-return]
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()  # type: ignore[attr-defined]
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def standard_fds() -> None:
    """fds 0-2 closed at start (`>&-`) get /dev/null, so no pipe or file of ours takes their numbers (a pipe
    on fd 1 would be copied into itself); the command inherits /dev/null there. A closed stdout stays closed for
    our own writes (`_ClosedStdout`); stderr never raises."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)
        except OSError:
            pass
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()  # type: ignore[assignment]
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115  # for the whole run
    if not isinstance(sys.stderr, _QuietStderr):
        sys.stderr = _QuietStderr(sys.stderr)  # type: ignore[assignment]


def main() -> int:
    standard_fds()
    try:
        from gputop_tracker.cli.entry import main as cli_main

        _interrupts_raise()
        return cli_main()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:
        if _interrupted(e):
            return EXIT_INTERRUPTED
        raise


def run() -> NoReturn:
    """The console script and `python -m gputop_tracker`: `main`, then `exit_now` with its exit code."""
    take_start_up_signals()
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End the process as Python's own exit would (threads that are not daemons joined, atexit handlers run, stdout
    and stderr flushed), less the interpreter's teardown: freeing every object of every loaded module cost ~30 ms
    of CPU at each run (pydantic's models included), a tenth of what a 20 s tracked job costs the tool in all.
    A stdout that cannot be flushed costs one `write error` line and exit 1 when the code was 0 (Python's own exit
    would print a traceback and end with 120). A SIGINT from here on ends at once with 130."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _end_interrupted)
    threading = sys.modules.get("threading")
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter calls first at exit
    if shutdown is not None:
        shutdown()
    import atexit

    atexit._run_exitfuncs()
    code = _flush_std(code)
    os._exit(code)


def _flush_std(code: int) -> int:
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError) as e:
        from gputop_tracker import console

        failed = console.write_error(e) if isinstance(e, OSError) else console.EXIT_FAILURE
        code = code or failed
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return code
