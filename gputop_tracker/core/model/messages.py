"""The messages the sampler sends the front end, as the front end holds them once read and validated
(`sampling.channel.decode`): what a run says while it runs. Plain dataclasses: the sampler never builds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputop_tracker.core.model.models import Event, LiveBlocks, ResourceUsage, Sample


@dataclass
class Started:
    pid: int
    session_id: str
    store: str


@dataclass
class SampleMessage:
    sample: Sample


@dataclass
class Summary:
    usage: ResourceUsage


@dataclass
class Progress:
    """The run so far as the final report counts it (`SummaryBuilder.summary`), without the per-process
    list and the event timeline; sent just before a sample, at most once a second, while samples are streamed."""

    usage: ResourceUsage


@dataclass
class Failed:
    exit_code: int
    message: str


@dataclass
class EventMessage:
    """One entry of the event timeline as it happens (alerts, peaks, processes, OOM)."""

    event: Event


@dataclass
class BlocksMessage:
    """The code blocks so far (the live view's blocks table), sent when they changed."""

    blocks: LiveBlocks


Message = Started | SampleMessage | Progress | Summary | Failed | EventMessage | BlocksMessage
