"""What the live view's reader threads hand to its UI thread (Textual messages, posted from the threads)."""

from __future__ import annotations

from textual.message import Message

from gputop_tracker.core.sampling import channel


class SamplerEvent(Message):
    """Messages from the sampler (those of one read), handed to the UI thread."""

    def __init__(self, msgs: list[channel.Message]) -> None:
        super().__init__()
        self.msgs = msgs


class SourceEnded(Message):
    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class Told(Message):
    """A line for the user from another thread (an exporter that cannot write): shown as a notification."""

    def __init__(self, text: str, title: str) -> None:
        super().__init__()
        self.text = text
        self.title = title


class OutputText(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
