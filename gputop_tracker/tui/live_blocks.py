"""The live view's "current block(s)": the code blocks running now, from the streamed block events.

The sampler sends `block_start` / `block_end` events for the first runs of each block (bounded): a block
that runs for a while (a phase, an epoch) shows; a step called a million times shows while its runs have
events, then no more. Innermost last, per process.
"""

from __future__ import annotations

from gputop_tracker.core.models import Event
from gputop_tracker.core.text import escape_controls

MAX_SHOWN = 3  # blocks named in the header; more are counted


class OpenBlocks:
    def __init__(self) -> None:
        self.running: list[tuple[int, str]] = []  # (pid, name), in order of start

    def feed(self, e: Event) -> bool:
        """Take a block event (True: the header changed); any other event: False."""
        if e.type == "block_start":
            self.running.append((e.pid or 0, e.name or "?"))
            return True
        if e.type == "block_end":
            key = (e.pid or 0, e.name or "?")
            for i in range(len(self.running) - 1, -1, -1):  # the innermost run of that name ends first
                if self.running[i] == key:
                    del self.running[i]
                    return True
        return False

    def text(self) -> str:
        """ "block load data ▸ train step" (the latest MAX_SHOWN), or "" when none runs."""
        if not self.running:
            return ""
        names = [escape_controls(name[:30]) for _pid, name in self.running[-MAX_SHOWN:]]
        more = len(self.running) - len(names)
        return "block " + (f"(+{more}) " if more else "") + " ▸ ".join(names)
