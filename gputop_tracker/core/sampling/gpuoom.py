"""The sampler's side of CUDA out-of-memory records: each record the probe sends (message "o") is reconciled with
what the GPU memory watcher read at that moment (`summary.gpuoom`'s rules), kept in the session, put on the event
timeline (`gpu_oom`, an alert: the live view and the headless front end show it) and into an OOM dump bundle with
the files the process left beside the FIFO (every segment's state; with --gpu-history, the allocator history
memory_viz opens), within the dump budget. A burst of OOMs (a program that retries smaller) shares one bundle.

A record waits (`settle`, each sample) until the watcher has read past the OOM's moment: the allocation that
failed never reached the device, so the read just after it (a few ms at 50 Hz) holds what the process held then,
also what it allocated since the read before; at most SETTLE_WAIT seconds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gputop_tracker.core.blocks.inbox import BlockInbox
from gputop_tracker.core.gpu import GpuWatcher
from gputop_tracker.core.sampling.oomdump import DumpWriter
from gputop_tracker.core.summary import gpuoom

STATE_CAP = 1 << 20  # bytes of a state file read (the probe writes at most that)
SETTLE_WAIT = 2.0  # seconds a record waits for the watcher's read after the OOM

WriteDump = Callable[[Any, float, dict[str, Any], dict[str, bytes]], "Path | None"]


class GpuOomRecorder:
    def __init__(self, dumps: DumpWriter) -> None:
        self.dumps = dumps
        #: (record, every segment's state, the allocator history's fd and size: taken from the FIFO's directory at
        #: once, which goes when tracking ends)
        self.pending: list[tuple[dict[str, Any], Any, tuple[int, int] | str | None]] = []

    def serve(self, msg: dict[str, Any], engine: Any) -> None:
        """A record from the relay: parsed now (its state file taken), kept once the watcher read past it."""
        builder = engine.builder
        if builder is None:
            return
        try:
            rec = gpuoom.parse(msg, builder.start_time)
            if rec is None:
                builder.gpu_ooms.bad += 1
                return
            inbox = engine.blocks.inbox
            self.pending.append((rec, _state(inbox, msg.get("file")), self._history(inbox, msg.get("hist"))))
        except Exception as e:  # never worth the run
            builder.note(f"a CUDA out-of-memory record could not be read ({type(e).__name__}: {e})")
        self.settle(engine)

    def _history(self, inbox: BlockInbox | None, hist: Any) -> tuple[int, int] | str | None:
        """The allocator history's file, taken (fd, size), or why it is not kept, or None (none asked)."""
        if not isinstance(hist, str) or inbox is None:
            return None
        if hist.startswith("!"):  # the probe stopped writing it: past the budget
            return f"allocator history not kept: {hist[1:]} (--oom-dump-mb)"
        fd, size = inbox.take(hist, int(self.dumps.max_bytes))
        if fd < 0:
            return f"allocator history not kept: {f'{size} bytes, over --oom-dump-mb' if size > 0 else 'not found'}"
        return fd, size

    def settle(self, engine: Any, final: bool = False) -> None:
        """The records whose moment the watcher has read past (all of them when `final`, or without a watcher):
        reconciled, kept, on the timeline. A failure is noted, never worth the run."""
        builder, sampling = engine.builder, engine.sampling
        watcher = sampling.gpu.watcher if sampling is not None else None
        now = time.time()
        while self.pending and builder is not None:
            rec, state, history = self.pending[0]
            ready = final or watcher is None or watcher.has_read_since(rec["time"]) or now - rec["time"] > SETTLE_WAIT
            if not ready:
                return
            self.pending.pop(0)
            try:
                self.keep(rec, state, history, builder, watcher, engine.last_gpus, engine._write_dump)
            except Exception as e:
                builder.note(f"a CUDA out-of-memory record could not be kept ({type(e).__name__}: {e})")
            finally:
                if isinstance(history, tuple):
                    os.close(history[0])

    def keep(
        self,
        rec: dict[str, Any],
        state: Any,
        history: tuple[int, int] | str | None,
        builder: Any,
        watcher: GpuWatcher | None,
        gpus: Sequence[Any],
        write_dump: WriteDump,
    ) -> None:
        """One record: reconciled, diagnosed, kept, on the timeline and in a bundle."""
        reads = watcher.reads_near(rec["time"], SETTLE_WAIT) if watcher is not None else []
        gpu = gpuoom.match_gpu(rec, gpus, reads)
        read = gpuoom.pick_read(rec, gpu.index, reads) if gpu is not None else None
        procs, age = read if read is not None else (None, None)
        gpuoom.reconcile(rec, gpu, procs, age, builder.procs, lambda pid: _name(builder, pid))
        rec["diagnosis"], rec["diagnosis_text"] = gpuoom.diagnose(rec)
        if not builder.gpu_ooms.add(rec):
            return
        text = gpuoom.message(rec)
        event = {"time": rec["time"], "elapsed": rec["elapsed"], "type": "gpu_oom", "message": text}
        event.update(source="probe", pid=rec["pid"])
        self._bundle(rec, state, event, builder, write_dump)
        self._snapshot(rec, history, builder)
        resource = f"gpu{rec['gpu_index']}" if rec.get("gpu_index") is not None else None
        builder.events.add(
            "gpu_oom", rec["time"], text, pid=rec["pid"], name=rec["name"] or None, resource=resource,
            value=rec["request"], source="probe", dump=rec.get("dump"),
        )  # fmt: skip

    def _bundle(
        self, rec: dict[str, Any], state: Any, event: dict[str, Any], builder: Any, write_dump: WriteDump
    ) -> None:
        """The record (and every segment's state) in a new bundle, or in the latest one during a burst."""
        name = f"gpu_oom-{rec['pid']}-{rec['n']}.json"
        data = json.dumps({**rec, "segments_state": state}, indent=1).encode()
        now = time.time()
        try:
            path = write_dump(builder, now, event, {name: data}) if self.dumps.due(now) else self.dumps.add(name, data)
        except (OSError, TypeError, ValueError) as e:
            builder.note(f"OOM dump NOT written: {e}")
            path = None
        if path is not None:
            rec["dump"] = event["dump"] = str(path)
            rec["state_file"] = str(path / name)

    def _snapshot(self, rec: dict[str, Any], history: tuple[int, int] | str | None, builder: Any) -> None:
        """--gpu-history: the allocator history the process wrote, copied into the record's bundle."""
        if history is None or isinstance(history, str):
            rec["snapshot_note"] = history
            return
        name = f"memory_snapshot-{rec['pid']}-{rec['n']}.pickle"
        try:
            path = self.dumps.add(name, history[0]) if rec.get("dump") else None
        except OSError as e:
            builder.note(f"allocator history NOT kept: {e}")
            path = None
        if path is None:
            rec["snapshot_note"] = "allocator history not kept: no OOM dump bundle (--no-save, --oom-dumps 0)"
        else:
            rec["snapshot"] = str(path / name)


def _state(inbox: BlockInbox | None, name: Any) -> Any:
    """Every segment's state, from the file the probe left (None: none, or not readable)."""
    if inbox is None or not isinstance(name, str):
        return None
    data = inbox.claim(name, STATE_CAP)
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _name(builder: Any, pid: int) -> str:
    who = builder.process_label(pid)
    if who is not None:
        return str(who[0])
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().strip().decode(errors="replace")[:64]
    except OSError:
        return ""
