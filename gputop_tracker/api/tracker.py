"""The Python API: `with Tracker(): ...` — the same figures as the CLI, inside a script or notebook.

Shaped like gpu-tracker's Tracker (same arguments, `resource_usage`, `str()`, `to_json()`), so its users
can switch by changing the import. The sampler runs in its own process, as for the CLI.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputop_tracker.core.blocks import BlockInbox, InProcess, history_setting
from gputop_tracker.core.integrations import (
    DEFAULT_TOP_PROCESSES,
    Exporter,
    ExportError,
    ExportOptions,
    SessionInfo,
    command_of,
    slurm,
)
from gputop_tracker.core.model import (
    EngineConfig,
    Event,
    EventMessage,
    Failed,
    Message,
    ResourceUsage,
    Sample,
    SampleMessage,
    Started,
    Summary,
    Units,
    parse_byte_size,
    paths,
    validate,
)
from gputop_tracker.core.report import render as report
from gputop_tracker.core.sampling import STOP_SIGNAL, SamplerHandle, prepare, start_spawned
from gputop_tracker.core.summary import EVENT_TYPES, is_oom_exception

if TYPE_CHECKING:
    from gputop_tracker.core.model import Session
    from gputop_tracker.core.report import TimelineColumns

ABANDON_WAIT = 5.0  # seconds for a sampler whose start failed or was interrupted to stop, before SIGKILL
READER_DRAIN = 10.0  # seconds for the reader to see the end of a killed sampler's pipe

EventCallback = Callable[[Event], object]
SampleCallback = Callable[[Sample], object]


_SAMPLERS: set[int] = set()  # pids of the samplers of the Trackers running in this process


def _new_inbox() -> BlockInbox | None:
    """The FIFO this process's blocks report to; removed at exit should the Tracker never be stopped."""
    inbox = BlockInbox.create()
    if inbox is not None:
        inbox.remove_at_exit()
    return inbox


def _hold(path: str, cfg: EngineConfig) -> tuple[Any, InProcess | None]:
    """This process's blocks report to `path`; with the probe, its exit hooks here and on PYTHONPATH too (and
    PyTorch's out-of-memory observer, with its history when asked)."""
    from gputop_tracker.api import blocks

    history = history_setting(cfg) if cfg.gpu_history else ""
    return blocks._push(path), InProcess(path, history) if cfg.probe else None


def _release(held: tuple[Any, InProcess | None]) -> None:
    """A Tracker's blocks back where they were, and the probe's hooks out of this process (PYTHONPATH too)."""
    from gputop_tracker.api import blocks

    sink, probe = held
    blocks._pop(sink)
    if probe is not None:
        probe.off()


class TrackerError(RuntimeError):
    pass


def _gpu_list(gpu_uuids: object) -> str | None:
    """`gpu_uuids` as the CLI's `--gpus` list: a set or list of UUIDs (or indices), or one str (a UUID, or a
    comma-separated list as for `--gpus`); None or empty: every GPU. A str was joined letter by letter."""
    if gpu_uuids is None:
        return None
    if isinstance(gpu_uuids, str):
        return validate.gpu_list("gpu_uuids", gpu_uuids) if gpu_uuids.strip() else None
    if not isinstance(gpu_uuids, Iterable) or isinstance(gpu_uuids, bytes | Mapping):
        raise ValueError(f"gpu_uuids must be a set or list of GPU UUIDs, not {gpu_uuids!r}")
    items = list(gpu_uuids)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int) or (isinstance(item, int) and item < 0):
            raise ValueError(f"gpu_uuids must hold GPU UUIDs (or indices), not {item!r}")
    named = [validate.gpu_entry("gpu_uuids", str(item)) for item in items if str(item).strip()]
    if items and not named:
        raise ValueError(f"gpu_uuids names no GPU: {gpu_uuids!r} (None: every GPU)")
    return ",".join(named) or None


