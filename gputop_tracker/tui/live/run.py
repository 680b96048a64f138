"""`gputop-track` on a terminal: start the sampler, then the live view on it.

The command runs in a new session (keys pressed in the view never signal it) with stdin from /dev/null;
its stdout and stderr go to `<session>.output.log` next to the saved session, which the view tails into
its output pane. A file rather than a pipe: a detached command keeps writing after the view is gone,
where a pipe without a reader would kill it with SIGPIPE. With --no-save the file is unlinked at once.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import os
import select
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gputop_tracker import console
from gputop_tracker.core.model import JOB_SIGNALS, EngineConfig, Units, clean_output, paths
from gputop_tracker.core.sampling import (
    STOP_SIGNAL,
    FileWatch,
    LineFramer,
    SamplerHandle,
    become_subreaper,
    channel,
    not_ignored,
    orphans,
    start_forked,
)
from gputop_tracker.tui.live.texts import ALERT_RANK, detached_text, draw_period, left_running

if TYPE_CHECKING:
    from gputop_tracker.core.integrations import Exporter
    from gputop_tracker.core.model import ResourceUsage
    from gputop_tracker.tui.live.app import LiveApp

OUTPUT_POLL = 0.2  # seconds between reads of the output file when it has not grown (no inotify)
OUTPUT_GAP = 1.0  # seconds at least between two batches of output handed to the view (it draws them at most as often)
CHUNK = 1 << 16
GATHER = 0.01  # seconds a read of the sampler's messages waits for the rest of a sample's lines
# what `SamplerSource.batches` may hold until the view's next draw: a sample's figures and what comes with them
HELD = (channel.SampleMessage, channel.Progress, channel.BlocksMessage)
EARLY, LATEST = 0.9, 1.2  # of the hold: samples held go with the first read from EARLY on, at LATEST without one
CLOSE_WAIT = 2.0  # seconds at most `SamplerSource.close` waits for a reader to leave its fd
BATCH = 16 << 20  # bytes at most read in one go from a command that prints faster than the view reads
TAIL_LINES = 4096  # lines of such a batch handed to the view (its pane keeps 2000): all of them are in the log


def _may_wait(msg: channel.Message) -> bool:
    """What the reader may hold until the view's next draw: a sample's figures and what comes with them, and the
    events that are no alert (a process's start or end, a block's, a peak: a fork-heavy or block-heavy job has
    them at every sample)."""
    if isinstance(msg, channel.EventMessage):
        return msg.event.type not in ALERT_RANK
    return isinstance(msg, HELD)


def tail_lines(text: str, n: int) -> str:
    """The last `n` lines of `text` (and the unfinished one after them)."""
    cut = len(text)
    for _ in range(n + 1):
        cut = text.rfind("\n", 0, cut)
        if cut < 0:
            return text
    return text[cut + 1 :]


class SamplerSource:
    """The live view's data source backed by the sampler process and the command's output file."""

    def __init__(
        self, handle: SamplerHandle, output_fd: int, exporter: Exporter | None = None, hold: float = 0.0
    ) -> None:
        self.handle = handle
        self.hold = hold  # seconds: samples alone are handed over at most this often (`batches`)
        self.output_fd = output_fd
        self.exporter = exporter  # sees every message first (Prometheus serves the latest sample)
        self._wake_r, self._wake_w = os.pipe()
        self._closed = threading.Event()
        # held by each reader while it uses its fd: `close` takes both, so that the fds are closed after it
        # only once no reader thread is inside a read (Textual does not join thread workers)
        self._messages_io = threading.Lock()
        self._output_io = threading.Lock()

    def messages(self) -> Iterator[channel.Message]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[channel.Message]]:
        """The messages of each read: a sample's lines (its figures, the running summary, its events) are
        written one after the other; what follows a read within GATHER joins it, and the view takes them in one
        hand-over from this thread, not one each. Samples alone (figures, the running summary, the blocks) are
        held for about `hold` seconds since the last hand-over: the view draws each hand-over, and each wakes it
        (every sample still reaches it, in order). They go with the first read from EARLY x `hold` on (the
        hand-overs keep step with the samples: the newest is drawn as it comes, not a period later), at LATEST x
        `hold` without one. Anything else goes at once, and takes what is held with it."""
        framer = LineFramer()
        batch: list[channel.Message] = []
        held: list[channel.Message] = []
        handed = -1e9  # monotonic time of the last hand-over
        while True:
            if batch:
                timeout: float | None = GATHER
            elif held:
                timeout = max(handed + self.hold * LATEST - time.monotonic(), 0.0)
            else:
                timeout = None
            chunk = self._read(timeout)
            if chunk:
                framer.feed(chunk)
                more = self._decode(framer)
                if not batch:  # a first read: the rest of its lines may follow at once
                    batch = more
                    continue
                batch += more
            fresh = bool(batch)  # a read's messages, gathered
            held += batch
            batch = []
            ended = chunk is not None and not chunk
            waited = time.monotonic() - handed >= self.hold * (EARLY if fresh else LATEST)
            due = ended or waited or not all(_may_wait(m) for m in held)
            if held and due:
                handed = time.monotonic()
                yield held
                held = []
            if ended:
                return

    def _read(self, timeout: float | None) -> bytes | None:
        """The sampler's next bytes; b"" at its end or once closed; None when none came within `timeout`."""
        fd = self.handle.read_fd
        with self._messages_io:
            if self._closed.is_set():
                return b""
            ready, _, _ = select.select([fd, self._wake_r], [], [], timeout)
            if self._wake_r in ready:
                return b""
            return os.read(fd, CHUNK) if ready else None

    def _decode(self, framer: LineFramer) -> list[channel.Message]:
        out = []
        for line in framer.lines():
            if line.strip():
                msg = channel.decode(line)
                if self.exporter is not None:
                    self.exporter.observe(msg)
                out.append(msg)
        return out

    def output(self) -> Iterator[str]:
        """The command's output as it is written: woken by the file's writes (inotify), or polled without it;
        a command that prints all the time is read in batches at most every OUTPUT_GAP seconds."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        watch = FileWatch(self.output_fd, OUTPUT_POLL)
        try:
            while True:
                with self._output_io:
                    if self._closed.is_set():
                        return
                    data = os.read(self.output_fd, CHUNK)
                    if not data:
                        if os.fstat(self.output_fd).st_size < os.lseek(self.output_fd, 0, os.SEEK_CUR):
                            os.lseek(self.output_fd, 0, os.SEEK_SET)  # truncated (copytruncate): from its start
                        else:
                            watch.wait(None, self._wake_r)
                        continue
                    chunks = [data]
                    while len(data) == CHUNK and len(chunks) < BATCH // CHUNK:  # a flood: one batch, its tail
                        data = os.read(self.output_fd, CHUNK)
                        chunks.append(data)
                text = decoder.decode(b"".join(chunks))
                if len(chunks) > 1:
                    text = tail_lines(text, TAIL_LINES)
                if text:
                    yield clean_output(text)
                self._closed.wait(OUTPUT_GAP)  # let more gather before the next batch
        finally:
            watch.close()

    def signal(self, sig: int) -> None:
        self.handle.signal(sig)

    def stop_tree(self, sig: int) -> bool:
        """The sampler signals the whole tree; False when it cannot be asked."""
        return self.handle.request({"cmd": "stop_tree", "signal": int(sig)})

    def stop(self) -> None:
        self.handle.signal(STOP_SIGNAL)

    def close(self) -> None:
        """No more reading: the readers are woken and, once this returns, out of their fds (waited for at most
        CLOSE_WAIT each, should one be stuck: the view's end is never held up for long)."""
        if not self._closed.is_set():
            self._closed.set()
            os.write(self._wake_w, b"x")
        for lock in (self._messages_io, self._output_io):
            if lock.acquire(timeout=CLOSE_WAIT):
                lock.release()


def _output_fds(cfg: EngineConfig, store: Path, session_id: str) -> tuple[int, int, Path | None]:
    """(write fd for the command, read fd for the view, saved path or None)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    if cfg.save:
        try:
            store.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = paths.output_file(store, session_id)
            w = os.open(path, flags, 0o600)  # the job's own output (tokens, passwords): the user's alone
            return w, os.open(path, os.O_RDONLY | os.O_CLOEXEC), path
        except OSError:
            pass  # an unwritable store: the sampler reports that; the output still shows
    fd, name = tempfile.mkstemp(prefix="gputop-output-", suffix=".log")
    os.close(fd)
    w = os.open(name, flags)
    r = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
    os.unlink(name)
    return w, r, None


HANGUP_GRACE = 5.0  # seconds the view gets to close after a hang-up before the watchdog ends us


class HangUp:
    """The command runs in a session of its own, so a hang-up of our terminal (the connection of `ssh -t`
    dropping: the kernel signals the session leader, the shell its jobs) would never reach it: we pass it on,
    close the view (no terminal left to draw on) and wait for the sampler, which waits for the command."""

    def __init__(self, handle: SamplerHandle) -> None:
        self.handle = handle
        self.app: LiveApp | None = None
        self.seen = False
        self.closed = threading.Event()  # the view closed after a hang-up: the watchdog stands down
        if not_ignored((signal.SIGHUP,)):  # under `nohup` it stays ignored
            signal.signal(signal.SIGHUP, self._on_hangup)

    def _on_hangup(self, _sig: int, _frame: object) -> None:
        if self.seen:
            return
        self.seen = True
        self.handle.signal(signal.SIGHUP)
        # No terminal any more: writes to it fail, and Textual's writer thread dies of that, leaving the app's
        # shutdown blocked on its queue. Writes go to /dev/null from now on, and a watchdog ends us once the
        # sampler is done should the view still not close.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        threading.Thread(target=self._watchdog, daemon=True).start()
        if self.app is not None:
            try:
                asyncio.get_running_loop().call_soon_threadsafe(self.app.exit)
            except RuntimeError:  # the view is not running yet (or any more): close it as soon as it runs
                threading.Thread(target=self._exit_when_running, daemon=True).start()

    def _watchdog(self) -> None:
        if self.closed.wait(HANGUP_GRACE):
            return
        self.handle.wait()  # the sampler waits for the command and saves the session
        os._exit(128 + signal.SIGHUP)

    def _exit_when_running(self) -> None:
        app = self.app
        deadline = time.monotonic() + 30
        while app is not None and not app.is_running and time.monotonic() < deadline:
            time.sleep(0.02)
        if app is not None and app.is_running:
            try:
                app.call_from_thread(app.exit)
            except RuntimeError:  # it ended meanwhile
                pass

    def release(self) -> None:
        self.closed.set()  # the sampler's pid is no longer ours to signal: `HeldSignals` takes a hang-up on


class HeldSignals:
    """Once the view has closed, a Ctrl-C, SIGTERM or hang-up must not end us before we know whether the command
    needs us: should the sampler have died, we wait for the command ourselves (`orphans.Takeover`), and dying
    then would leave it running untracked. They are held meanwhile, then passed to the command's process group
    (`forward_to`; its own session: keys pressed here never reached it), or dropped when tracking ended (the
    sampler saved the session; we are about to exit)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, *JOB_SIGNALS)

    def __init__(self) -> None:
        self.held: list[int] = []
        self.target = 0

    def hold(self, *sigs: int) -> None:
        for sig in not_ignored(sigs or self.SIGNALS):  # one inherited as ignored stays ignored
            signal.signal(sig, self._on_signal)

    def _on_signal(self, sig: int, _frame: object) -> None:
        if self.target:
            _to_group(self.target, sig)
        else:
            self.held.append(sig)

    def forward_to(self, pid: int) -> None:
        """The takeover waits for the command `pid`: signals go to it from now on, the held ones first."""
        console.say(f"Ctrl-C, SIGTERM or a hang-up now go to the command's process group ({pid})")
        self.target = pid
        self.hold()
        held, self.held = self.held, []
        for sig in held:
            _to_group(pid, sig)


