"""The `gputop-track` console script: a Ctrl-C while the tool is still loading ends it quietly (exit 130).

Standard library only, so the handler is in place before anything heavy is imported: a KeyboardInterrupt
raised inside an import would otherwise print a long traceback. Python wraps one that lands in some parts of
class creation (a dataclass field's __set_name__) in a RuntimeError: that one is an interrupt too."""

from __future__ import annotations

import os
import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as console.EXIT_INTERRUPTED


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

        return cli_main()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:
        if _interrupted(e):
            return EXIT_INTERRUPTED
        raise
