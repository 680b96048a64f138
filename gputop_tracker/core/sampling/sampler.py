"""The sampler process: launches or attaches, samples the tree each interval, and saves the session.

It runs apart from the front end (forked by the CLI, spawned by the API) and owns everything a report
needs, so a busy or crashed front end never costs a sample or the session. It talks over one pipe:
one JSON message per line — `started`, `sample` (only when the front end asked for them), `event`
(alerts and the event timeline, always), `error`, `summary`. The API's sampler also reads requests from
its stdin (one JSON object a line: `{"cmd": "oom", ...}` from `Tracker.capture_oom`; the live view's
`{"cmd": "stop_tree", "signal": N}` on a request pipe: signal the whole tree, which only the sampler knows).
It stays light: no pydantic, no textual, no psutil on this path.

`Engine` keeps the loop and wires its parts: `launch.Launcher` (the command, its cgroup, reaping, signals),
`msgpipe.MessagePipe` (messages out) and `RequestReader` (requests in), `tee.OutputTee` /
`OutputFilePoller` (the command's output), `oomdetect.OomDetector` (kernel OOM kills) and `oomdump.DumpWriter`
(OOM dump bundles). Only the Engine talks to the `SummaryBuilder`; the parts get plain values and callbacks.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gputop_tracker.core.blocks.relay import BlockRelay
from gputop_tracker.core.blocks.summary import BlocksPart
from gputop_tracker.core.gpu import (
    GpuBackend,
    GpuReading,
    GpuSelection,
    open_guarded,
    resolve_gpu_selection,
    resolve_job_gpus,
    variables_for,
)
from gputop_tracker.core.model import paths
from gputop_tracker.core.model.config import ATTACH, JOB_SIGNALS, LAUNCH, MIN_INTERVAL, EngineConfig
from gputop_tracker.core.proc.cgroup import JobCgroup, PeakWindows
from gputop_tracker.core.proc.host import HostReader
from gputop_tracker.core.proc.procfs import ProcessTree, Reading, read_cmdline, read_environ
from gputop_tracker.core.sampling.endwatch import EndWatch
from gputop_tracker.core.sampling.gpuoom import GpuOomRecorder
from gputop_tracker.core.sampling.jobctl import StopMirror
from gputop_tracker.core.sampling.launch import RELAYED_SIGNALS, Launcher, raise_open_files_limit
from gputop_tracker.core.sampling.msgpipe import MessagePipe, RequestReader
from gputop_tracker.core.sampling.oomdetect import OomDetector
from gputop_tracker.core.sampling.oomdump import DumpContents, DumpWriter, dump_gpus, dump_limits
from gputop_tracker.core.sampling.relayed import RelayLedger
from gputop_tracker.core.sampling.saving import RunningFigures, save_session
from gputop_tracker.core.sampling.tee import OutputFilePoller, OutputTee
from gputop_tracker.core.sampling.treestop import TreeStop, readable, running
from gputop_tracker.core.store import sessions as store
from gputop_tracker.core.summary import events as ev
from gputop_tracker.core.summary.builder import Outcome, SummaryBuilder

CHECKPOINT_PERIOD = 60.0  # a running session is rewritten this often, so a kill -9 loses at most this
PROGRESS_PERIOD = 1.0  # seconds between the live view's "run so far" figures (the report's own summary)


class _Sampling:
    """What the loop samples with, and its schedule (monotonic times)."""

    __slots__ = (
        "builder",
        "gpu",
        "gpu_selection",
        "host",
        "next_checkpoint",
        "next_tick",
        "pidfd",
        "tree",
        "tree_stop",
    )

    def __init__(
        self, builder: SummaryBuilder, tree: ProcessTree, host: HostReader, gpu: GpuBackend, pidfd: int
    ) -> None:
        self.builder = builder
        self.tree = tree
        self.host = host
        self.gpu = gpu
        self.pidfd = pidfd  # the main process's pidfd (readable once it exited), or -1
        self.gpu_selection: GpuSelection | None = None
        self.tree_stop: TreeStop | None = None  # the live view asked to stop the whole tree
        self.next_tick = time.monotonic()
        self.next_checkpoint = self.next_tick  # the first checkpoint right after the first sample, never before it

    def checkpoint_due(self, now: float) -> bool:
        if now < self.next_checkpoint:
            return False
        self.next_checkpoint = now + CHECKPOINT_PERIOD
        return True

    def next_sample_time(self, interval: float) -> float:
        self.next_tick += interval
        if self.next_tick < time.monotonic():  # a slow sample: skip ahead, never pile up
            self.next_tick = time.monotonic() + interval
        return self.next_tick

    def close(self) -> None:
        self.gpu.close()
        self.tree.close()
        self.host.close()


class Engine:
    def __init__(self, cfg: EngineConfig, out_fd: int) -> None:
        self.cfg = cfg
        self.interval = max(cfg.interval, MIN_INTERVAL)
        self.session_id = cfg.session_id or store.new_session_id()
        self.store_dir = paths.store_dir(cfg.store)
        self.pipe = MessagePipe(out_fd)
        self.requests = RequestReader(0 if cfg.control_stdin else -1)
        self.launcher = Launcher(cfg)
        self.output_watch = ev.OutputWatch()  # one scanner for the tee and the output file
        self.tee = OutputTee(self._scan_output)
        self.output_file: OutputFilePoller | None = None
        self.builder: SummaryBuilder | None = None
        self.block_part: BlocksPart | None = None  # the builder's code-blocks part
        self.oom: OomDetector | None = None
        self.dumps = DumpWriter.for_session(cfg, self.store_dir, self.session_id)
        self.figures = RunningFigures(cfg, self.store_dir, self.session_id, self.interval)
        self.sampling_errors = 0
        self.last_gpus: list[Any] = []  # the last GPU readings (for a dump)
        self.next_progress = 0.0  # monotonic time of the next "progress" message
        self.stop_mirror: StopMirror | None = None  # the front end left the terminal's job (jobctl)
        self.end = EndWatch(wait_descendants=cfg.wait_descendants, api=cfg.control_stdin, front_end=cfg.front_end)
        self.sampling: _Sampling | None = None  # while sampling: what a request (stop_tree) acts on
        self.blocks = BlockRelay(cfg)  # code blocks of the command (GPUTOP_TRACKER_BLOCKS)
        self.gpu_ooms = GpuOomRecorder(self.dumps)  # the probe's CUDA out-of-memory records
        self.blocks.on_gpu_oom = lambda msg: self.gpu_ooms.serve(msg, self)

    @property
    def main_pid(self) -> int:
        return self.launcher.main_pid

    @property
    def cgroup(self) -> JobCgroup | None:
        return self.launcher.cgroup

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Track to the end and save the session; the command's exit code. Never leaves the command untracked
        without a session: if tracking itself fails, what was measured is saved (with a note), the job cgroup
        removed, and we still wait for the command and return its exit code."""
        try:
            return self._run()
        except Exception as e:
            return self._crashed(e)
        finally:
            self.pipe.final_flush()
            self.blocks.close()

    def _run(self) -> int:
        start = time.time()
        if not self._start():
            return 1
        sampling = self.sampling = self._setup(start)
        self.blocks.bind(sampling.builder, self.block_part, lambda: self._sample(sampling), self._sampling_failed)
        while self._step(sampling):
            self._pace(sampling)
        return self._finish_run(sampling)

    def _start(self) -> bool:
        """Catch signals, then launch the command (False when it could not start) or attach to it."""
        cfg = self.cfg
        self.launcher.install_signals()
        self.blocks.open()  # names the FIFO in the environment the command inherits
        if cfg.mode == LAUNCH:
            error = self.launcher.make_cgroup(self.session_id)
            if error is None:
                # --watch-output: the command writes into pipes; we copy every byte on to where it would have gone
                output_ends = self.tee.open_pipes(cfg.stdout, cfg.stderr) if cfg.watch_output else None
                error = self.launcher.launch(output_ends)
            if error is not None:
                self.pipe.send("error", {"exit_code": error[0], "message": error[1]})
                return False
        else:
            self.launcher.attach()
        raise_open_files_limit()
        return True

    def _setup(self, start: float) -> _Sampling:
        cfg = self.cfg
        main_pid = self.main_pid
        pidfd = _open_pidfd(main_pid)
        gpu = open_guarded(cfg.simulate_gpus, cfg.gpu_backend, cfg.gpu_poll)  # each call with a deadline
        tree = ProcessTree(main_pid, exclude={os.getpid(), *cfg.exclude}, cpu_window=self.interval)
        host = HostReader()
        builder = self._new_builder(start, gpu)
        self.output_file = OutputFilePoller(cfg.output_path, self._scan_output)
        cgroup = self.cgroup
        counters = ev.OomCounters(cgroup.path if cgroup else None, cgroup.version if cgroup else None)
        self.oom = OomDetector(time.monotonic, counters, self.interval, main_pid)
        if cfg.mirror_stops_to and cfg.mode == LAUNCH:
            self.stop_mirror = StopMirror(cfg.mirror_stops_to, main_pid)
        self.pipe.send("started", {"pid": main_pid, "session_id": self.session_id, "store": str(self.store_dir)})
        started = f"started {shlex.join(builder.command)}" if cfg.mode == LAUNCH else f"attached to {main_pid}"
        builder.events.add("start", start, started[:300], pid=main_pid)
        return _Sampling(builder, tree, host, gpu, pidfd)

    def _new_builder(self, start: float, gpu: GpuBackend) -> SummaryBuilder:
        """The session's SummaryBuilder, set up with what is known before the first sample."""
        cfg = self.cfg
        mem_limit, limit_source = cfg.mem_limit, "--mem-limit"
        cgroup_limit = self.cgroup.limit() if self.cgroup else None
        if not mem_limit and cgroup_limit:
            mem_limit, limit_source = cgroup_limit, "the job's cgroup limit"
        builder = SummaryBuilder(
            main_pid=self.main_pid,
            command=cfg.argv if cfg.mode == LAUNCH else read_cmdline(self.main_pid),
            mode=cfg.mode,
            interval=self.interval,
            start_time=start,
            n_expected_cores=cfg.n_expected_cores,
            simulated_gpus=gpu.simulated,
            gpu_note=gpu.note,
            gpu_problems=gpu.problems,  # live: notes the GPU backend gathers while running
            spawner_hwm=self.launcher.spawner_hwm,
            mem_limit=mem_limit,
            mem_limit_source=limit_source,
            warn_at=cfg.warn_at,
            critical_at=cfg.critical_at,
            recorder=ev.FlightRecorder(cfg.flight_seconds, self.interval) if cfg.flight_seconds > 0 else None,
            event_sink=lambda e: self.pipe.send("event", {"event": e}),
        )
        self.builder = builder
        builder.gpu_memory_source = gpu.memory_source
        self.block_part = part = BlocksPart.attach(builder)
        _bind_gpu(builder, gpu)
        if self.cgroup is not None and self.cgroup.created:  # each block's tree peak from the cgroup's own
            part.stats.windows = PeakWindows(self.cgroup)
        if cgroup_limit:
            builder.note(f"memory limit of the job's cgroup: {cgroup_limit} bytes")
        return builder

    # ------------------------------------------------------------------ the loop

    def _step(self, s: _Sampling) -> bool:
        """One pass of the loop: relay signals, reap, take one sample. False once tracking is over."""
        launcher = self.launcher
        interrupted = any(s not in JOB_SIGNALS for s in launcher.to_forward)
        launcher.forward_signals()
        launcher.reap(self._on_reaped)
        if self.stop_mirror is not None:
            self.stop_mirror.check()
        self.end.check_front_end(s.builder.note, s.builder.start_time)
        over = False
        try:
            if self._sample(s):
                over = True
        except Exception as e:  # a bug in one sample must never cost the run or its session
            self._sampling_failed(s.builder, e)
            if s.tree.root_gone and not s.tree.handles:
                over = True
        ended = self.end.over(  # after the sample: it may have found a daemon that forked meanwhile
            main_exited=launcher.main_exit is not None,
            stop_requested=launcher.stop_requested,
            interrupted=interrupted,
            descendants=self._descendants(s) if self.cfg.wait_descendants else [],
        )  # a tree being stopped (stop_tree) is tracked until it is gone, unless told to stop
        over = over or (ended and (launcher.stop_requested or not TreeStop.draining(s)))
        if self.end.waiting and s.pidfd >= 0:  # readable for good: it would wake every wait at once
            os.close(s.pidfd)
            s.pidfd = -1
        return not over

    def _sample(self, s: _Sampling) -> bool:
        """One sample of the tree (its figures to the builder, streamed when asked); True when the tree is gone."""
        builder, tree = s.builder, s.tree
        _new, gone = tree.discover()
        now_mono = time.monotonic()
        # who reaped whom decides where their CPU time went: the builder's CPU ledger knows
        builder.vanished([h.pid for h in gone], alive=tree.handles.keys())
        for h in gone:
            if self.oom is not None:
                self.oom.gone(h.pid)
        self._check_oom(builder)
        tree_gone = tree.root_gone and not tree.handles
        readings = tree.read(now_mono)
        gpus = self._read_gpus(s, readings)
        want_sample = self.pipe.open and self.cfg.stream_samples
        sample = builder.add(time.time(), readings, gpus, s.host.read(), want_sample=want_sample)
        if sample is not None:
            if now_mono >= self.next_progress:
                # the report's figures so far, computed where the report is (0.1 ms at 100 processes);
                # sent before the sample, so a view draws both in one update
                self.next_progress = now_mono + 0.95 * PROGRESS_PERIOD  # ticks jitter by ms
                self.pipe.send("progress", {"summary": builder.summary(details=False, job=self.cfg.slurm)})
            if (part := self.block_part) is not None and (blocks := part.live_blocks(now_mono)) is not None:
                self.pipe.send("blocks", {"blocks": blocks})  # only once blocks changed: nothing without them
            self.pipe.send("sample", {"sample": sample})
        if self.output_file is not None:
            self.output_file.poll()
        self.gpu_ooms.settle(self)  # CUDA OOM records, once the GPU watcher read past them
        return tree_gone

    def _read_gpus(self, s: _Sampling, readings: list[Reading]) -> list[GpuReading]:
        """The GPUs now (at most the backend's deadline: a hung driver holds no sample), and which of them count."""
        builder = s.builder
        gpus = s.gpu.read([r.handle.pid for r in readings])
        if s.gpu.changed():  # opened late, or stopped answering
            _bind_gpu(builder, s.gpu)
        self.last_gpus = gpus
        if gpus:  # only once GPUs answer: nothing is read on a machine without one
            if s.gpu_selection is None:
                s.gpu_selection = _gpu_selection(self.cfg, self.main_pid, s.gpu.vendor)
                for p in resolve_job_gpus(self.cfg.slurm, gpus):  # the job's GPUs by UUID
                    builder.note(p)
            if s.gpu_selection.observe(readings, gpus):
                _select_gpus(builder, gpus, s.gpu_selection)
                s.gpu.set_counted(builder.gpu_uuids)
        return gpus

    def _pace(self, s: _Sampling) -> None:
        """Between two samples: a checkpoint when due, then wait for the next tick (serving the pipes)."""
        now_mono = time.monotonic()
        if s.checkpoint_due(now_mono):
            s.builder.set_smaps_age(s.tree.oldest_smaps_age(now_mono))
            self._save(s.builder, running=True)
        elif self.figures.asked(now_mono, time.time()):  # a history list in another process shows this run
            self.figures.write(s.builder)
        self._wait(s.next_sample_time(self.interval), s.pidfd)
        if s.pidfd >= 0 and self.cfg.mode == ATTACH and readable(s.pidfd):
            self.end.main_gone = True

    def _wait(self, deadline: float, pidfd: int) -> None:  # noqa: C901 — the loop's single wait: every wake-up reason in one place
        """Until `deadline` (monotonic), copying the command's output and moving messages meanwhile; early when
        a signal needs the loop or the main process exited (`pidfd` readable)."""
        wake_fd = self.launcher.wake_fd
        while (timeout := deadline - time.monotonic()) > 0:
            readers = [fd for fd in (wake_fd, pidfd, self.requests.fd, self.blocks.fd) if fd >= 0] + self.tee.readable()
            writers = self.tee.writable()
            if self.pipe.pending:
                writers.append(self.pipe.fd)
            ready, writable, _ = select.select(readers, writers, [], timeout)
            for fd in writable:
                if fd == self.pipe.fd:
                    self.pipe.flush()
                if fd in self.tee.pending:
                    self.tee.flush(fd)
            for fd in ready:
                if fd in self.tee.sources:
                    self.tee.read(fd)
                elif fd == self.requests.fd:
                    self._serve_requests()
                elif fd == self.blocks.fd:
                    self.blocks.serve()
            if wake_fd in ready:
                try:
                    os.read(wake_fd, 512)
                except BlockingIOError:
                    pass
                if self.launcher.stop_requested or self.launcher.to_forward:
                    return
            if pidfd in ready:
                return

    def _on_reaped(
        self, pid: int, utime: float, stime: float, maxrss: int, exit_code: int, who: tuple[str, int, bool] | None
    ) -> None:
        if self.builder is not None:
            self.builder.reaped(pid, utime, stime, maxrss, exit_code, who)
        if self.oom is not None:
            self.oom.reaped(pid, exit_code)

    def _sampling_failed(self, builder: SummaryBuilder, e: Exception) -> None:
        self.sampling_errors += 1
        if self.sampling_errors == 1:
            builder.note(
                f"a sample failed ({type(e).__name__}: {e}{_raised_at(e)}); tracking went on — please report this"
            )

    # ------------------------------------------------------------------ the end

    def _descendants(self, s: _Sampling) -> list[int]:
        """The tree's processes still running, but for the command itself."""
        return [pid for pid in s.tree.handles if pid != self.main_pid and running(pid)]

    def _finish_run(self, s: _Sampling) -> int:
        self.end.check_front_end(s.builder.note, s.builder.start_time)
        s.builder.set_smaps_age(s.tree.oldest_smaps_age(time.monotonic()))
        self.blocks.finish()  # before the output helper forks: it must not hold the FIFO
        self.gpu_ooms.settle(self, final=True)
        s.gpu.stop_watch()  # its reads are kept (the blocks above took theirs)
        s.builder.final_gpu_energy(s.gpu.read_energy())  # the energy counters at the end, read once more
        # the last read's failures and any process gone since: one end each, whatever we saw of it
        _new, gone = s.tree.discover()
        s.builder.vanished([h.pid for h in gone], alive=s.tree.handles.keys())
        alive = TreeStop.alive_at_end(s)  # notes what a stop from the view left running: once
        s.builder.close(alive=alive)
        self.end.note_survivors(s.builder.note, self._descendants(s), s.builder.start_time)
        if self.stop_mirror is not None:
            self.stop_mirror.release()
        self.tee.linger(self._become_tee_helper)
        if self.output_file is not None:
            self.output_file.poll()
        s.builder.accounting_at_end(s.gpu.read_accounting_at_end([pid for pid in s.tree.handles if running(pid)]))
        self._finish(s.builder)
        s.close()
        return self.launcher.exit_code(default=0)

    def _crashed(self, e: Exception) -> int:
        """Tracking failed outside a sample (a bug): save what was measured, clean up, still wait for the command."""
        what = f"{type(e).__name__}: {e}"
        builder = self.builder
        if builder is not None:
            builder.note(f"tracking failed ({what}); the figures stop there — please report this")
        if self.launcher.launched:  # the command keeps running: forward signals to it and wait for it, as before
            self.launcher.wait_for_exit(self._on_reaped, lambda: self._wait(time.monotonic() + 0.2, -1))
        try:
            if self.sampling is not None:  # no thread of ours across the output helper's fork
                self.sampling.gpu.stop_watch()
            if self.stop_mirror is not None:
                self.stop_mirror.release()
            self.tee.linger(self._become_tee_helper)
        except Exception:
            pass
        saved = False
        if builder is not None:
            try:
                self._finish(builder)
                saved = True
            except Exception as e2:
                what += f"; the session could not be saved either ({type(e2).__name__}: {e2})"
        if not saved:
            self.launcher.remove_cgroup()
            self.pipe.send("error", {"exit_code": 1, "message": f"sampler crashed: {what}"})
        return self.launcher.exit_code(default=1)

    def _finish(self, builder: SummaryBuilder) -> None:
        if self.sampling is not None and self.sampling.gpu.changed():  # stopped answering at the end
            _bind_gpu(builder, self.sampling.gpu)
        outcome = Outcome(status="exited", smaps_max_age=builder.outcome.smaps_max_age)
        close_counters = getattr(self.oom.counters, "close", None) if self.oom is not None else None
        if close_counters is not None:
            close_counters()  # its file in the job's cgroup would keep the removed group in the kernel
        cgroup = self.cgroup
        if cgroup is not None:
            peak = cgroup.peak()
            if peak is not None:
                outcome.cgroup_peak, outcome.cgroup_source = peak, cgroup.source
                outcome.cgroup_cache = cgroup.cache()
            cgroup.remove()
        main_exit = self.launcher.main_exit
        if main_exit is not None:
            outcome.exit_code, outcome.exit_signal = main_exit
        outcome.status, note = self.launcher.outcome()
        if note:
            outcome.notes.append(note)
        if main_exit and main_exit[1] == signal.SIGKILL and self.oom is not None and self.main_pid in self.oom.killed:
            outcome.notes.append("the command was killed by the kernel's OOM killer")
        if self.pipe.dropped:
            outcome.notes.append(f"{self.pipe.dropped} live-view messages dropped while the front end was not reading")
        builder.finish(outcome)
        builder.events.add("stop", builder.end_time, f"tracking stopped: {outcome.status}", pid=self.main_pid)
        summary = self._save(builder, running=False)
        self.figures.close()
        self.pipe.send("summary", {"summary": summary})

    def _save(self, builder: SummaryBuilder, running: bool) -> dict[str, Any]:
        return save_session(self.cfg, self.store_dir, self.session_id, self.interval, builder, running=running)

    # ------------------------------------------------------------------ the command's output

    def _become_tee_helper(self, keep: set[int]) -> None:
        """In the forked helper that copies the command's output on: nothing of the sampler's but those pipes."""
        self.launcher.release_signals()
        output_fd = self.output_file.fd if self.output_file is not None else -1
        for fd in (self.pipe.fd, self.requests.fd, output_fd, self.launcher.wake_fd):
            if fd >= 0 and fd not in keep:
                os.close(fd)
        self.pipe.close()
        self.builder = None  # no events, no dumps: the session is the sampler's, already saved

    def _scan_output(self, data: bytes) -> None:
        line = self.output_watch.feed(data)
        if line is not None:
            self._oom(f"out-of-memory error in the command's output: {line}", "output", self.main_pid or None)

    def _serve_requests(self) -> None:
        for request in self.requests.read():
            TreeStop.serve(request, self.sampling, self.cfg)
            if request.get("cmd") == "oom":
                pid = request.get("pid")
                message = str(request.get("message", "out-of-memory error"))[:1000]
                self._oom(message, "api", pid if isinstance(pid, int) else None)

    # ------------------------------------------------------------------ OOM events and dumps

    def _check_oom(self, builder: SummaryBuilder) -> None:
        """Once a sample: an oom_kill counter rise matched with a death of ours is an OOM event."""
        killed = self.oom.check() if self.oom is not None else None
        if killed is None:
            return
        who = builder.process_label(killed.pid)
        self._oom(killed.message(who[0] if who else "?"), "kernel", killed.pid)

    def _oom(self, message: str, source: str, pid: int | None) -> None:
        builder = self.builder
        if builder is None:
            return
        now = time.time()
        event: dict[str, Any] = {
            "time": now,
            "elapsed": round(now - builder.start_time, 3),
            "type": "oom",
            "message": message,
            "source": source,
        }
        if pid is not None:
            event["pid"] = pid
        dump = self._write_dump(builder, now, event) if self.dumps.due(now) else None
        if dump is not None:
            event["dump"] = str(dump)
        builder.events.add("oom", now, message, source=source, pid=pid, dump=event.get("dump"))

    def _write_dump(self, builder: SummaryBuilder, now: float, event: dict[str, Any], extra: Any = None) -> Path | None:
        recorder = builder.recorder
        if recorder is None:
            return None
        contents = _dump_contents(self, builder, recorder, event, extra)
        try:
            return self.dumps.write(now, event, contents)
        except (OSError, TypeError, ValueError) as e:  # a dump is never worth the run: tracking goes on
            builder.note(f"OOM dump NOT written: {e}")
            return None


