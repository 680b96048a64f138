"""Prometheus: a `/metrics` endpoint and a node_exporter textfile, both from one custom collector.

The collector reads the latest sample and running summary the front end received (`LatestFigures`); a
scrape formats them and sorts the processes for the top N, nothing more. Metric names follow Prometheus'
conventions: base units (bytes, seconds, joules, ratios 0–1), counters end in `_total`, and every series
carries the `session` label so several runs on one node never collide.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import heapq
import os
import socket
import socketserver
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from gputop_tracker._version import __version__
from gputop_tracker.core.integrations.exporters.base import (
    Address,
    ExportError,
    ExportOptions,
    SessionInfo,
    hold_textfile,
    parse_address,
    textfile_in_use,
)
from gputop_tracker.core.integrations.exporters.latest import LatestFigures, Snapshot
from gputop_tracker.core.model.models import GpuSample
from gputop_tracker.core.model.text import command_line, escape_controls

if TYPE_CHECKING:
    from gputop_tracker.core.sampling.channel import Message

TEXTFILE_PERIOD = 2.0  # seconds between rewrites of the textfile
REPORT_AGAIN = 60.0  # seconds between two reports of a textfile that still cannot be written
COMMAND_CHARS = 120  # the command line in gputop_session_info, shortened


def short_command(argv: list[str], limit: int = COMMAND_CHARS) -> str:
    """The command as one printable line (`core.text`), shortened: labels stay small and unsurprising."""
    text = command_line(argv)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TreeCollector(Collector):
    """Every gputop_* metric, from the latest figures; nothing before the sampler's first message."""

    def __init__(self, latest: LatestFigures, top_processes: int) -> None:
        self.latest = latest
        self.top_processes = top_processes

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked registration: the series exist only once samples arrive

    def collect(self) -> Iterator[Metric]:
        snap = self.latest.snapshot()
        session = snap.info.session
        yield _session_info(snap.info)
        yield from _tree(snap, session)
        if snap.sample is not None:
            yield _processes(snap, session, self.top_processes)
            yield from _gpus(snap.sample.gpus, session)
        yield from _events(snap, session)


def _session_info(info: SessionInfo) -> Metric:
    m = InfoMetricFamily("gputop_session", "the tracked run: session id, command, host, SLURM job, tool version")
    labels = {
        "session": info.session,
        "command": short_command(info.command),
        "host": escape_controls(info.host),
        "slurm_job_id": escape_controls(info.slurm_job_id),  # the environment's bytes: maybe not UTF-8
        "version": __version__,
    }
    m.add_metric([], labels)
    return m


def _one(name: str, doc: str, session: str, value: float, *, counter: bool = False) -> Metric:
    """A metric with one series, labelled by session alone (a counter's name gets `_total` in the output)."""
    family = (CounterMetricFamily if counter else GaugeMetricFamily)(name, doc, labels=["session"])
    family.add_metric([session], value)
    return family


def _tree(snap: Snapshot, session: str) -> Iterator[Metric]:
    sample, progress = snap.sample, snap.progress
    if sample is not None:
        t = sample.tree
        mem = GaugeMetricFamily(
            "gputop_tree_memory_bytes",
            "RAM of the tracked tree now, shared pages counted once (Σ PSS): total = private + shared",
            labels=["session", "kind"],
        )
        mem.add_metric([session, "total"], t.combined_total)
        mem.add_metric([session, "private"], t.combined_private)
        mem.add_metric([session, "shared"], t.combined_shared)
        yield mem
        yield _one("gputop_tree_processes", "processes in the tree now", session, t.n_processes)
        yield _one("gputop_tree_threads", "threads in the tree now", session, t.threads)
        yield _one("gputop_last_sample_timestamp_seconds", "Unix time of the latest sample", session, sample.time)
    if progress is not None:
        # the report's peak (exact kernel figures where they exist) arrives once a second: never below now
        peak = max(progress.max_ram.combined.total_rss, sample.tree.combined_total if sample is not None else 0)
        yield _one("gputop_tree_memory_peak_bytes", "peak RAM of the tree so far (the report's figure)", session, peak)
        cpu = CounterMetricFamily(
            "gputop_tree_cpu_seconds",
            "CPU time of the whole tree, live and reaped processes (the exact ledger)",
            labels=["session", "mode"],
        )
        cpu.add_metric([session, "user"], snap.cpu_user)
        cpu.add_metric([session, "system"], snap.cpu_system)
        yield cpu
        yield _one("gputop_samples", "samples taken by the sampler", session, progress.n_samples, counter=True)
        yield _one("gputop_session_start_time_seconds", "Unix time tracking began", session, progress.start_time)


def _processes(snap: Snapshot, session: str, top: int) -> Metric:
    m = GaugeMetricFamily(
        "gputop_process_memory_bytes",
        f"RSS of the tree's largest processes (at most {top}, by RSS)",
        labels=["session", "pid", "name"],
    )
    assert snap.sample is not None
    for p in heapq.nlargest(top, snap.sample.processes, key=lambda p: p.rss):
        m.add_metric([session, str(p.pid), escape_controls(p.name)], p.rss)
    return m


