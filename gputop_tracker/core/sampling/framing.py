"""Lines out of a byte stream: the sampler's messages are one JSON document a line.

Standard library only: the sampler child uses it too, before pydantic or anything else is loaded.
"""

from __future__ import annotations

from collections.abc import Iterator


class LineFramer:
    """Feed it the chunks of a stream as they are read; take the complete lines (without their newline).

    A line split across two reads waits in the buffer for its end; a last line without a newline is never
    handed out (a writer that died mid-line left half a message). Lines not taken yet stay in the buffer,
    so a consumer may stop part-way through a chunk and go on later."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk

    def lines(self) -> Iterator[bytes]:
        """The complete lines fed so far, each taken out of the buffer as it is handed out."""
        buffer = self._buffer
        while (newline := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:newline])
            del buffer[: newline + 1]  # deleting from the front of a bytearray moves no data
            yield line