def _dump_contents(
    engine: Engine, builder: SummaryBuilder, recorder: ev.FlightRecorder, event: dict[str, Any], extra: Any = None
) -> DumpContents:
    """What an OOM dump bundle holds: the flight recorder, the events, the processes, GPUs and limits."""
    return DumpContents(
        command=builder.command,
        pid=engine.main_pid,
        recorder=recorder,
        events=[*builder.events.events, event],
        processes=builder.last_recorded_processes(),
        gpus=dump_gpus(engine.last_gpus),
        limits=dump_limits(engine.cfg, engine.cgroup, builder.system_capacity, builder.gpu_totals()),
        extra=extra,
    )


def _raised_at(e: Exception) -> str:
    """ " at file.py:LINE" of the innermost frame of `e`'s traceback."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}" if tb is not None else ""


def _bind_gpu(builder: SummaryBuilder, gpu: GpuBackend) -> None:
    """What the builder keeps of the GPU backend's state; again whenever it changes (`GpuBackend.changed`)."""
    builder.gpu_note = gpu.note
    builder.gpu_not_responding = gpu.not_responding
    for part in builder.parts:
        if isinstance(part, BlocksPart):
            part.stats.gpu_watch = gpu.watcher  # each block's GPU peak from the watcher's reads over its run