GPU_LABELS = ["session", "gpu", "uuid"]
GPU_METRICS: tuple[tuple[str, str, str, float], ...] = (
    # (metric, GpuSample field, help, scale)
    ("gputop_tree_gpu_memory_bytes", "tree_memory", "GPU memory the tracked tree holds on this GPU", 1.0),
    ("gputop_gpu_memory_used_bytes", "memory_used", "memory used on this GPU, every process", 1.0),
    ("gputop_gpu_memory_total_bytes", "memory_total", "memory of this GPU", 1.0),
    ("gputop_gpu_utilization_ratio", "utilization_gpu", "share of time a kernel ran on this GPU (0-1)", 0.01),
    ("gputop_gpu_power_watts", "power_w", "power draw of this GPU", 1.0),
    ("gputop_gpu_temperature_celsius", "temperature_c", "temperature of this GPU", 1.0),
)


def _gpus(gpus: list[GpuSample], session: str) -> Iterator[Metric]:
    if not gpus:
        return
    # --simulate-gpus: made-up figures must not pass for real ones on a dashboard; real GPUs keep their labels
    simulated = any(g.simulated for g in gpus)
    labels = [*GPU_LABELS, "simulated"] if simulated else GPU_LABELS

    def key(g: GpuSample) -> list[str]:
        return [session, str(g.index), g.uuid, *(["true" if g.simulated else "false"] if simulated else [])]

    for name, attr, doc, scale in GPU_METRICS:
        m = GaugeMetricFamily(name, doc, labels=labels)
        for g in gpus:
            value = getattr(g, attr)
            if value is not None:
                m.add_metric(key(g), value * scale)
        yield m
    energy = CounterMetricFamily(
        "gputop_gpu_energy_joules",
        "energy this GPU used from the session's first reading to its last (NVML's counter is read at most every "
        "5 s: the value steps)",
        labels=labels,
    )
    for g in gpus:
        if g.energy_j is not None:
            energy.add_metric(key(g), g.energy_j)
    yield energy


def _events(snap: Snapshot, session: str) -> Iterator[Metric]:
    alerts = CounterMetricFamily(
        "gputop_alerts",
        "alert levels crossed upward (warning, critical) per resource: ram, gpuN",
        labels=["session", "level", "resource"],
    )
    for (level, resource), n in sorted(snap.alerts.items()):
        alerts.add_metric([session, level, resource], n)
    yield alerts
    yield _one("gputop_oom_events", "out-of-memory events seen", session, snap.ooms, counter=True)
    yield _one("gputop_gpu_lost_events", "GPUs that stopped answering", session, snap.gpus_lost, counter=True)


# --------------------------------------------------------------------------- the endpoint


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # a scrape every few seconds must not fill the tracked job's stderr


_servers: weakref.WeakSet[WSGIServer] = weakref.WeakSet()


def _close_in_child() -> None:
    """A forked sampler must not hold our listening socket: scrapes would queue on it after we are gone."""
    for server in list(_servers):
        try:
            server.socket.close()
        except OSError:
            pass


os.register_at_fork(after_in_child=_close_in_child)


def bind(address: Address, flag: str, registry: CollectorRegistry) -> WSGIServer:
    """Bind and listen now (errors before the command starts); serving starts later (`serve`)."""
    try:
        return _bind(address, flag, registry)
    except ExportError as e:
        if not (address.every and address.family == socket.AF_INET6) or e.errno not in NO_IPV6:
            raise  # a port in use is in use: never quietly IPv4 alone
        # `:PORT` where IPv6 exists but cannot be bound (disabled per interface): every IPv4 interface
        return _bind(Address("0.0.0.0", address.port, socket.AF_INET, every=True), flag, registry)


def _bind(address: Address, flag: str, registry: CollectorRegistry) -> WSGIServer:
    class Server(ThreadingWSGIServer):
        address_family = address.family

        def server_bind(self) -> None:
            if address.every and address.family == socket.AF_INET6:  # IPv4 clients too, as ::ffff:a.b.c.d
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            # as WSGIServer's, without the reverse DNS lookup (getfqdn) that can stall start-up for seconds
            socketserver.TCPServer.server_bind(self)
            self.server_name = address.host
            self.server_port = self.server_address[1]
            self.setup_environ()

    try:
        server = make_server(address.host, address.port, make_wsgi_app(registry), Server, handler_class=_QuietHandler)
    except OSError as e:
        err = ExportError(_bind_failure(e, flag, address))
        err.errno = e.errno
        raise err from None
    _servers.add(server)
    return server


NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)  # IPv6 off, not the port taken


def _bind_failure(e: OSError, flag: str, address: Address) -> str:
    if e.errno == errno.EADDRINUSE:
        return f"{flag} {address}: port {address.port} is already in use"
    if e.errno == errno.EADDRNOTAVAIL:
        return f"{flag} {address}: not an address of this machine"
    if e.errno == errno.EACCES:
        return f"{flag} {address}: permission denied (ports below 1024 need privileges)"
    return f"{flag} {address}: cannot listen: {e.strerror or e}"


