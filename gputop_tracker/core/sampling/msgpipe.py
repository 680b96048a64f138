"""The sampler's pipe to the front end: one JSON message a line out, never blocking; requests a line in.

A front end that stops reading (a stopped terminal, a busy TUI) must never stall sampling: the pipe is
non-blocking, `sample`/`progress` messages are dropped (and counted) while it is full, and every other kind
is queued (bounded) and written on later sends or once the pipe drains (the loop's select asks
`MessagePipe.pending`). Light on purpose: it runs in the sampler, every sample.
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

DROPPABLE = frozenset({"sample", "progress"})  # dropped while the front end does not read; the rest is queued
QUEUE_MAX_BYTES = 8 << 20  # bytes of queued messages (events, summary) held for a front end that does not read
FINAL_FLUSH_SECONDS = 5.0  # the final summary waits this long for a stopped front end, then we give up


class MessagePipe:
    """Messages to the front end over `fd` (-1: nobody listens; the pipe turns -1 once the reader is gone)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.queue = bytearray()  # whole lines the front end has not taken yet
        self.dropped = 0  # droppable messages lost while the pipe was full
        if fd >= 0:
            try:
                os.set_blocking(fd, False)  # a stopped front end must never stall sampling
            except OSError:
                pass

    @property
    def open(self) -> bool:
        return self.fd >= 0

    @property
    def pending(self) -> bool:
        """Queued bytes wait for the pipe to drain: select this fd for writing."""
        return bool(self.queue) and self.fd >= 0

    def send(self, kind: str, payload: dict[str, Any]) -> None:
        """One message, never blocking: droppable kinds are dropped (and counted) while the pipe is full, the
        others queued (bounded) and written on later sends or when the pipe drains."""
        if self.fd < 0:
            return
        data = json.dumps({"kind": kind, **payload}, separators=(",", ":")).encode() + b"\n"
        if self.queue:
            self.flush()
        if self.queue:
            if kind in DROPPABLE or len(self.queue) + len(data) > QUEUE_MAX_BYTES:
                self.dropped += 1
            else:
                self.queue += data
            return
        try:
            n = os.write(self.fd, data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:  # the front end is gone: keep tracking, still save the session
            self.close()
            return
        if n == 0 and kind in DROPPABLE:
            self.dropped += 1
        elif n < len(data):
            self.queue += data[n:]  # the rest of a line already begun must follow, whatever its kind

    def flush(self) -> None:
        """Write what the pipe takes now, without blocking."""
        while self.queue and self.fd >= 0:
            try:
                n = os.write(self.fd, self.queue)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.close()
                return
            del self.queue[:n]

    def final_flush(self, timeout: float = FINAL_FLUSH_SECONDS) -> None:
        """At the very end: wait (bounded) for a front end that stopped reading to take the queued messages."""
        deadline = time.monotonic() + timeout
        while self.pending:
            self.flush()
            left = deadline - time.monotonic()
            if not self.queue or left <= 0:
                break
            try:
                select.select([], [self.fd], [], min(left, 0.5))
            except (OSError, ValueError):
                break

    def close(self) -> None:
        """Nobody listens any more: forget the fd (not ours to close) and what was queued for it."""
        self.fd = -1
        self.queue.clear()


class RequestReader:
    """Requests from the front end, one JSON object a line (the API's sampler reads them on its stdin)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd  # -1: no requests
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        """The whole requests that arrived (call when `fd` is readable); the fd turns -1 at end of file."""
        try:
            data = os.read(self.fd, 1 << 16)
        except OSError:
            data = b""
        if not data:  # the front end closed it
            self.fd = -1
            return []
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        requests = []
        for line in lines:
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if isinstance(request, dict):
                requests.append(request)
        return requests