def _to_group(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except OSError:  # gone meanwhile: our wait ends with it
        pass


def _pass_job_signals(handle: SamplerHandle, launch: bool) -> None:
    """SIGUSR1/2 (a checkpoint request: SLURM's --signal=USR1@T) ended the view by their default action: they
    are the command's, passed on through the sampler (launch), or ignored (attach: the process is not ours)."""
    for sig in not_ignored(JOB_SIGNALS):
        signal.signal(sig, (lambda s, _f: handle.signal(s)) if launch else signal.SIG_IGN)


def _say_how_it_ended(final: ResourceUsage | None, save: bool, output_path: Path | None = None) -> None:
    """On the terminal once the view has gone: a stop made from the view, a detached command that runs on (and
    where its output goes), and where the session went."""
    for note in final.notes if final is not None else []:
        if note.startswith("stopped from the live view"):
            console.say(note)
    if final is not None and left_running(final):
        console.say(detached_text(final.pid, final.mode, output_path))
    if final is not None and final.session_path:
        console.say(f"session {final.session_id} saved: {final.session_path}")
    elif final is not None and save:
        console.not_saved(final.notes)


def _killed(handle: SamplerHandle) -> bool:
    """The sampler died of a signal (a SIGKILL, the OOM killer) rather than ending its run."""
    return handle.exit_status is not None and handle.exit_status < 0


def run_live(cfg: EngineConfig, args: argparse.Namespace, units: Units, *, exporter: Exporter | None = None) -> int:
    """Track with the live view; return the command's exit code (128+N after signal N) once the user quits."""
    from gputop_tracker.core.store import new_session_id

    del args, units  # the view shows human units; the report options apply to headless output
    cfg.stream_samples = True
    cfg.new_session = True
    cfg.session_id = cfg.session_id or new_session_id()
    if os.getpid() not in cfg.exclude:  # attached to an ancestor (our shell), we are not its descendant
        cfg.exclude.append(os.getpid())
    store = paths.store_dir(cfg.store)
    write_fd, devnull, read_fd, output_path = _command_streams(cfg, store, cfg.session_id)
    become_subreaper()  # should the sampler die, the command comes to us (`orphans.Takeover`)
    handle = start_forked(cfg, requests=True)  # before any thread: the App starts several
    hangup = HangUp(handle)
    _pass_job_signals(handle, cfg.mode == "launch")
    if exporter is not None:
        exporter.start()  # its threads only after the fork
    for fd in (write_fd, devnull):
        if fd >= 0:
            os.close(fd)

    from gputop_tracker.tui.live.app import LiveApp  # loads while the command already runs

    source = SamplerSource(handle, read_fd, exporter, hold=draw_period(cfg.interval))
    app = LiveApp(
        source,
        interval=cfg.interval,
        command=cfg.argv,
        mode=cfg.mode,
        store_dir=store,
        output_path=output_path,
    )
    hangup.app = app
    if exporter is not None:  # the view owns the terminal: an export that fails is a notification there

        def report(text: str) -> None:
            if not app.tell(text, "Prometheus"):  # the view is closing
                console.say(text)

        exporter.set_reporter(report)
    code = None if hangup.seen else app.run()  # hung up already: no terminal to draw on
    return _after_the_view(cfg, app, code, handle, hangup, source, exporter, read_fd, output_path, store)


def _command_streams(cfg: EngineConfig, store: Path, session_id: str) -> tuple[int, int, int, Path | None]:
    """(the command's output fd, its /dev/null stdin, the view's read fd, the saved output's path): a launched
    command writes into a file the view tails; an attached process keeps its own output (the pane stays empty)."""
    if cfg.mode != "launch":
        return -1, -1, os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), None
    write_fd, read_fd, output_path = _output_fds(cfg, store, session_id)
    # the sampler scans the output for CUDA / PyTorch OOM messages, with its own offset in the file
    cfg.output_path = str(output_path) if output_path else f"/proc/self/fd/{read_fd}"
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    cfg.stdin, cfg.stdout, cfg.stderr = devnull, write_fd, write_fd
    return write_fd, devnull, read_fd, output_path