# --------------------------------------------------------------------------- the textfile


class TextfileWriter:
    """Rewrites FILE atomically (a temporary file renamed over it) every TEXTFILE_PERIOD seconds, and at once
    when the first sample arrives; removes it at the end (or at this process's exit, should a Tracker never be
    stopped), so node_exporter never serves a finished run. Each file it puts there is held open with a shared
    lock from before it appears under the name: another run naming the same FILE sees it in use and leaves it."""

    def __init__(self, path: str, registry: CollectorRegistry, period: float = TEXTFILE_PERIOD) -> None:
        self.path = os.path.abspath(path)
        self.registry = registry
        self.period = period
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failed = False
        self._told_at = 0.0
        # the file this run last put at path, held open: its inode cannot be reused for another file meanwhile
        self._written = -1
        self._pid = os.getpid()
        self.report: Callable[[str], None] = _to_stderr

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gputop-prometheus-textfile", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    def poke(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        # Nothing before the first sample (`poke`, the moment it arrives): written at start, the file had no session
        # and no figures but the session's info, and was next written only a period later.
        self._wake.wait()
        self._wake.clear()
        while not self._stopping:
            self.write()
            self._wake.wait(self.period)
            self._wake.clear()

    def write(self) -> None:
        try:
            written = self._replace()
        except OSError as e:
            now = time.monotonic()
            if not self._failed or now - self._told_at >= REPORT_AGAIN:  # not a line a period; tracking goes on
                self._failed, self._told_at = True, now
                self.report(
                    f"cannot write {self.path}: {e.strerror or e} (tracking goes on; retried every {self.period:g} s)"
                )
        else:
            self._failed = False
            self._written, old = written, self._written
            if old >= 0:
                os.close(old)

    def _replace(self) -> int:
        """The figures written to a new file, locked, then renamed over path; its fd (kept open, the lock held)."""
        if self._written < 0 and textfile_in_use(self.path):  # another run started on it since we checked
            raise OSError(errno.EBUSY, "another gputop-track run is writing it (this run's figures are not written)")
        data = generate_latest(self.registry)
        temporary = f"{self.path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"  # not *.prom: the collector skips it
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)  # node_exporter's user reads it, whatever our umask
            hold_textfile(fd)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.replace(temporary, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return fd

    def _at_exit(self) -> None:
        if os.getpid() == self._pid:  # a forked child's exit leaves the parent's file alone
            self.close()

    def close(self) -> None:
        atexit.unregister(self._at_exit)
        self._stopping = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10.0)
        if self._written >= 0:
            remove_if_ours(self.path, self._written)
            os.close(self._written)
            self._written = -1


def remove_if_ours(path: str, written_fd: int) -> None:
    """Remove path only when it is still the very file this run wrote (the inode held open by `written_fd`, so
    it cannot have been reused): never one that someone put there since, nor anything this run did not create."""
    try:
        ours, now = os.fstat(written_fd), os.lstat(path)
        if (ours.st_dev, ours.st_ino) == (now.st_dev, now.st_ino):
            os.unlink(path)
    except OSError:
        pass


def _to_stderr(message: str) -> None:
    print(f"gputop-track: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- the exporter


class PrometheusExporter:
    """`Exporter` for Prometheus: the endpoint and/or the textfile, over one registry."""

    def __init__(self, latest: LatestFigures, server: WSGIServer | None, textfile: TextfileWriter | None) -> None:
        self.latest = latest
        self.server = server
        self.textfile = textfile
        self._serving: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) the endpoint listens on."""
        return (str(self.server.server_address[0]), int(self.server.server_address[1])) if self.server else None

    def start(self) -> None:
        if self.server is not None and self._serving is None:
            self._serving = threading.Thread(
                target=self.server.serve_forever, kwargs={"poll_interval": 0.5}, name="gputop-prometheus", daemon=True
            )
            self._serving.start()
        if self.textfile is not None:
            self.textfile.start()

    def set_reporter(self, report: Callable[[str], None]) -> None:
        if self.textfile is not None:
            self.textfile.report = report

    def observe(self, msg: Message) -> None:
        if self.latest.observe(msg) and self.textfile is not None:
            self.textfile.poke()

    def close(self) -> None:
        if self.server is not None:
            if self._serving is not None:
                self.server.shutdown()
                self._serving.join(5.0)
            self.server.server_close()
            _servers.discard(self.server)
            self.server = None
        if self.textfile is not None:
            self.textfile.close()
            self.textfile = None


def open_prometheus(options: ExportOptions, info: SessionInfo) -> PrometheusExporter:
    options.check()
    latest = LatestFigures(info)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TreeCollector(latest, options.top_processes))
    server = None
    if options.prometheus is not None:
        server = bind(parse_address(options.prometheus, options.flag), options.flag, registry)
    textfile = TextfileWriter(options.textfile, registry) if options.textfile else None
    return PrometheusExporter(latest, server, textfile)
