"""The tracked run's lifecycle in the live view: whether it still runs, its exit code, and the keys that act
on processes — quit (stop, detach), signal one process. A base class of LiveApp, apart from the drawing."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Protocol

from textual.app import App

from gputop_tracker.core import channel
from gputop_tracker.core.channel import Failed
from gputop_tracker.core.models import ResourceUsage, Sample
from gputop_tracker.core.text import escape_controls
from gputop_tracker.tui.widgets import QuitScreen, SignalScreen

KILL_AFTER = 5.0  # seconds after "stop it" before SIGKILL


class DataSource(Protocol):
    """What the live view reads: the sampler's messages, the command's output, and two controls."""

    def messages(self) -> Iterator[channel.Message]: ...
    def output(self) -> Iterator[str]: ...
    def signal(self, sig: int) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


class RunControl(App[int]):
    """Quit, stop, detach and signal; LiveApp sets these attributes and draws the header."""

    source: DataSource
    mode: str  # "launch" or "attach"
    command: list[str]
    main_pid: int | None
    latest: Sample | None
    final: ResourceUsage | None
    failure: Failed | None
    ended: bool  # the source has no more messages
    quit_choice: str | None  # "stop" / "detach" once the user asked to leave

    def _draw_header(self) -> None:
        raise NotImplementedError

    def selected_pid(self) -> int | None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self.final is None and self.failure is None and not self.ended

    @property
    def exit_code(self) -> int:
        """The command's exit code (128+N after signal N); 0 when detached or attached; 1 if tracking broke."""
        if self.failure is not None:
            return self.failure.exit_code
        if self.final is not None:
            if self.mode == "attach" or self.final.exit_code is None:
                return 0
            return self.final.exit_code
        return 0 if self.quit_choice == "detach" else 1

    async def action_quit(self) -> None:
        if not self.running:
            self.source.close()
            self.exit(self.exit_code, return_code=self.exit_code)
            return
        what = escape_controls(" ".join(self.command)) or f"PID {self.main_pid}"

        def chosen(choice: str | None) -> None:
            if choice == "stop":
                self.quit_choice = "stop"
                if self.mode == "attach":
                    self._kill(self.main_pid, signal.SIGTERM)
                else:
                    self.source.signal(signal.SIGTERM)
                    self.set_timer(KILL_AFTER, self._kill_main)
            elif choice == "detach":
                self.quit_choice = "detach"
                self.source.stop()
            else:
                return
            self._draw_header()
            self.notify("waiting for the sampler to save the session…", timeout=3)

        self.push_screen(QuitScreen(what, self.mode == "attach"), chosen)

    def _kill_main(self) -> None:
        if self.running and self.main_pid:
            self.notify("the command ignored SIGTERM: sending SIGKILL", severity="warning")
            self._kill(self.main_pid, signal.SIGKILL)

    def _kill(self, pid: int | None, sig: int) -> bool:
        if not pid:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            self.notify(f"process {pid} has already exited", severity="warning")
            return False
        except PermissionError:
            self.notify(f"not allowed to signal process {pid}", severity="error")
            return False
        return True

    def action_signal(self) -> None:
        pid = self.selected_pid()
        s = self.latest
        proc = next((p for p in s.processes if p.pid == pid), None) if s and pid else None
        if pid is None or proc is None or not self.running:
            self.notify("select a running process of the tracked tree first", severity="warning")
            return

        def chosen(sig: int | None) -> None:
            if sig is None:
                return
            # re-check: the row may have left the tree while the dialog was open
            if self.latest is None or pid not in {p.pid for p in self.latest.processes}:
                self.notify(f"process {pid} is no longer in the tracked tree", severity="warning")
                return
            if self._kill(pid, sig):
                self.notify(f"sent {signal.Signals(sig).name} to {pid} ({proc.name})")

        self.push_screen(SignalScreen(pid, proc.name), chosen)