def _after_the_view(
    cfg: EngineConfig,
    app: LiveApp,
    code: int | None,
    handle: SamplerHandle,
    hangup: HangUp,
    source: SamplerSource,
    exporter: Exporter | None,
    read_fd: int,
    output_path: Path | None,
    store: Path,
) -> int:
    """The view has closed: stop tracking if it did not decide, wait for the sampler, say how the run ended, and
    take the command over should the sampler have died under it. Returns the exit code."""
    held = HeldSignals()
    held.hold(signal.SIGINT, signal.SIGTERM, *JOB_SIGNALS)  # a hang-up stays HangUp's until `release`
    if exporter is not None:
        exporter.set_reporter(console.say)  # the view is gone: its last writes are told on stderr
    hangup.closed.set()
    source.close()
    if app.control.running and not hangup.seen:
        # The view ended without a decision (crash, closed terminal): stop tracking, never kill the job.
        handle.signal(STOP_SIGNAL)
    handle.close()
    handle.wait()
    hangup.release()
    held.hold(signal.SIGHUP)
    os.close(read_fd)
    _say_how_it_ended(app.final, cfg.save, output_path)
    if app.failure is not None:
        console.say(app.failure.message)
    if app.final is None and app.failure is None and app.main_pid and app.session_id and _killed(handle):
        took_over = orphans.Takeover(cfg, handle.exit_status, app.main_pid, app.session_id, str(store))
        held.held[:0] = handle.unrelayed()  # sent to the sampler as it died, never passed on: the command's first
        return took_over.run(console.say, held.forward_to)
    if hangup.seen and app.final is None:
        return 128 + signal.SIGHUP
    if code is None:  # the app crashed; Textual printed the traceback
        return app.return_code or 1
    return code
