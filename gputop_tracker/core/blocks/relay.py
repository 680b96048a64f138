"""The Engine's side of code blocks: the FIFO's messages into the session's `BlockStats`, with a sample at
block boundaries.

`BlockRelay(cfg).open()` runs in the sampler before the command starts: in launch mode it makes the FIFO
(`BlockInbox`) and names it in the environment the command inherits; for the Python API the `Tracker` made
the FIFO and passed its path (`EngineConfig.blocks_fifo`), and the relay only reads it. `bind()` gives it the
session's builder and a way to take one sample; `serve()` runs when the FIFO is readable; `finish()` takes
the last messages and closes (and removes a FIFO of its own).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from gputop_tracker.core.blocks.inbox import BlockInbox
from gputop_tracker.core.blocks.probe import (
    HISTORY_ENV,
    command_without_site,
    history_setting,
    probe_environment,
    remove_probe_path,
)
from gputop_tracker.core.model.config import LAUNCH, EngineConfig
from gputop_tracker.core.summary.probe import ProbeStats

OFF = "turned off (--no-probe, or probe=False)"
BOUNDARY_GAP = 0.005  # seconds at least between two samples taken at block boundaries


class BlockRelay:
    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.inbox: BlockInbox | None = None
        self.owned = False  # our FIFO (removed at the end), or the Tracker's
        self.builder: Any = None  # SummaryBuilder (not imported: the relay is a leaf)
        self.part: Any = None  # its BlocksPart
        self.sample: Callable[[], object] = lambda: None
        self.failed: Callable[[Any, Exception], None] = lambda _b, _e: None
        self.next_boundary = 0.0
        self.probe = ProbeStats(False)
        self.probe_path_set = False
        #: a CUDA out-of-memory record of the probe (a message "o"): the sampler's to reconcile and keep
        self.on_gpu_oom: Callable[[dict[str, Any]], None] = lambda _m: None

    def open(self) -> None:
        """Before the command starts: where its blocks report (nothing read when there is no FIFO)."""
        cfg = self.cfg
        if cfg.blocks_fifo:
            self.inbox = BlockInbox.attach(cfg.blocks_fifo)
        elif cfg.mode == LAUNCH:  # --attach: a running process cannot be given the variable
            self.inbox = BlockInbox.create()
            self.owned = True
            if self.inbox is not None:
                self.inbox.export()
                self._probe_on()
        if cfg.blocks_fifo and cfg.probe and self.inbox is not None:  # the Tracker set the probe up itself
            self.probe = ProbeStats(True)
        elif not cfg.probe:
            self.probe = ProbeStats(False, OFF)
        elif not cfg.blocks_fifo and cfg.mode != LAUNCH:
            self.probe = ProbeStats(False, "attached to a running process, which cannot load it")
        elif self.inbox is None:
            self.probe = ProbeStats(False, "no FIFO could be made for its reports (TMPDIR, /tmp not writable)")

    def _probe_on(self) -> None:
        """The probe first on the command's PYTHONPATH (it reports through our FIFO)."""
        if not self.cfg.probe:
            self.probe = ProbeStats(False, OFF)
            return
        why = command_without_site(self.cfg.argv) or probe_environment(os.environ)  # type: ignore[arg-type]
        self.probe = ProbeStats(why is None, why)
        self.probe_path_set = why is None
        if why is None and self.cfg.gpu_history > 0:
            os.environ[HISTORY_ENV] = history_setting(self.cfg)

    @property
    def fd(self) -> int:
        return self.inbox.fd if self.inbox is not None else -1

    def bind(
        self, builder: Any, part: Any, sample: Callable[[], object], failed: Callable[[Any, Exception], None]
    ) -> None:
        """Feed `builder`'s probe and its code-blocks part (`BlocksPart`)."""
        self.builder, self.part, self.sample, self.failed = builder, part, sample, failed
        builder.probe = self.probe

    def _split(self, msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The probe's reports to its stats, its out-of-memory records to the sampler; the code blocks' messages
        returned."""
        if not any(m["k"] in ("x", "r", "o") for m in msgs):
            return msgs
        self.probe.feed([m for m in msgs if m["k"] in ("x", "r")])
        for m in msgs:
            if m["k"] == "o":
                self.on_gpu_oom(m)
        return [m for m in msgs if m["k"] not in ("x", "r", "o")]

    def serve(self) -> None:
        """The FIFO is readable: its messages into the builder, a sample at the boundaries (so a block shorter
        than the interval is sampled while it runs), at most one per BOUNDARY_GAP."""
        if self.inbox is None:
            return
        msgs = self._split(self.inbox.read())
        if self.builder is None or not msgs:
            return
        if self.part.stats.feed(msgs, self.builder.events, self._boundary_sample):
            self._boundary_sample()

    def _boundary_sample(self) -> bool:
        now = time.monotonic()
        if now < self.next_boundary:
            return False
        self.next_boundary = now + BOUNDARY_GAP
        try:
            self.sample()
        except Exception as e:  # as in the loop: a failed sample never costs the run
            self.failed(self.builder, e)
        return True

    def finish(self) -> None:
        """Tracking ends: the last messages (the blocks that ended as the command exited), then close."""
        if self.inbox is not None and self.builder is not None:
            with contextlib.suppress(Exception):
                self.part.stats.feed(self._split(self.inbox.read()), self.builder.events, lambda: False)
        if self.builder is not None:
            self.part.stats.close()
        self.close()

    def close(self) -> None:
        inbox, self.inbox = self.inbox, None
        if inbox is None:
            return
        if self.owned:
            inbox.close()
            os.environ.pop("GPUTOP_TRACKER_BLOCKS", None)
            if self.probe_path_set:
                remove_probe_path(os.environ)  # type: ignore[arg-type]
                os.environ.pop(HISTORY_ENV, None)
                self.probe_path_set = False
        else:
            inbox.close_fds()
