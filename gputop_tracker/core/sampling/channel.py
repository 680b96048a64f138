"""The front end's side of the pipe: start the sampler process and read its validated messages."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

from gputop_tracker.core.model.config import JOB_SIGNALS, EngineConfig, config_json
from gputop_tracker.core.model.config import STOP_SIGNAL as STOP_SIGNAL  # re-exported: the front ends stop with it
from gputop_tracker.core.model.messages import (
    BlocksMessage,
    EventMessage,
    Failed,
    Message,
    Progress,
    SampleMessage,
    Started,
    Summary,
)
from gputop_tracker.core.sampling.framing import LineFramer
from gputop_tracker.core.sampling.relayed import RelayLedger

# what a dead sampler may have owed the command (never STOP_SIGNAL: that one was the sampler's own)
RELAYABLE = frozenset((signal.SIGINT, signal.SIGTERM, signal.SIGHUP, *JOB_SIGNALS))

# the two messages of every sample, as `msgpipe.MessagePipe.send` begins them
_STREAMED = (b'{"kind":"sample",', b'{"kind":"progress",')


@functools.cache
def _adapters() -> dict[bytes, tuple[Any, Callable[[Any], Message]]]:
    """The two messages of every sample, validated straight from the JSON text: pydantic's own parser, no dict
    built in between (a third of their cost in the view). Built on the first such line: a headless run, which
    is sent none, never pays for them (a third of its front end's start-up)."""
    from pydantic import TypeAdapter
    from typing_extensions import TypedDict

    from gputop_tracker.core.model.models import ResourceUsage, Sample

    sample_line = TypedDict("sample_line", {"kind": str, "sample": Sample})  # type: ignore[misc]  # noqa: UP013
    progress_line = TypedDict("progress_line", {"kind": str, "summary": ResourceUsage})  # type: ignore[misc]  # noqa: UP013
    return {
        _STREAMED[0]: (TypeAdapter(sample_line), lambda d: SampleMessage(d["sample"])),
        _STREAMED[1]: (TypeAdapter(progress_line), lambda d: Progress(d["summary"])),
    }


def _decode_streamed(line: bytes) -> Message | None:
    for prefix, (adapter, make) in _adapters().items():
        if line.startswith(prefix):
            return make(adapter.validate_json(line))
    return None


def prepare(streamed: bool) -> None:
    """Build now, in the calling thread, every validator `decode` will use (the models build theirs on first
    use, and pydantic then looks for plugins: it reads every installed package's metadata). A Tracker's reader
    thread then reads only its pipe: a file it opened while the program closed every fd and opened its own would
    be the program's file by the time the thread closed it."""
    from gputop_tracker.core.model.models import Event, LiveBlocks, ResourceUsage, Sample

    for model in (Sample, ResourceUsage, Event, LiveBlocks):
        model.model_rebuild(force=True)
    if streamed:
        _adapters()


def decode(line: bytes) -> Message:
    """One line from the sampler, validated (pydantic) where it carries figures."""
    from gputop_tracker.core.model.models import Event, LiveBlocks, ResourceUsage, Sample

    if line.startswith(_STREAMED) and (streamed := _decode_streamed(line)) is not None:
        return streamed
    data: dict[str, Any] = json.loads(line)
    kind = data.pop("kind")
    if kind == "sample":
        return SampleMessage(Sample.model_validate(data["sample"]))
    if kind == "progress":
        return Progress(ResourceUsage.model_validate(data["summary"]))
    if kind == "summary":
        return Summary(ResourceUsage.model_validate(data["summary"]))
    if kind == "event":
        return EventMessage(Event.model_validate(data["event"]))
    if kind == "blocks":
        return BlocksMessage(LiveBlocks.model_validate(data["blocks"]))
    if kind == "started":
        return Started(int(data["pid"]), str(data["session_id"]), str(data["store"]))
    if kind == "error":
        return Failed(int(data["exit_code"]), str(data["message"]))
    raise ValueError(f"unknown message kind {kind!r}")


class SamplerHandle:
    """A running sampler process and its message stream."""

    def __init__(
        self,
        pid: int,
        read_fd: int,
        popen: subprocess.Popen[bytes] | None = None,
        request_fd: int = -1,
        ledger: RelayLedger | None = None,
    ) -> None:
        self.pid = pid
        self.ledger = ledger  # a forked sampler's count of the signals it passed on to the command
        self.read_fd = read_fd
        self._popen = popen
        self.request_fd = request_fd  # a forked sampler's request pipe (`start_forked(requests=True)`), or -1
        self._framer = LineFramer()
        self.exit_status: int | None = None
        # what each of our fds is: a program may close every fd (os.closerange) and open files that take the
        # numbers; we never read, write or close a number that is no longer ours
        stdin = popen.stdin if popen is not None else None
        self._ids = {fd: _ident(fd) for fd in (read_fd, request_fd, stdin.fileno() if stdin else -1) if fd >= 0}
        self.lost = False  # our pipe was closed under us

    def _ours(self, fd: int) -> bool:
        if _ident(fd) == self._ids.get(fd):
            return True
        self.lost = True
        return False

    def lines(self) -> Iterator[bytes]:
        """Raw lines until the sampler closes the pipe."""
        while True:
            yield from self._framer.lines()
            if not self._ours(self.read_fd):
                return
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except InterruptedError:
                continue
            except OSError as e:
                if e.errno != errno.EBADF:
                    raise
                self.lost = True  # closed under us between the check and the read
                return
            if not chunk:
                return
            self._framer.feed(chunk)

    def messages(self) -> Iterator[Message]:
        for line in self.lines():
            if line.strip():
                yield decode(line)

    def request(self, req: dict[str, Any]) -> bool:
        """Send a request to a spawned sampler (started with `control_stdin`) or a forked one with a request
        pipe; False when it cannot be sent."""
        if self.request_fd >= 0:
            return self._write_request(req)
        stdin = self._popen.stdin if self._popen is not None else None
        if stdin is None or not self._ours(stdin.fileno()):
            return False
        try:
            stdin.write(json.dumps(req).encode() + b"\n")
            stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def _write_request(self, req: dict[str, Any]) -> bool:
        if not self._ours(self.request_fd):
            return False
        try:
            os.write(self.request_fd, json.dumps(req).encode() + b"\n")  # short: one write, never partial
        except OSError:
            return False
        return True

    def signal(self, sig: int) -> None:
        if self.ledger is not None:
            self.ledger.sending(sig)
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def unrelayed(self) -> list[int]:
        """Once the sampler died: the signals for the command it took from us and never passed on."""
        return self.ledger.unrelayed(RELAYABLE) if self.ledger is not None else []

    def wait(self) -> int:
        if self.exit_status is None:
            if self._popen is not None:
                self.exit_status = self._popen.wait()
            else:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    self.exit_status = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    self.exit_status = 0
        return self.exit_status

    def end(self, sig: int, timeout: float) -> None:
        """Stop it with `sig`, SIGKILL past `timeout` s; close our ends and reap it."""
        self.signal(sig)
        if self._popen is not None:
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
        self.close()
        self.wait()

    def close(self) -> None:
        """Close the read end once, through its owner: a spawned sampler's pipe belongs to its `Popen`
        (whose file object would close the same number again when collected, maybe by then another file)."""
        popen = self._popen
        if popen is not None:
            for name in ("stdout", "stdin"):
                f = getattr(popen, name)
                if f is None or f.closed:
                    continue
                if self._ours(f.fileno()):
                    with contextlib.suppress(OSError):
                        f.close()
                else:  # its number is the program's now: the file object must never close it, not even collected
                    _KEPT.append(f)
                    setattr(popen, name, None)
        elif self._ours(self.read_fd):
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
        if self.request_fd >= 0:
            if self._ours(self.request_fd):
                with contextlib.suppress(OSError):
                    os.close(self.request_fd)
            self.request_fd = -1


_KEPT: list[Any] = []  # file objects over numbers that are no longer ours (never closed)


def _ident(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def start_forked(cfg: EngineConfig, *, requests: bool = False) -> SamplerHandle:
    """Fork the sampler from this process (fast: nothing is imported again). Call before any thread starts.
    `requests`: a pipe for requests (`SamplerHandle.request`, e.g. stop_tree from the live view) becomes the
    sampler's stdin; the command must then be given its own stdin (`cfg.stdin`)."""
    r, w = os.pipe()
    req_r, req_w = os.pipe() if requests else (-1, -1)
    ledger = RelayLedger()
    cfg.front_end = os.getpid()  # known before the fork: should we die first, getppid() would name our reaper
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if requests:
            os.close(req_w)
            os.dup2(req_r, 0)
            os.close(req_r)
            cfg.control_stdin = True
        # imported here, in the child: it loads while the front end loads pydantic on the other core
        from gputop_tracker.core.sampling.sampler import run_forked_child

        run_forked_child(cfg, w, ledger)
    os.close(w)
    if requests:
        os.close(req_r)
    return SamplerHandle(pid, r, request_fd=req_w, ledger=ledger)


def start_spawned(cfg: EngineConfig) -> SamplerHandle:
    """A fresh interpreter for the sampler: safe from a process that already runs threads (the API)."""
    cfg.front_end = os.getpid()
    popen = subprocess.Popen(
        [sys.executable, "-m", "gputop_tracker.core.sampling.sampler", config_json(cfg)],
        stdin=subprocess.PIPE if cfg.control_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert popen.stdout is not None
    # the handle reads the number; popen.stdout keeps owning it and is what `close()` closes
    return SamplerHandle(popen.pid, popen.stdout.fileno(), popen)