def _gpu_selection(cfg: EngineConfig, main_pid: int, vendor: str | None) -> GpuSelection:
    attached = cfg.mode == ATTACH
    env = read_environ(main_pid) if attached else os.environ
    where = "the command's environment" if attached else "gputop-track's environment"
    return GpuSelection(cfg.gpus, env, where, variables_for(vendor))


def _select_gpus(builder: SummaryBuilder, gpus: list[Any], selection: GpuSelection) -> None:
    if selection.spec is None:
        builder.select_gpus(None, selection.reason)
        return
    chosen, problems = resolve_gpu_selection(gpus, selection.spec, as_runtime=not selection.fixed, cuda_order=True)
    builder.select_gpus(chosen, selection.reason)
    for p in problems:
        builder.note(f"GPU selection: {p}")


def _open_pidfd(pid: int) -> int:
    """A pidfd of `pid` (readable once it exited), or -1."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return -1


def run_forked_child(cfg: EngineConfig, out_fd: int, ledger: RelayLedger | None = None) -> None:
    """Entry point in a forked child: never returns."""
    code = 1
    try:
        os.setpgid(0, 0)  # out of the terminal's job: tty signals reach the command, not us
        # the front end blocks the signals it relays; they stay blocked (a Ctrl-C pending since the fork waits)
        # until the Launcher has its handlers in place and unblocks them: never a KeyboardInterrupt in here
        signal.pthread_sigmask(signal.SIG_SETMASK, set(RELAYED_SIGNALS))
        engine = Engine(cfg, out_fd)
        if ledger is not None:
            engine.launcher.on_relayed = ledger.relayed
        code = engine.run()
    except BaseException as e:  # a crash here must still tell the front end
        try:
            msg = json.dumps({"kind": "error", "exit_code": 1, "message": f"sampler crashed: {e!r}"})
            os.write(out_fd, msg.encode() + b"\n")
        except OSError:
            pass
    finally:
        os._exit(code if isinstance(code, int) else 1)


def main() -> None:
    """`python -m gputop_tracker.core.sampling.sampler CONFIG_JSON`: messages on stdout (used by the Python API)."""
    _reserve_standard_fds()  # a program with stderr closed spawns us so: no FIFO or pipe of ours may take fd 2
    cfg = EngineConfig(**json.loads(sys.argv[1]))
    out_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing else may write into the message pipe
    sys.exit(Engine(cfg, out_fd).run())


def _reserve_standard_fds() -> None:
    """fds 0-2 that are closed get /dev/null, so the next file we open cannot take a standard number."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
            except OSError:
                pass


if __name__ == "__main__":
    main()
