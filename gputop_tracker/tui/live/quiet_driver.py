"""Textual's Linux terminal driver with an input thread that sleeps while no key is pending.

Textual's input thread wakes every 0.1 s, whatever happens, to time out a lone Escape (an escape sequence cut
short): ten wake-ups a second cost the live view 0.1-0.2 % of a core, a tenth of its whole budget. This one
polls at 0.1 s only while the parser waits for the rest of a sequence; otherwise it waits for input (a key
still wakes it at once), at most IDLE_WAIT, and is woken through a pipe when input is disabled (quit, suspend).
Where Textual's internals are not as expected, its own thread runs instead.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder

from textual.driver import Driver

PENDING_WAIT = 0.1  # seconds: Textual's own poll, while an escape sequence may be cut short
IDLE_WAIT = 1.0  # seconds: the longest sleep with no key pending (a bound, should a wake-up be missed)

try:
    from textual._parser import ParseError
    from textual._xterm_parser import XTermParser
    from textual.drivers.linux_driver import LinuxDriver
except ImportError:  # another Textual: its own driver
    LinuxDriver = None  # type: ignore[assignment,misc]


def quiet_driver(driver: type[Driver]) -> type[Driver]:
    """The quiet driver in place of Textual's Linux driver (exactly that class, as Textual laid it out)."""
    if LinuxDriver is None or driver is not LinuxDriver or not _expected():
        return driver
    return QuietLinuxDriver


def _expected() -> bool:
    parser = XTermParser(False)
    return hasattr(parser, "_timeout_time") and all(
        hasattr(LinuxDriver, name) for name in ("run_input_thread", "disable_input", "process_message")
    )


if LinuxDriver is not None:

    class QuietLinuxDriver(LinuxDriver):
        _wake_r = -1
        _wake_w = -1
        _waking = False

        def start_application_mode(self) -> None:
            if self._wake_r < 0:  # one pipe for the driver's life: never closed under a writer
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_w, False)
            self._waking = False
            super().start_application_mode()

        def disable_input(self) -> None:
            self._waking = True  # from now on the thread polls, so it sees exit_event however the wake-up goes
            if self._wake_w >= 0:
                try:
                    os.write(self._wake_w, b"x")
                except OSError:  # full: a wake-up is pending anyway
                    pass
            super().disable_input()

        def close(self) -> None:
            super().close()
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = -1

        def run_input_thread(self) -> None:
            wake = self._wake_r
            if wake < 0:
                super().run_input_thread()
                return
            selector = selectors.SelectSelector()
            selector.register(self.fileno, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            parser = XTermParser(self._debug)
            decode = getincrementaldecoder("utf-8")().decode
            try:
                while not self.exit_event.is_set():
                    pending = self._waking or parser._timeout_time is not None
                    for key, _mask in selector.select(PENDING_WAIT if pending else IDLE_WAIT):
                        if key.fd == wake:
                            os.read(wake, 64)
                            continue
                        data = decode(os.read(self.fileno, 4096))
                        for event in parser.feed(data) if data else ():
                            self.process_message(event)
                    for event in parser.tick():
                        self.process_message(event)
            finally:
                selector.close()
                try:
                    for _event in parser.feed(""):
                        pass
                except (EOFError, ParseError):
                    pass
