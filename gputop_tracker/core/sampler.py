"""The sampler process: launches or attaches, samples the tree each interval, and saves the session.

It runs apart from the front end (forked by the CLI, spawned by the API) and owns everything a report
needs, so a busy or crashed front end never costs a sample or the session. It talks over one pipe:
one JSON message per line — `started`, `sample` (only when the front end asked for them), `event`
(alerts and the event timeline, always), `error`, `summary`. The API's sampler also reads requests from
its stdin (one JSON object a line: `{"cmd": "oom", ...}` from `Tracker.capture_oom`).
It stays light: no pydantic, no textual, no psutil on this path.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gputop_tracker._version import SCHEMA_VERSION
from gputop_tracker.core import cgroup as cgroups
from gputop_tracker.core import events as ev
from gputop_tracker.core import paths, store
from gputop_tracker.core.config import MIN_INTERVAL, EngineConfig
from gputop_tracker.core.gpu import open_backend, resolve_gpu_selection
from gputop_tracker.core.procfs import HostReader, ProcessTree, parse_stat, read_cmdline
from gputop_tracker.core.summary import Outcome, SummaryBuilder

PR_SET_CHILD_SUBREAPER = 36
CHECKPOINT_PERIOD = 60.0  # a running session is rewritten this often, so a kill -9 loses at most this
PROGRESS_PERIOD = 1.0  # seconds between the live view's "run so far" figures (the report's own summary)
DROPPABLE = frozenset({"sample", "progress"})  # dropped while the front end does not read; the rest is queued
OUT_QUEUE_MAX = 8 << 20  # bytes of queued messages (events, summary) held for a front end that does not read
FINAL_FLUSH_SECONDS = 5.0  # the final summary waits this long for a stopped front end, then we give up
TEE_BUFFER_MAX = 16 << 20  # --watch-output: bytes held per destination before we stop reading the command's pipe
TEE_LINGER_SECONDS = 5.0  # --watch-output: how long we keep copying after the command exited (background writers)
OOM_SIGKILL_WINDOW = 3.0  # seconds between an oom_kill counter rise and a child we reaped dead of SIGKILL


class Engine:
    def __init__(self, cfg: EngineConfig, out_fd: int) -> None:
        self.cfg = cfg
        self.out_fd = out_fd
        self.interval = max(cfg.interval, MIN_INTERVAL)
        self.stop_requested = False
        self.forward: list[int] = []
        self.main_pid = 0
        self.popen: subprocess.Popen[bytes] | None = None
        self.cgroup: cgroups.JobCgroup | None = None
        self.session_id = cfg.session_id or store.new_session_id()
        self.store_dir = paths.store_dir(cfg.store)
        self.session_path: Path | None = None
        self.main_exit: tuple[int | None, int | None] | None = None  # (exit code, signal)
        self.sampling_errors = 0
        self.spawner_hwm = 0
        self.builder: SummaryBuilder | None = None
        self.oom_counters: ev.OomCounters | None = None
        self.output_watch = ev.OutputWatch()
        self.tees: dict[int, int] = {}  # pipe read fd -> where the command's output goes (--watch-output)
        self.output_fd = -1  # the command's output file (live TUI), read as it grows
        self.control_fd = 0 if cfg.control_stdin else -1
        self._control_buf = b""
        self.n_dumps = 0
        self.last_dump = -1e18
        self.next_progress = 0.0  # monotonic time of the next "progress" message
        self.last_gpus: list[Any] = []
        self.oom_reported: set[int] = set()
        # OOM attribution: a counter rise is matched with a death of ours in the same or the next sample
        # (or, for a child we reaped dead of SIGKILL, within OOM_SIGKILL_WINDOW seconds)
        self._check_no = 0
        self._oom_rise: tuple[str, int, float] | None = None  # (label, check number, monotonic time)
        self._oom_deaths: list[tuple[int, int | None, int, float]] = []  # (pid, signal or None, check, time)
        self._reaped_at: dict[int, float] = {}  # pids we reaped (their status is known) -> monotonic time
        self._outbuf = bytearray()  # messages the front end has not taken yet (whole lines)
        self.dropped_messages = 0
        self.tee_out: dict[int, bytearray] = {}  # --watch-output: destination fd -> bytes not yet written there
        self._tee_bulk: dict[int, bool] = {}  # destination takes whole buffers (file, or already non-blocking)
        self.wake_r = -1
        if out_fd >= 0:
            try:
                os.set_blocking(out_fd, False)  # a stopped front end must never stall sampling
            except OSError:
                pass

    # ------------------------------------------------------------------ messages

    def send(self, kind: str, payload: dict[str, Any]) -> None:
        """One message to the front end, never blocking: `sample`/`progress` are dropped (and counted) while
        the pipe is full, the others queued (bounded) and written on later sends or when the pipe drains."""
        if self.out_fd < 0:
            return
        data = json.dumps({"kind": kind, **payload}, separators=(",", ":")).encode() + b"\n"
        if self._outbuf:
            self._flush_out()
        if self._outbuf:
            if kind in DROPPABLE or len(self._outbuf) + len(data) > OUT_QUEUE_MAX:
                self.dropped_messages += 1
            else:
                self._outbuf += data
            return
        try:
            n = os.write(self.out_fd, data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:  # the front end is gone: keep tracking, still save the session
            self._out_gone()
            return
        if n == 0 and kind in DROPPABLE:
            self.dropped_messages += 1
        elif n < len(data):
            self._outbuf += data[n:]  # the rest of a line already begun must follow, whatever its kind

    def _out_gone(self) -> None:
        self.out_fd = -1
        self._outbuf.clear()

    def _flush_out(self) -> None:
        while self._outbuf and self.out_fd >= 0:
            try:
                n = os.write(self.out_fd, self._outbuf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._out_gone()
                return
            del self._outbuf[:n]

    def _final_flush(self, timeout: float = FINAL_FLUSH_SECONDS) -> None:
        """At the very end: wait (bounded) for a front end that stopped reading to take the queued messages."""
        deadline = time.monotonic() + timeout
        while self._outbuf and self.out_fd >= 0:
            self._flush_out()
            left = deadline - time.monotonic()
            if not self._outbuf or left <= 0:
                break
            try:
                select.select([], [self.out_fd], [], min(left, 0.5))
            except (OSError, ValueError):
                break

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGUSR1 or self.cfg.mode == "attach":
            self.stop_requested = True
        else:
            self.forward.append(signum)

    def _install_signals(self) -> int:
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(s, self._on_signal)
        return r

    # ------------------------------------------------------------------ launch

    def launch(self) -> bool:
        cfg = self.cfg
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        if cfg.use_cgroup:
            self.cgroup = cgroups.create_job_cgroup(self.session_id)
        if (
            cfg.enforce_mem_limit
            and cfg.mem_limit
            and (self.cgroup is None or not self.cgroup.set_limit(cfg.mem_limit))
        ):
            self._fail(2, "--enforce-mem-limit: cannot create a memory cgroup with a limit on this machine")
            return False
        join_fd = self.cgroup.join_fd() if self.cgroup else -1
        stdout, stderr = cfg.stdout, cfg.stderr
        child_ends: list[int] = []
        if cfg.watch_output:
            # tee: the command writes into pipes; we copy every byte on to where it would have gone
            for target, default in ((cfg.stdout, 1), (cfg.stderr, 2)):
                r, w = os.pipe()
                os.set_blocking(r, False)
                self.tees[r] = target if target is not None else default
                child_ends.append(w)
            stdout, stderr = child_ends

        def join_cgroup() -> None:
            if join_fd >= 0:
                try:
                    os.write(join_fd, str(os.getpid()).encode())
                except OSError:
                    pass

        try:
            self.spawner_hwm = _own_hwm()
            self.popen = subprocess.Popen(
                cfg.argv,
                stdin=subprocess.DEVNULL if cfg.stdin is None and cfg.control_stdin else cfg.stdin,
                stdout=stdout,
                stderr=stderr,
                process_group=cfg.process_group,
                start_new_session=cfg.new_session,
                preexec_fn=join_cgroup if join_fd >= 0 else None,
            )
        except FileNotFoundError:
            self._fail(127, f"{cfg.argv[0]}: command not found")
            return False
        except PermissionError:
            self._fail(126, f"{cfg.argv[0]}: permission denied")
            return False
        except OSError as e:
            self._fail(126, f"{cfg.argv[0]}: cannot run: {e.strerror}")
            return False
        finally:
            if join_fd >= 0:
                os.close(join_fd)
            for fd in child_ends:
                os.close(fd)
        self.main_pid = self.popen.pid
        return True

    def _fail(self, code: int, message: str) -> None:
        if self.cgroup:
            self.cgroup.remove()
        self.send("error", {"exit_code": code, "message": message})

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
            self._final_flush()

    def _run(self) -> int:
        cfg = self.cfg
        self.wake_r = wake_r = self._install_signals()
        start = time.time()
        if cfg.mode == "launch":
            if not self.launch():
                return 1
        else:
            self.main_pid = cfg.pid
            self.cgroup = cgroups.existing_job_cgroup(cfg.pid)
        # many open handles for a large tree: raised only now, so the command keeps the limits it was given
        try:
            _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
        try:
            pidfd = os.pidfd_open(self.main_pid)
        except OSError:
            pidfd = -1
        gpu = open_backend(cfg.simulate_gpus)
        exclude = {os.getpid(), *cfg.exclude}
        tree = ProcessTree(self.main_pid, exclude=exclude)
        host = HostReader()
        builder = self._new_builder(start, gpu)
        self.builder = builder
        if cfg.output_path:
            try:
                self.output_fd = os.open(cfg.output_path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self.output_fd = -1
        self.oom_counters = ev.OomCounters(
            self.cgroup.path if self.cgroup else None, self.cgroup.version if self.cgroup else None
        )
        self.send(
            "started",
            {"pid": self.main_pid, "session_id": self.session_id, "store": str(self.store_dir)},
        )
        builder.events.add(
            "start",
            start,
            (f"started {shlex.join(builder.command)}" if cfg.mode == "launch" else f"attached to {self.main_pid}")[
                :300
            ],
            pid=self.main_pid,
        )
        selection_done = False
        next_tick = time.monotonic()
        next_checkpoint = next_tick  # the first checkpoint right after the first sample, never before it
        finished = False
        while True:
            self._forward_signals()
            self._reap(builder)
            if self.main_exit is not None or self.stop_requested:
                finished = True
            try:
                _new, gone = tree.discover()
                now_mono = time.monotonic()
                # a parent we reaped in this same pass is no longer in the tree, but its rusage (banked) already
                # holds the time of the children it waited for: the CPU ledger knows
                builder.vanished([h.pid for h in gone], alive=tree.handles.keys())
                for h in gone:
                    if self._reaped_at.pop(h.pid, None) is None:  # vanished: its exit status is unknown to us
                        self._oom_deaths.append((h.pid, None, self._check_no, now_mono))
                self._check_oom_kill()
                if tree.root_gone and not tree.handles:
                    finished = True
                readings = tree.read(now_mono)
                gpus = gpu.read([r.handle.pid for r in readings])
                self.last_gpus = gpus
                if gpus and not selection_done:
                    selection_done = True
                    self._select_gpus(builder, gpus)
                sample = builder.add(
                    time.time(), readings, gpus, host.read(), want_sample=self.out_fd >= 0 and cfg.stream_samples
                )
                if sample is not None:
                    if now_mono >= self.next_progress:
                        # the report's figures so far, computed where the report is (0.1 ms at 100 processes);
                        # sent before the sample, so a view draws both in one update
                        self.next_progress = now_mono + 0.95 * PROGRESS_PERIOD  # ticks jitter by ms
                        self.send("progress", {"summary": builder.summary(details=False)})
                    self.send("sample", {"sample": sample})
                self._poll_output()
            except Exception as e:  # a bug in one sample must never cost the run or its session
                self._sampling_failed(builder, e)
                if tree.root_gone and not tree.handles:
                    finished = True
            if finished:
                break
            now_mono = time.monotonic()
            if now_mono >= next_checkpoint:
                next_checkpoint = now_mono + CHECKPOINT_PERIOD
                builder.set_smaps_age(tree.oldest_smaps_age(now_mono))
                self._save(builder, running=True)
            next_tick += self.interval
            if next_tick < time.monotonic():  # a slow sample: skip ahead, never pile up
                next_tick = time.monotonic() + self.interval
            self._wait(next_tick, pidfd, wake_r)
            if pidfd >= 0 and cfg.mode == "attach" and _readable(pidfd):
                self.stop_requested = True
        builder.set_smaps_age(tree.oldest_smaps_age(time.monotonic()))
        # the last read's failures and any process gone since: one end each, whatever we saw of it
        _new, gone = tree.discover()
        builder.vanished([h.pid for h in gone if h.pid not in builder.ledger.reaped], alive=tree.handles.keys())
        builder.close(alive={pid for pid in tree.handles if _alive(pid)})
        self._linger_tees()
        self._poll_output()
        self._finish(builder)
        gpu.close()
        tree.close()
        host.close()
        code = self.main_exit[0] if self.main_exit else None
        return code if code is not None else 0

    def _crashed(self, e: Exception) -> int:
        """Tracking failed outside a sample (a bug): save what was measured, clean up, still wait for the command."""
        what = f"{type(e).__name__}: {e}"
        builder = self.builder
        if builder is not None:
            builder.note(f"tracking failed ({what}); the figures stop there — please report this")
        if self.cfg.mode == "launch" and self.popen is not None:
            # the command keeps running: go on forwarding signals to it and wait for it, as we would have
            while self.main_exit is None:
                try:
                    self._forward_signals()
                    self._reap(builder)
                    if self.main_exit is None:
                        self._wait(time.monotonic() + 0.2, -1, self.wake_r)
                except Exception:
                    try:  # no bookkeeping left to trust: just wait for the command itself
                        _pid, status = os.waitpid(self.main_pid, 0)
                        code = os.waitstatus_to_exitcode(status)
                        self.main_exit = (128 - code, -code) if code < 0 else (code, None)
                    except ChildProcessError:
                        self.main_exit = (None, None)
        try:
            self._linger_tees()
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
            if self.cgroup is not None:
                self.cgroup.remove()
            self.send("error", {"exit_code": 1, "message": f"sampler crashed: {what}"})
        final = self.main_exit[0] if self.main_exit else None
        return final if final is not None else 1

    def _sampling_failed(self, builder: SummaryBuilder, e: Exception) -> None:
        self.sampling_errors += 1
        if self.sampling_errors == 1:
            where = ""
            tb = e.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            if tb is not None:
                where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
            builder.note(f"a sample failed ({type(e).__name__}: {e}{where}); tracking went on — please report this")

    def _wait(self, deadline: float, pidfd: int, wake_r: int) -> None:
        while True:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return
            fds = [
                *([wake_r] if wake_r >= 0 else []),
                *([pidfd] if pidfd >= 0 else []),
                *self._tee_readable(),
                *([self.control_fd] if self.control_fd >= 0 else []),
            ]
            wfds = [t for t, buf in self.tee_out.items() if buf]
            if self._outbuf and self.out_fd >= 0:
                wfds.append(self.out_fd)
            ready, writable, _ = select.select(fds, wfds, [], timeout)
            for fd in writable:
                if fd == self.out_fd:
                    self._flush_out()
                if fd in self.tee_out:
                    self._flush_tee(fd)
            for fd in ready:
                if fd in self.tees:
                    self._tee(fd)
                elif fd == self.control_fd:
                    self._control()
            if wake_r in ready:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
                if self.stop_requested or self.forward:
                    return
            if pidfd in ready:
                return

    def _forward_signals(self) -> None:
        while self.forward:
            sig = self.forward.pop(0)
            if self.main_pid and self.main_exit is None:
                try:
                    os.kill(self.main_pid, sig)
                except ProcessLookupError:
                    pass

    def _reap(self, builder: SummaryBuilder | None) -> None:
        if self.cfg.mode != "launch":
            return
        while True:
            try:
                # peek first (WNOWAIT): the zombie's /proc/PID/stat still names it
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if info is None:
                    return
                who = _zombie_name(info.si_pid)
                pid, status, ru = os.wait4(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            if builder is not None:
                builder.reaped(pid, ru.ru_utime, ru.ru_stime, ru.ru_maxrss * 1024, code, who)
            now = time.monotonic()
            self._reaped_at[pid] = now
            if code == -signal.SIGKILL:  # the only way the OOM killer kills: a candidate
                self._oom_deaths.append((pid, signal.SIGKILL, self._check_no, now))
            if pid == self.main_pid:
                if self.popen is not None:
                    self.popen.returncode = code
                if code < 0:
                    self.main_exit = (128 - code, -code)
                else:
                    self.main_exit = (code, None)

    def _select_gpus(self, builder: SummaryBuilder, gpus: list[Any]) -> None:
        spec = self.cfg.gpus
        reason = "--gpus"
        if spec is None:
            env = _environ(self.main_pid) if self.cfg.mode == "attach" else dict(os.environ)
            spec = env.get("CUDA_VISIBLE_DEVICES")
            reason = f"CUDA_VISIBLE_DEVICES={spec}"
        if spec is None:
            builder.select_gpus(None, "every GPU: no --gpus and no CUDA_VISIBLE_DEVICES")
            return
        chosen, problems = resolve_gpu_selection(gpus, spec)
        builder.select_gpus(chosen, reason)
        for p in problems:
            builder.note(f"GPU selection: {p}")

    def _finish(self, builder: SummaryBuilder) -> None:
        outcome = Outcome(status="exited", smaps_max_age=builder.outcome.smaps_max_age)
        if self.cgroup is not None:
            peak = self.cgroup.peak()
            if peak is not None:
                outcome.cgroup_peak, outcome.cgroup_source = peak, self.cgroup.source
            self.cgroup.remove()
        if self.main_exit is not None:
            outcome.exit_code, outcome.exit_signal = self.main_exit
            outcome.status = "killed" if self.main_exit[1] else "exited"
            if self.main_exit[1] == signal.SIGKILL and self.main_pid in self.oom_reported:
                outcome.notes.append("the command was killed by the kernel's OOM killer")
        elif self.cfg.mode == "attach":
            outcome.status = "stopped" if _alive(self.main_pid) else "exited"
        else:
            outcome.status = "detached"
            outcome.notes.append("tracking stopped while the command was still running (detached)")
        if self.dropped_messages:
            outcome.notes.append(
                f"{self.dropped_messages} live-view messages dropped while the front end was not reading"
            )
        builder.finish(outcome)
        builder.events.add("stop", builder.end_time, f"tracking stopped: {outcome.status}", pid=self.main_pid)
        summary = self._save(builder, running=False)
        self.send("summary", {"summary": summary})

    def _save(self, builder: SummaryBuilder, running: bool) -> dict[str, Any]:
        summary = builder.summary()
        summary["session_id"] = self.session_id
        if self.cfg.save:
            self.session_path = paths.session_file(self.store_dir, self.session_id)
            summary["session_path"] = str(self.session_path)
        session = {
            "schema_version": SCHEMA_VERSION,
            "meta": {
                "id": self.session_id,
                "status": "running" if running else "finished",
                "command": builder.command,
                "mode": self.cfg.mode,
                "pid": self.main_pid,
                "engine_pid": os.getpid(),
                "host": builder.host,
                "start_time": builder.start_time,
                "end_time": None if running else builder.end_time,
                "exit_code": builder.outcome.exit_code,
                "interval": self.interval,
            },
            "summary": summary,
            "timeline": builder.timeline(),
        }
        if self.cfg.save:
            try:
                # a running checkpoint is atomic but not worth an fsync (the final save has one)
                store.save_session(self.store_dir, session, durable=not running)
            except OSError as e:
                if not running:
                    summary["notes"].append(f"session NOT saved: {e}")
                    summary["session_path"] = None
        return summary

    # ------------------------------------------------------------------ events and OOM dumps

    def _new_builder(self, start: float, gpu: Any) -> SummaryBuilder:
        cfg = self.cfg
        mem_limit, limit_source = cfg.mem_limit, "--mem-limit"
        cgroup_limit = self.cgroup.limit() if self.cgroup else None
        if not mem_limit and cgroup_limit:
            mem_limit, limit_source = cgroup_limit, "the job's cgroup limit"
        builder = SummaryBuilder(
            main_pid=self.main_pid,
            command=cfg.argv if cfg.mode == "launch" else _cmdline(self.main_pid),
            mode=cfg.mode,
            interval=self.interval,
            start_time=start,
            n_expected_cores=cfg.n_expected_cores,
            simulated_gpus=gpu.simulated,
            gpu_note=gpu.note,
            gpu_problems=gpu.problems,  # live: notes the GPU backend gathers while running
            spawner_hwm=self.spawner_hwm,
            mem_limit=mem_limit,
            mem_limit_source=limit_source,
            warn_at=cfg.warn_at,
            critical_at=cfg.critical_at,
            recorder=ev.FlightRecorder(cfg.flight_seconds, self.interval) if cfg.flight_seconds > 0 else None,
            event_sink=lambda e: self.send("event", {"event": e}),
        )
        if cgroup_limit:
            builder.note(f"memory limit of the job's cgroup: {cgroup_limit} bytes")
        return builder

    def _check_oom_kill(self) -> None:
        """Once a sample: did an oom_kill counter rise (the baseline moves every sample) while one of ours died
        of SIGKILL (reaped by us) or vanished with a status we never saw? Then the OOM killer did it.

        A rise and an unknown death match in the same or the next sample; a SIGKILL we reaped, within
        OOM_SIGKILL_WINDOW seconds (the victim can take a while to exit). Exits we reaped with any other
        status are never candidates, whatever happened elsewhere on the machine."""
        if self.oom_counters is None or self.builder is None:
            return
        self._check_no += 1
        now = time.monotonic()
        rose = self.oom_counters.rose()
        if rose is not None:
            self._oom_rise = (rose, self._check_no, now)
        for pid in [p for p, t in self._reaped_at.items() if now - t > max(30.0, 3 * self.interval)]:
            del self._reaped_at[pid]

        def near(sig: int | None, check: int, t: float, rise: tuple[str, int, float]) -> bool:
            if sig == signal.SIGKILL and abs(t - rise[2]) <= max(OOM_SIGKILL_WINDOW, 3 * self.interval):
                return True
            return abs(check - rise[1]) <= 1

        window = max(OOM_SIGKILL_WINDOW, 3 * self.interval)
        self._oom_deaths = [d for d in self._oom_deaths if now - d[3] <= window]
        rise = self._oom_rise
        if rise is None:
            return
        matched = [d for d in self._oom_deaths if near(d[1], d[2], d[3], rise)]
        if not matched:
            if now - rise[2] > window:
                self._oom_rise = None
            return
        pid, sig, _check, _t = next((d for d in matched if d[0] == self.main_pid), matched[0])
        self._oom_rise = None
        self._oom_deaths = [d for d in self._oom_deaths if d not in matched]
        self.oom_reported.add(pid)
        who = self.builder.process_label(pid)
        name = who[0] if who else "?"
        how = "killed (SIGKILL)" if sig is not None else "gone"
        self._oom(f"process {pid} ({name}) {how} by the OOM killer ({rise[0]})", "kernel", pid)

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
        dump = self._write_dump(event) if now - self.last_dump >= 5.0 else None
        if dump is not None:
            self.last_dump = now
            event["dump"] = str(dump)
        builder.events.add("oom", now, message, source=source, pid=pid, dump=event.get("dump"))

    def _write_dump(self, event: dict[str, Any]) -> Path | None:
        cfg = self.cfg
        builder = self.builder
        if not cfg.save or cfg.oom_dumps <= 0 or builder is None or builder.recorder is None:
            return None
        self.n_dumps += 1
        directory = self.store_dir / f"{self.session_id}{ev.DUMP_INFIX}{self.n_dumps}"
        processes = builder.last_recorded_processes()
        gpus = [
            {k: v for k, v in vars(g).items() if not k.startswith("process_")} | {"processes": g.processes}
            for g in self.last_gpus
        ]
        limits = {
            "mem_limit": cfg.mem_limit,
            "mem_limit_enforced": cfg.enforce_mem_limit,
            "cgroup_limit": self.cgroup.limit() if self.cgroup else None,
            "cgroup": str(self.cgroup.path) if self.cgroup else None,
            "system_memory": builder.system_capacity,
            "gpu_memory": builder.gpu_totals(),
            "warn_at": cfg.warn_at,
            "critical_at": cfg.critical_at,
        }
        manifest = {
            "kind": "gputop-tracker oom dump",
            "session_id": self.session_id,
            "session_path": str(paths.session_file(self.store_dir, self.session_id)),
            "command": builder.command,
            "pid": self.main_pid,
            "trigger": event,
            "environment": ev.environment(limits),
        }
        try:
            path = ev.write_dump(
                directory,
                manifest=manifest,
                recorder=builder.recorder,
                events=[*builder.events.events, event],
                processes=processes,
                gpus=gpus,
            )
            ev.prune_dumps(self.store_dir, cfg.oom_dumps, int(cfg.oom_dump_mb * 1e6))
        except OSError as e:
            builder.note(f"OOM dump NOT written: {e}")
            return None
        return path if path.exists() else None

    def _scan(self, data: bytes) -> None:
        line = self.output_watch.feed(data)
        if line is not None:
            self._oom(f"out-of-memory error in the command's output: {line}", "output", self.main_pid or None)

    # ------------------------------------------------------------------ --watch-output tee

    def _tee_readable(self) -> list[int]:
        """The command's pipes we read now: not those whose destination already holds TEE_BUFFER_MAX unwritten
        bytes (the command then blocks on its own writes, as it would without --watch-output)."""
        return [r for r, t in self.tees.items() if len(self.tee_out.get(t, b"")) < TEE_BUFFER_MAX]

    def _tee(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # every writer closed it
            os.close(fd)
            del self.tees[fd]
            return
        target = self.tees[fd]
        self.tee_out.setdefault(target, bytearray()).extend(data)
        self._flush_tee(target)
        self._scan(data)

    def _flush_tee(self, target: int) -> None:
        """Write what we can to `target` without blocking; the rest stays buffered, never dropped.

        We never set O_NONBLOCK on the destination (it is shared: a terminal, the user's pipe): a file or an
        already non-blocking fd takes the whole buffer; anything else gets PIPE_BUF-sized writes, each only once
        select() says it is writable (a pipe then has room for it: the write cannot block)."""
        buf = self.tee_out.get(target)
        if not buf:
            return
        bulk = self._tee_bulk.get(target)
        if bulk is None:
            try:
                bulk = stat.S_ISREG(os.fstat(target).st_mode) or not os.get_blocking(target)
            except OSError:
                bulk = False
            self._tee_bulk[target] = bulk
        while buf:
            if not bulk and not _writable(target):
                return
            try:
                n = os.write(target, buf if bulk else buf[: select.PIPE_BUF])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the destination is gone (EPIPE...): what the command would have hit
                buf.clear()
                return
            del buf[:n]

    def _linger_tees(self) -> None:
        """After tracking ends: keep copying until every writer closed the pipes (background processes of the
        command still write) and everything was written, for at most TEE_LINGER_SECONDS; then a small helper
        process takes over the copying, so a late writer never dies of SIGPIPE and no byte is lost."""
        if not self.tees and not any(self.tee_out.values()):
            return
        deadline = time.monotonic() + TEE_LINGER_SECONDS
        while self.tees or any(self.tee_out.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wfds = [t for t, buf in self.tee_out.items() if buf]
            try:
                ready, writable, _ = select.select(self._tee_readable(), wfds, [], min(left, 0.5))
            except OSError:
                break
            for t in writable:
                self._flush_tee(t)
            for fd in ready:
                if fd in self.tees:
                    self._tee(fd)
        if self.tees or any(self.tee_out.values()):
            self._hand_over_tees()

    def _hand_over_tees(self) -> None:
        try:
            pid = os.fork()
        except OSError:
            return
        if pid:  # the helper copies on; we forget the pipes (our copies closed: EOF is the helper's business)
            for fd in self.tees:
                os.close(fd)
            self.tees.clear()
            self.tee_out.clear()
            return
        try:  # the helper: copy until every writer closed the pipes, nothing else
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
                signal.signal(s, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            keep = {*self.tees, *self.tee_out}
            for fd in (self.out_fd, self.control_fd, self.output_fd, self.wake_r):
                if fd >= 0 and fd not in keep:
                    os.close(fd)
            self.out_fd = -1
            self.builder = None  # no events, no dumps: the session is the sampler's, already saved
            while self.tees or any(self.tee_out.values()):
                wfds = [t for t, buf in self.tee_out.items() if buf]
                ready, writable, _ = select.select(self._tee_readable(), wfds, [])
                for t in writable:
                    self._flush_tee(t)
                for fd in ready:
                    self._tee(fd)
        finally:
            os._exit(0)

    def _poll_output(self) -> None:
        if self.output_fd < 0:
            return
        for _ in range(16):  # bounded per sample: a flood of output never stalls sampling
            try:
                data = os.read(self.output_fd, 1 << 16)
            except OSError:
                return
            if not data:
                return
            self._scan(data)

    def _control(self) -> None:
        try:
            data = os.read(self.control_fd, 1 << 16)
        except OSError:
            data = b""
        if not data:  # the front end closed it
            self.control_fd = -1
            return
        self._control_buf += data
        *lines, self._control_buf = self._control_buf.split(b"\n")
        for line in lines:
            try:
                req = json.loads(line)
            except ValueError:
                continue
            if isinstance(req, dict) and req.get("cmd") == "oom":
                pid = req.get("pid")
                self._oom(
                    str(req.get("message", "out-of-memory error"))[:1000], "api", pid if isinstance(pid, int) else None
                )


def _own_hwm() -> int:
    """VmHWM of this process, bytes."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _writable(fd: int) -> bool:
    try:
        return bool(select.select([], [fd], [], 0)[1])
    except (OSError, ValueError):
        return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return b") Z" not in f.read()
    except OSError:
        return False


def _zombie_name(pid: int) -> tuple[str, int] | None:
    """(comm, ppid) of a child not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            name, fields = parse_stat(f.read())
        return name, int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> list[str]:
    return read_cmdline(pid)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def run_forked_child(cfg: EngineConfig, out_fd: int) -> None:
    """Entry point in a forked child: never returns."""
    code = 1
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())  # the front end blocks signals; we must not
        os.setpgid(0, 0)  # out of the terminal's job: tty signals reach the command, not us
        code = Engine(cfg, out_fd).run()
    except BaseException as e:  # a crash here must still tell the front end
        try:
            msg = json.dumps({"kind": "error", "exit_code": 1, "message": f"sampler crashed: {e!r}"})
            os.write(out_fd, msg.encode() + b"\n")
        except OSError:
            pass
    finally:
        os._exit(code if isinstance(code, int) else 1)


def main() -> None:
    """`python -m gputop_tracker.core.sampler CONFIG_JSON`: messages on stdout (used by the Python API)."""
    cfg = EngineConfig(**json.loads(sys.argv[1]))
    out_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing else may write into the message pipe
    sys.exit(Engine(cfg, out_fd).run())


if __name__ == "__main__":
    main()
