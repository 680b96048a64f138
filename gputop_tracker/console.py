"""What the tool says on the console: error lines, the stdout-failed fallback, exit codes.

Argument parsers that turn bad input into one error line live here too. A leaf module (standard
library only), so the CLI commands, the live view's launcher and the sessions
commands share it without importing one another.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shutil
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

from gputop_tracker.core.model.text import escape_controls

PROG = "gputop-track"  # every line the tool writes to stderr starts with it

EXIT_FAILURE = 1  # tracking or writing failed
EXIT_USAGE = 2  # bad input
EXIT_INTERRUPTED = 130  # Ctrl-C before tracking started (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: stdout's reader stopped reading (`| head`), as `ls | head` ends `ls`


class UsageError(Exception):
    """Bad input: one line on stderr, exit 2."""


class StdoutError(OSError):
    """stdout could not be written (closed, a reader gone, a full disk): one line on stderr, exit 1."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs as written (examples keep their layout); options wrapped to the terminal, at most 100 columns."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        if width is None:
            width = min(shutil.get_terminal_size().columns, 100) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing its usage and exiting: a bad input is one line.
    `--help` goes through `HelpFormatter` unless a parser asks for another."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def _print_message(self, message: str, file: Any = None) -> None:
        """--help and --version to stdout, checked (`write error`, exit 1 on a full disk); the rest to stderr."""
        if not message:
            return
        if file is None or file is sys.stdout:
            write_stdout(message)
        else:
            write_stderr(message)


_WHOLE = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


def whole(text: str) -> int:
    """An argparse `type`: a whole number written in ASCII digits. Python's int() also takes `1_000`, other
    scripts' digits and surrounding whitespace (a newline included); those are typing slips, not numbers."""
    if not _WHOLE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(text)


def real(text: str) -> float:
    """An argparse `type`: a decimal number in ASCII (`0.5`, `1e3`); `nan` and `inf` parse, so that the range check
    says they are not finite."""
    if not _REAL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    return float(text)


def name(text: str) -> str:
    """An argparse `type` for a file or directory name: '' names nothing (a shell's `> ''` fails too)."""
    if not text:
        raise argparse.ArgumentTypeError("needs a name, not ''")
    return text


def signal_exit_code(sig: int) -> int:
    """The shell's exit code for a process ended by signal `sig`."""
    return 128 + sig


def say(text: str) -> None:
    """One line on stderr, prefixed with the tool's name; if stderr itself is gone there is no one left to tell.
    One line whatever it quotes: a path or a name with a newline (or a bidi control) is escaped."""
    write_stderr(f"{PROG}: {escape_controls(text)}\n")


def error(message: str, code: int = EXIT_USAGE) -> int:
    """`gputop-track: error: message` on stderr (one line, as `say`); returns `code`, the exit code to end with."""
    write_stderr(f"{PROG}: error: {escape_controls(message)}\n")
    return code


def write_stderr(text: str) -> None:
    """Write to stderr; if stderr itself is gone there is no one left to tell."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError:
        pass


def names_stdout(name: str) -> bool:
    """Whether an `-o` name means standard output: `-`, or the very file descriptor 1 is open on."""
    if name == "-":
        return True
    try:
        ours, named = os.fstat(1), os.stat(name)
    except (OSError, ValueError):
        return False
    return (ours.st_dev, ours.st_ino) == (named.st_dev, named.st_ino)


def write_stdout(text: str) -> None:
    """Write all of `text` to stdout or raise StdoutError. Written to the file descriptor in a loop: when the reader
    of a pipe goes away in the middle of a large write, the kernel returns a short count (not EPIPE), and
    Python's text layer then drops the rest without a word (CPython 3.11: 64 KiB of a 200 KB report written,
    no error)."""
    try:
        _write_stdout(text)
    except OSError as e:
        raise StdoutError(e.errno, e.strerror) from None


def _write_stdout(text: str) -> None:
    if sys.stdout is None:  # closed when Python started
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # replaced by a stream with no descriptor (a test's capture)
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    view = memoryview(text.encode("utf-8", "surrogateescape"))
    while view:
        view = view[os.write(fd, view) :]


def print_stdout(*lines: str) -> None:
    """Lines on stdout (StdoutError when it cannot be written)."""
    write_stdout("".join(f"{line}\n" for line in lines))


def write_error(e: OSError) -> int:
    """stdout failed: `gputop-track: error: write error: REASON` on stderr as coreutils say it; exit 1. A reader
    that went away (EPIPE: `| head -1`) is normal, not an error: nothing said, exit 141, as `ls | head` ends. stdout
    is pointed at /dev/null, so nothing later (the flush at exit) fails again."""
    stdout_failed()
    if e.errno == errno.EPIPE:
        return EXIT_BROKEN_PIPE
    return error(f"write error: {e.strerror or e}", EXIT_FAILURE)


def stdout_failed() -> None:
    """After stdout failed (EPIPE, ENOSPC): point it at /dev/null, so the flush at exit neither fails nor
    prints a traceback, and nothing later writes into a dead pipe."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


def not_saved(notes: Iterable[str]) -> None:
    """One line on stderr when the session could not be saved; the reason is among the summary's notes."""
    say(next((n for n in notes if n.startswith("session NOT saved")), "session NOT saved"))