def _event_types(name: str, types: object) -> frozenset[str] | None:
    """Event types to keep (None: all); a misspelt one ("warnings") would silently match nothing."""
    if types is None:
        return None
    wanted = frozenset([types] if isinstance(types, str) else types) if isinstance(types, str | Iterable) else None
    if wanted is None or not wanted:
        raise ValueError(f"{name} must be an event type or a list of them ({', '.join(EVENT_TYPES)}), not {types!r}")
    unknown = sorted(str(t) for t in wanted if t not in EVENT_TYPES)
    if unknown:
        raise ValueError(f"{name}: unknown event type {', '.join(map(repr, unknown))}: one of {', '.join(EVENT_TYPES)}")
    return wanted


def _request(request: object) -> dict[str, int] | None:
    """`request=`: "mem=16G,cpus=4" or {"mem_bytes": …, "cpus": …}; None or "" for none."""
    if request is None or request == "":
        return None
    if not isinstance(request, str | Mapping):
        raise ValueError(f"request must be a str such as 'mem=16G,cpus=4' or a dict, not {request!r}")
    return slurm.check_request(request)


def _store(store: object, save: bool) -> str | None:
    """A store named by the caller, where a session can be saved (checked now: else the run's end said only
    "session NOT saved"); None: the default store."""
    from gputop_tracker.core.store import check_store

    name = validate.optional_path("store", store)
    if name is None:
        return None
    where = paths.store_dir(name).absolute()  # ~ expanded; absolute: the program may chdir before start or session()
    if save:
        check_store(where)  # OutputError, a ValueError
    return str(where)


def _usage_file(name: object) -> Path | None:
    """`resource_usage_file`, checked now: it is written only at stop(), after the work. Its directory is made
    when missing (as it always was), so the nearest one that exists must be a writable directory."""
    path = validate.optional_path("resource_usage_file", name)
    if path is None:
        return None
    if os.path.isdir(path):
        raise ValueError(f"resource_usage_file {path}: is a directory")
    existing = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        why = "not a directory" if not os.path.isdir(existing) else "not writable"
        raise ValueError(f"resource_usage_file {path}: cannot be written ({existing} is {why})")
    return Path(os.path.abspath(path))  # where the caller meant at construction: the program may chdir


def _check_run_numbers(join_timeout: object, gpu_poll: object, n_join_attempts: object, process_id: object) -> None:
    """The Tracker's own numbers (the tracking options are `validate.tracking_options`'); ValueError otherwise."""
    validate.number("join_timeout", join_timeout, 0, 1e6, above=True)
    validate.number("gpu_poll", gpu_poll, 0, validate.MAX_GPU_POLL)
    validate.integer("n_join_attempts", n_join_attempts, 0)
    if process_id is not None:
        validate.integer("process_id", process_id, 1)


def _units(ram_unit: object, gpu_ram_unit: object, time_unit: object) -> Units:
    return Units.parse(
        validate.optional_text("ram_unit", ram_unit, "megabytes"),
        validate.optional_text("gpu_ram_unit", gpu_ram_unit, "megabytes"),
        validate.optional_text("time_unit", time_unit, "hours"),
    )


