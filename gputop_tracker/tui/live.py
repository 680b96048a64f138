"""`gputop-track` on a terminal: start the sampler, then the live view on it.

The command runs in a new session (keys pressed in the view never signal it) with stdin from /dev/null;
its stdout and stderr go to `<session>.output.log` next to the saved session, which the view tails into
its output pane. A file rather than a pipe: a detached command keeps writing after the view is gone,
where a pipe without a reader would kill it with SIGPIPE. With --no-save the file is unlinked at once.
"""

from __future__ import annotations

import argparse
import codecs
import os
import select
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from gputop_tracker import console
from gputop_tracker.core import channel, paths
from gputop_tracker.core.channel import STOP_SIGNAL, SamplerHandle, start_forked
from gputop_tracker.core.config import EngineConfig
from gputop_tracker.core.framing import LineFramer
from gputop_tracker.core.text import clean_output
from gputop_tracker.core.units import Units

OUTPUT_POLL = 0.2  # seconds between reads of the output file when it has not grown
CHUNK = 1 << 16


class SamplerSource:
    """The live view's data source backed by the sampler process and the command's output file."""

    def __init__(self, handle: SamplerHandle, output_fd: int) -> None:
        self.handle = handle
        self.output_fd = output_fd
        self._wake_r, self._wake_w = os.pipe()
        self._closed = threading.Event()

    def messages(self) -> Iterator[channel.Message]:
        framer = LineFramer()
        fd = self.handle.read_fd
        while not self._closed.is_set():
            ready, _, _ = select.select([fd, self._wake_r], [], [])
            if self._wake_r in ready:
                return
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return
            framer.feed(chunk)
            for line in framer.lines():
                if line.strip():
                    yield channel.decode(line)

    def output(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while not self._closed.is_set():
            data = os.read(self.output_fd, CHUNK)
            if data:
                text = decoder.decode(data)
                if text:
                    yield clean_output(text)
                continue
            self._closed.wait(OUTPUT_POLL)

    def signal(self, sig: int) -> None:
        self.handle.signal(sig)

    def stop_tree(self, sig: int) -> bool:
        """The sampler signals the whole tree; False when it cannot be asked."""
        return self.handle.request({"cmd": "stop_tree", "signal": int(sig)})

    def stop(self) -> None:
        self.handle.signal(STOP_SIGNAL)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            os.write(self._wake_w, b"x")


def _output_fds(cfg: EngineConfig, store: Path, session_id: str) -> tuple[int, int, Path | None]:
    """(write fd for the command, read fd for the view, saved path or None)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    if cfg.save:
        try:
            store.mkdir(parents=True, exist_ok=True)
            path = paths.output_file(store, session_id)
            w = os.open(path, flags, 0o644)
            return w, os.open(path, os.O_RDONLY | os.O_CLOEXEC), path
        except OSError:
            pass  # an unwritable store: the sampler reports that; the output still shows
    fd, name = tempfile.mkstemp(prefix="gputop-output-", suffix=".log")
    os.close(fd)
    w = os.open(name, flags)
    r = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
    os.unlink(name)
    return w, r, None


def run_live(cfg: EngineConfig, args: argparse.Namespace, units: Units) -> int:
    """Track with the live view; return the command's exit code (128+N after signal N) once the user quits."""
    from gputop_tracker.core.store import new_session_id

    del args, units  # the view shows human units; the report options apply to headless output
    cfg.stream_samples = True
    cfg.new_session = True
    cfg.session_id = cfg.session_id or new_session_id()
    if os.getpid() not in cfg.exclude:  # attached to an ancestor (our shell), we are not its descendant
        cfg.exclude.append(os.getpid())
    store = paths.store_dir(cfg.store)
    write_fd = devnull = -1
    output_path = None
    if cfg.mode == "launch":
        write_fd, read_fd, output_path = _output_fds(cfg, store, cfg.session_id)
        # the sampler scans the output for CUDA / PyTorch OOM messages, with its own offset in the file
        cfg.output_path = str(output_path) if output_path else f"/proc/self/fd/{read_fd}"
        devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        cfg.stdin, cfg.stdout, cfg.stderr = devnull, write_fd, write_fd
    else:  # an attached process keeps its own output; the pane stays empty
        read_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    handle = start_forked(cfg, requests=True)  # before any thread: the App starts several
    for fd in (write_fd, devnull):
        if fd >= 0:
            os.close(fd)

    from gputop_tracker.tui.live_app import LiveApp  # loads while the command already runs

    source = SamplerSource(handle, read_fd)
    app = LiveApp(
        source,
        interval=cfg.interval,
        command=cfg.argv,
        mode=cfg.mode,
        store_dir=store,
        output_path=output_path,
    )
    code = app.run()
    source.close()
    if app.running:
        # The view ended without a decision (crash, closed terminal): stop tracking, never kill the job.
        handle.signal(STOP_SIGNAL)
    handle.close()
    handle.wait()
    os.close(read_fd)
    final = app.final
    for note in final.notes if final is not None else []:
        if note.startswith("stopped from the live view"):
            console.say(note)
    if final is not None and final.session_path:
        console.say(f"session {final.session_id} saved: {final.session_path}")
    elif final is not None and cfg.save:
        console.not_saved(final.notes)
    if app.failure is not None:
        console.say(app.failure.message)
    if code is None:  # the app crashed; Textual printed the traceback
        return app.return_code or 1
    return code