class Tracker:
    """Tracks a process (this one by default) and all its descendants between start() and stop().

    Single use: one start() and one stop() (stop() again returns the same usage); start() after that raises
    TrackerError. Make a new Tracker for another run."""

    _failure: Failed | None = None
    _stopped = False
    _owner = 0  # the process that started it: only it stops the sampler (a forked child has a copy of us)
    _reader: threading.Thread | None = None
    _exporter: Exporter | None = None  # Prometheus (`prometheus=`): bound at start()

    def __init__(
        self,
        sleep_time: float = 1.0,
        ram_unit: str | None = None,  # None: gpu-tracker's gigabytes and hours for the figures (resource_usage,
        gpu_ram_unit: str | None = None,  # to_json), units that fit each figure in the text report
        time_unit: str | None = None,
        n_expected_cores: int | None = None,
        gpu_uuids: set[str] | list[str] | None = None,
        disable_logs: bool = False,
        process_id: int | None = None,
        resource_usage_file: str | os.PathLike[str] | None = None,
        n_join_attempts: int = 5,
        join_timeout: float = 10.0,
        *,
        store: str | os.PathLike[str] | None = None,
        save: bool = True,
        simulate_gpus: int = 0,
        gpu_backend: str = "auto",
        gpu_poll: float = 50.0,
        mem_limit: int | str | None = None,
        warn_at: float = 80.0,
        critical_at: float = 95.0,
        flight_seconds: float = 60.0,
        oom_dumps: int = 5,
        oom_dump_mb: float = 200.0,
        wait_descendants: bool = False,
        request: str | dict[str, int] | None = None,
        prometheus: str | None = None,
        prometheus_textfile: str | os.PathLike[str] | None = None,
        prometheus_top: int = DEFAULT_TOP_PROCESSES,
        probe: bool = True,
        gpu_history: int = 0,
    ) -> None:
        # every number finite and in range (NaN and inf pass a plain `<` test); ValueError otherwise
        validate.tracking_options(
            validate.API_NAMES,
            interval=sleep_time,
            n_expected_cores=n_expected_cores,
            simulate_gpus=simulate_gpus,
            warn_at=warn_at,
            critical_at=critical_at,
            flight_seconds=flight_seconds,
            oom_dumps=oom_dumps,
            oom_dump_mb=oom_dump_mb,
        )
        _check_run_numbers(join_timeout, gpu_poll, n_join_attempts, process_id)
        self.units = _units(ram_unit, gpu_ram_unit, time_unit)
        self.process_id = process_id if process_id is not None else os.getpid()
        self.resource_usage_file = _usage_file(resource_usage_file)
        save = validate.flag("save", save)
        store_dir = _store(store, save)
        self.join_timeout = join_timeout * max(n_join_attempts, 1)
        self.disable_logs = disable_logs
        self._cfg = EngineConfig(
            mode="attach",
            pid=self.process_id,
            interval=sleep_time,
            n_expected_cores=n_expected_cores,
            gpus=_gpu_list(gpu_uuids),
            simulate_gpus=simulate_gpus,
            gpu_backend=validate.choice("gpu_backend", gpu_backend, validate.GPU_BACKENDS),
            gpu_poll=float(gpu_poll),
            store=store_dir,
            save=save,
            mem_limit=parse_byte_size(mem_limit) if mem_limit is not None else None,
            warn_at=warn_at,
            critical_at=critical_at,
            flight_seconds=flight_seconds,
            oom_dumps=oom_dumps,
            oom_dump_mb=oom_dump_mb,
            wait_descendants=validate.flag("wait_descendants", wait_descendants),
            probe=validate.flag("probe", probe),
            gpu_history=validate.gpu_history("gpu_history", gpu_history, probe),
            control_stdin=True,
            slurm=slurm.context_for("attach", self.process_id, _request(request)),
        )
        self._export = ExportOptions.for_api(prometheus, prometheus_textfile, prometheus_top)  # ValueError now
        self._init_state()

    def _init_state(self) -> None:
        """The run's state, before start()."""
        self._handle: SamplerHandle | None = None
        self._usage: ResourceUsage | None = None
        self.session_id: str | None = None
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._callbacks: list[tuple[EventCallback, frozenset[str] | None]] = []
        self._sample_callbacks: list[SampleCallback] = []
        self._oom_seen = threading.Condition(self._lock)
        self.last_oom: Event | None = None
        self._blocks_inbox: BlockInbox | None = None
        self._blocks_sink: Any = None  # (blocks._Sink, the probe's hooks) of this run, while it tracks

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Tracker:
        if self._handle is not None:
            raise TrackerError("this Tracker has already been started (a Tracker is single-use: make a new one)")
        try:  # the process must be alive now: an attach to nothing would give an empty summary
            validate.check_pid(self.process_id)
        except ValueError as e:
            raise TrackerError(f"cannot track process_id={self.process_id}: {e}") from None
        if self.process_id == os.getpid():  # blocks of this program: a FIFO the sampler reads
            self._blocks_inbox = _new_inbox()
            self._cfg.blocks_fifo = self._blocks_inbox.path if self._blocks_inbox is not None else None
        self._open_exporter()
        # another Tracker's sampler running in this process is its child, not part of the program: left out
        # (else counted, and waited for by wait_descendants until that Tracker stops: never, when it is outer)
        self._cfg.exclude = sorted(_SAMPLERS)
        self._handle = start_spawned(self._cfg)
        self._owner = os.getpid()
        _SAMPLERS.add(self._handle.pid)
        try:  # a failure, or a Ctrl-C while the sampler loads: it must not track on until we exit
            prepare(self._cfg.stream_samples)  # while the sampler loads: the reader thread then opens no file
            if (failure := self._await_started(self._handle.messages())) is not None:
                raise TrackerError(failure)
        except BaseException:
            self._abandon()
            raise
        return self

    def _await_started(self, messages: Iterator[Message]) -> str | None:
        """Until the sampler tracks (then the reader thread takes the messages on); the failure, if any."""
        for msg in messages:
            if self._exporter is not None:
                self._exporter.observe(msg)
            if isinstance(msg, Started):
                self.session_id = msg.session_id
                self._report_blocks(True)
                self._reader = threading.Thread(
                    target=self._read, args=(messages,), name="gputop-tracker-events", daemon=True
                )
                self._reader.start()
                return None
            if isinstance(msg, Failed):
                return msg.message
        return "the sampler process exited before it started tracking"

    def _abandon(self) -> None:
        """start() failed or was interrupted: the sampler stopped (killed if it does not stop within
        ABANDON_WAIT s) and reaped, this process's blocks back where they were, the FIFO and the exporter closed."""
        handle = self._handle
        assert handle is not None
        self._report_blocks(False)
        handle.end(STOP_SIGNAL, ABANDON_WAIT)
        _SAMPLERS.discard(handle.pid)
        self._close_blocks()
        self._close_exporter()

    def _read(self, messages: Iterator[Message]) -> None:
        """The reader thread: streamed events go to the callbacks; the summary is kept for stop()."""
        try:
            for msg in messages:
                if self._exporter is not None:
                    self._exporter.observe(msg)
                if isinstance(msg, EventMessage):
                    self._dispatch(msg.event)
                elif isinstance(msg, SampleMessage):
                    self._dispatch_sample(msg.sample)
                elif isinstance(msg, Summary):
                    self._usage = msg.usage
                elif isinstance(msg, Failed):
                    self._failure = msg
        except Exception as e:  # a bad line must not kill the program being tracked
            self._failure = Failed(1, f"cannot read the sampler's messages: {e!r}")

    def _dispatch(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)
            callbacks = list(self._callbacks)
            if event.type == "oom":
                self.last_oom = event
                self._oom_seen.notify_all()
        for callback, types in callbacks:
            if types is None or event.type in types:
                try:
                    callback(event)
                except BaseException as e:  # a broken callback (sys.exit() too) is the caller's bug: say so, go on
                    print(f"gputop-tracker: event callback {callback!r} raised {e!r}", file=sys.stderr)

    def _dispatch_sample(self, sample: Sample) -> None:
        for callback in list(self._sample_callbacks):
            try:
                callback(sample)
            except BaseException as e:
                print(f"gputop-tracker: sample callback {callback!r} raised {e!r}", file=sys.stderr)

    def stop(self) -> ResourceUsage:
        if self._handle is None:
            raise TrackerError("this Tracker was never started")
        if self._in_forked_child():
            raise TrackerError(
                f"this Tracker was started by process {self._owner}, not this one (a forked child): only it can stop"
                " it, and it goes on tracking this process too"
            )
        if self._stopped:
            return self.resource_usage
        self._report_blocks(False)
        if self._handle.exit_status is None:  # a stop() interrupted after the reap: its pid may be anyone's now
            self._handle.signal(STOP_SIGNAL)
        if self._reader is not None:
            # The reader ends when the sampler has sent the summary and exited (end of its pipe): never close the
            # pipe under it (the summary would be lost on the way). Past `join_timeout` the sampler is stuck: it
            # is killed, and its session keeps the last checkpoint.
            self._reader.join(self.join_timeout)
            if self._reader.is_alive():
                self._handle.signal(signal.SIGKILL)
                self._reader.join(READER_DRAIN)
        self._close_exporter()  # after the reader: it feeds the exporter to its last message
        self._handle.close()
        self._handle.wait()
        _SAMPLERS.discard(self._handle.pid)
        self._close_blocks()  # the sampler is done with the FIFO
        if self._usage is None:
            raise self._no_summary(self._handle)
        self._stopped = True  # only now: a stop() interrupted before (Ctrl-C) is finished by the next
        self._write_usage_file()
        return self.resource_usage

    def _write_usage_file(self) -> None:
        if self.resource_usage_file is None or self._usage is None:
            return
        from gputop_tracker.core.store import write_output

        data = report.to_json(self._usage, self.units).encode()
        try:
            write_output(self.resource_usage_file, data, make_dirs=True)  # as it always did: its directory made
        except OSError as e:
            raise TrackerError(
                f"cannot write resource_usage_file {self.resource_usage_file}: {e.strerror or e}"
                " (the figures are in tracker.resource_usage)"
            ) from None

    def _no_summary(self, handle: SamplerHandle) -> TrackerError:
        """Why the sampler ended without a summary."""
        if self._failure is not None:
            return TrackerError(self._failure.message)
        if handle.exit_status == -signal.SIGKILL:  # by us (a stop() interrupted meanwhile too)
            return TrackerError(
                "the sampler was killed: it did not finish within join_timeout × n_join_attempts "
                f"({self.join_timeout:g} s), or the kernel's OOM killer ended it; its session keeps the figures "
                "of its last checkpoint"
            )
        if handle.lost:
            return TrackerError("this program closed the pipe to the sampler (every fd closed?): no summary")
        return TrackerError("the sampler process ended without a summary")

    def _report_blocks(self, on: bool) -> None:
        """Code blocks of this process (and of the children it starts from now on) report to the sampler while
        tracking (`on`); after, what was there before is back (no-ops, an outer Tracker's or gputop-track's)."""
        inbox = self._blocks_inbox
        if inbox is None:
            return
        if on:
            inbox.close_fds()  # the sampler reads it now
            self._blocks_sink = _hold(inbox.path, self._cfg)
        elif self._blocks_sink is not None:
            held, self._blocks_sink = self._blocks_sink, None
            _release(held)

    def _open_exporter(self) -> None:
        """The Prometheus endpoint and/or textfile (`prometheus=`), fed by the reader thread."""
        if not self._export.enabled:
            return
        from gputop_tracker.core.integrations import open_exporter

        slurm_job = (self._cfg.slurm or {}).get("job_id") or ""
        info = SessionInfo(command=command_of(self.process_id), slurm_job_id=slurm_job)
        try:
            self._exporter = open_exporter(self._export, info)
        except ExportError as e:
            raise TrackerError(str(e)) from None
        if self._exporter is not None:
            self._cfg.stream_samples = True
            self._exporter.start()  # the sampler is spawned, not forked: threads may start first

    def _close_exporter(self) -> None:
        if self._exporter is not None:
            self._exporter.close()
            self._exporter = None

    def _close_blocks(self) -> None:
        if self._blocks_inbox is not None:
            self._blocks_inbox.close()

    def __enter__(self) -> Tracker:
        return self.start()

    def _in_forked_child(self) -> bool:
        return self._owner != 0 and os.getpid() != self._owner

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._in_forked_child():
            # a child forked inside `with Tracker():` leaving the block (sys.exit, an exception, its end): its
            # parent's tracking goes on. Stopping here once ended the parent's session at the child's exit.
            return
        if exc_type is None:
            self.stop()
            return
        try:  # the program's own exception goes on unchanged: a tracking failure must not replace it
            self.stop()
        except TrackerError as e:
            print(f"gputop-tracker: {e}", file=sys.stderr)

    # ------------------------------------------------------------------ events

    def on_event(self, callback: EventCallback, types: str | Iterable[str] | None = None) -> EventCallback:
        """Call `callback(event)` for every new event (of `types` only, if given: "warning", "critical", "oom",
        "gpu_lost", "peak", "process_started", "process_exited", "start", "stop", "block_start", "block_end",
        "mark"; another is a ValueError). Callbacks run on the tracker's reader thread: keep them short. Returns
        the callback, so it can be used as a decorator."""
        if not callable(callback):
            raise ValueError(f"on_event() takes a function to call with each event, not {callback!r}")
        wanted = _event_types("types", types)
        with self._lock:
            self._callbacks.append((callback, wanted))
        return callback

    def on_sample(self, callback: SampleCallback) -> SampleCallback:
        """Call `callback(sample)` with every sample (`models.Sample`: the tree's totals, each process, each
        GPU) as it is taken, on the reader thread. Register before start(): samples are sent to this process
        only when asked (the notebook's live display uses it)."""
        if not callable(callback):
            raise ValueError(f"on_sample() takes a function to call with each sample, not {callback!r}")
        if self._handle is not None:
            raise TrackerError("on_sample() must be called before start()")
        self._cfg.stream_samples = True
        self._sample_callbacks.append(callback)
        return callback

    def events(
        self, type: str | Iterable[str] | None = None, since: float | None = None, until: float | None = None
    ) -> list[Event]:
        """Events so far (all of the session's after stop()), of `type` and between `since` and `until`
        (epoch seconds, as `Event.time`)."""
        if self._usage is not None:
            found = list(self._usage.events)
        else:
            with self._lock:
                found = list(self._events)
        wanted = _event_types("type", type)
        return [
            e
            for e in found
            if (wanted is None or e.type in wanted)
            and (since is None or e.time >= since)
            and (until is None or e.time <= until)
        ]

    def report_oom(self, exc: BaseException | str, timeout: float = 10.0) -> Event | None:
        """Record an out-of-memory error (an `oom` event) and have the sampler write a dump bundle of its last
        samples; waits up to `timeout` s for it and returns the event (its `dump` is the bundle's directory)."""
        if self._handle is None or self._usage is not None:
            return None
        message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        with self._lock:
            before = self.last_oom
        if not self._handle.request({"cmd": "oom", "message": message[:1000], "pid": os.getpid()}):
            return None
        with self._lock:
            self._oom_seen.wait_for(lambda: self.last_oom is not before, timeout)
            return self.last_oom if self.last_oom is not before else None

    @contextmanager
    def capture_oom(self) -> Iterator[None]:
        """`with tracker.capture_oom(): ...` — an out-of-memory exception (MemoryError, torch.OutOfMemoryError,
        a CUDA 'out of memory' RuntimeError) raised inside is recorded and dumped, then raised on."""
        try:
            yield
        except BaseException as e:
            if is_oom_exception(e):
                self.report_oom(e)
            raise

    # ------------------------------------------------------------------ results

    @property
    def resource_usage(self) -> ResourceUsage:
        """The summary in the units given to the constructor (gpu-tracker's field names)."""
        if self._usage is None:
            raise TrackerError("no resource usage yet: call stop() (or leave the with block) first")
        u = self.units
        return self._usage.in_units(u.ram or "gigabytes", u.gpu_ram or "gigabytes", u.time or "hours")

    @property
    def raw_usage(self) -> ResourceUsage:
        """The summary in bytes and seconds."""
        if self._usage is None:
            raise TrackerError("no resource usage yet")
        return self._usage

    def session(self) -> Session:
        """The saved session (meta, summary, timeline), read back from the store after stop()."""
        from gputop_tracker.core.store import sessions as store

        usage = self.raw_usage
        if not usage.session_path:
            why = "save=False" if not self._cfg.save else "it could not be saved"
            raise TrackerError(f"no saved session to read ({why}): the timeline is kept in the saved session")
        entry = store.load(Path(usage.session_path))
        if entry.session is None:
            raise TrackerError(f"cannot read the session {usage.session_path}: {entry.error}")
        return entry.session

    def timeline(self) -> TimelineColumns:
        """The samples as columns (`t`, `tree_ram`, `private`, `cpu_percent`, per GPU `gpu_memory_of(i)`,
        `gpu_util_of(i)` …; `.to_pandas()` with pandas installed). After stop(), from the saved session."""
        from gputop_tracker.core.report import TimelineColumns

        return TimelineColumns.of_session(self.session())

    def plot(self, size: tuple[int, int] | None = None, title: str | None = None) -> Any:
        """The session as a matplotlib Figure (needs matplotlib: `pip install gputop-tracker[plot]`);
        `size` in pixels; `title` in place of the tracked command line (for a span of a program, the program's
        whole command says little). Save it with `fig.savefig("run.png")`."""
        from gputop_tracker.core.report import plot

        return plot.figure(self.session(), size, title=title)

    def to_json(self) -> dict[str, Any]:
        return report.to_json_dict(self.raw_usage, self.units)

    def __str__(self) -> str:
        if self._usage is None:
            return f"Tracker(process_id={self.process_id}, not stopped yet)"
        return report.to_text(self._usage, self.units)
