"""Code blocks and the Tracker used the way real programs misuse them: fds closed under the FIFO, a relative
TMPDIR and a chdir, generators, odd names, nested Trackers, a signal handler that marks, an exception inside
`with Tracker()` while the sampler is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop_tracker.api import blocks
from gputop_tracker.core.blocks.inbox import BlockInbox


def _run_script(
    body: str, env: dict[str, str], tmp_path: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, str(script)], env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout
    )


def test_a_program_that_closes_every_fd_keeps_its_own_files(inbox: BlockInbox, tmp_path: Path) -> None:
    """`os.closerange(3, 1024)`, then a file opened (it gets the FIFO's old number), then a block: the block's
    messages went into the program's file, and a second closerange made `with block()` raise EBADF. Now the
    program's files are its own, no block raises, and blocks after the closerange still reach the sampler."""
    user = tmp_path / "user.txt"
    proc = _run_script(
        f"""
        import os
        from gputop_tracker import block, mark
        with block("before"):
            pass
        os.closerange(3, 1024)
        fd = os.open({str(user)!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with block("reused"):
            pass
        mark("m")
        os.write(fd, b"mine\\n")
        os.close(fd)
        os.closerange(3, 1024)
        with block("closed"):
            pass
        print("ok")
        """,
        {blocks.ENV: inbox.path},
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"
    assert user.read_bytes() == b"mine\n"
    names = [(m["k"], m["name"]) for m in inbox.read()]
    assert names == [
        ("s", "before"), ("e", "before"), ("s", "reused"), ("e", "reused"), ("m", "m"), ("s", "closed"), ("e", "closed")
    ]  # fmt: skip


def test_a_relative_tmpdir_gives_an_absolute_fifo_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TMPDIR=tmp (relative): the FIFO was named `tmp/gputop-blocks-…/blocks` in GPUTOP_TRACKER_BLOCKS, so a
    program that changed its cwd afterwards (or a child started elsewhere) lost every block, silently."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", "tmp")
    box = BlockInbox.create()
    assert box is not None
    try:
        assert os.path.isabs(box.path) and box.path.startswith(str(tmp_path / "tmp"))
        monkeypatch.chdir("/")
        saved = blocks._sink
        blocks._activate(box.path)
        try:
            blocks.mark("after chdir")
        finally:
            blocks._activate(None)
            blocks._sink = saved
        assert [m["name"] for m in box.read()] == ["after chdir"]
    finally:
        box.close()


def test_an_exception_inside_with_tracker_propagates_unchanged(store: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The sampler died (killed) while the body raised: `__exit__`'s stop() raised TrackerError, which replaced
    the program's own exception. Now the program's exception propagates unchanged and the tracker's failure is
    one line on stderr; without an exception, the failure is raised as before."""
    import signal as _signal

    from gputop_tracker import Tracker
    from gputop_tracker.api.tracker import TrackerError

    mine = ValueError("the program's own")
    tracker = Tracker(sleep_time=0.1, save=False, join_timeout=5, n_join_attempts=1)
    with pytest.raises(ValueError) as got, tracker as t:
        assert t._handle is not None
        os.kill(t._handle.pid, _signal.SIGKILL)
        t._handle.wait()
        raise mine
    assert got.value is mine
    err = capfd.readouterr().err
    assert "gputop-tracker:" in err and "sampler" in err
    with pytest.raises(TrackerError), Tracker(sleep_time=0.1, save=False, join_timeout=5, n_join_attempts=1) as t:
        assert t._handle is not None
        os.kill(t._handle.pid, _signal.SIGKILL)
        t._handle.wait()


def test_a_tracked_generator_runs_until_it_is_exhausted(inbox: BlockInbox) -> None:
    """`@tracked` on a generator function measured only the call that creates the generator (nanoseconds),
    not the work done while it is iterated. A run now lasts from its first item to its end (exhausted, closed
    or collected); `send` and `throw` reach the generator as without the decorator."""
    import time as _time

    @blocks.tracked("gen")
    def gen(n: int) -> Iterator[int]:
        for i in range(n):
            _time.sleep(0.03)
            yield i
        return None

    @blocks.tracked
    def echo() -> Iterator[int]:
        got = 0
        while True:
            try:
                got = yield got * 2
            except KeyError:
                got = -1

    assert list(gen(4)) == [0, 1, 2, 3]
    e = echo()
    assert next(e) == 0 and e.send(5) == 10 and e.throw(KeyError) == -2
    e.close()
    partial = gen(10)
    next(partial)
    del partial  # collected: its run ends
    got = inbox.read()
    ends = [m for m in got if m["k"] == "e"]
    assert [m["name"] for m in ends] == [
        "gen",
        "test_a_tracked_generator_runs_until_it_is_exhausted.<locals>.echo",
        "gen",
    ]
    assert ends[0]["dur"] >= 0.12
    assert ends[2]["dur"] >= 0.03


def test_a_tracked_async_generator_runs_until_it_is_exhausted(inbox: BlockInbox) -> None:
    """The same for `async def … yield`: the run lasts while it is iterated; asend/athrow/aclose pass through,
    tracked or not."""
    import asyncio
    from collections.abc import AsyncIterator

    @blocks.tracked("agen")
    async def agen(n: int) -> AsyncIterator[int]:
        for i in range(n):
            await asyncio.sleep(0.03)
            yield i

    @blocks.tracked("aecho")
    async def aecho() -> AsyncIterator[int]:
        got = 0
        while True:
            try:
                got = yield got * 2
            except KeyError:
                got = -1

    async def main() -> list[object]:
        items = [i async for i in agen(4)]
        e = aecho()
        out = [await e.__anext__(), await e.asend(5), await e.athrow(KeyError)]
        await e.aclose()
        return [items, *out]

    assert asyncio.run(main()) == [[0, 1, 2, 3], 0, 10, -2]
    ends = [m for m in inbox.read() if m["k"] == "e"]
    assert [m["name"] for m in ends] == ["agen", "aecho"] and ends[0]["dur"] >= 0.12
    saved = blocks._sink
    blocks._sink = None  # outside tracking: the same behaviour, nothing sent
    try:
        assert asyncio.run(main()) == [[0, 1, 2, 3], 0, 10, -2]
    finally:
        blocks._sink = saved
    assert inbox.read() == []


def test_a_name_that_is_not_a_str_is_its_str_as_outside_tracking(inbox: BlockInbox) -> None:
    """`block(123)`, `block(b"x")`, `@tracked(42)` work outside tracking (a no-op) but raised TypeError under
    tracking (`123[:200]`, bytes not JSON): the program must not behave differently when tracked."""

    @blocks.tracked(42)  # type: ignore[call-overload]
    def f() -> int:
        return 1

    with blocks.block(123):  # type: ignore[arg-type]
        pass
    with blocks.block(b"x"):  # type: ignore[arg-type]
        pass
    assert f() == 1
    blocks.mark(b"m")  # type: ignore[arg-type]
    names = [m["name"] for m in inbox.read() if m["k"] != "e"]
    assert names == ["123", "b'x'", "42", "b'm'"]


def test_odd_names_never_crash_and_are_kept(inbox: BlockInbox) -> None:
    """10,000 characters, newlines, NUL, a lone surrogate, 4-byte characters: one message each (cut to
    MAX_NAME), never split, never a crash."""
    odd = ["x" * 10_000, "a\nb\x00c", "\udcff", "\U0001f600" * 300]
    for name in odd:
        with blocks.block(name):
            pass
        blocks.mark(name)
    got = inbox.read()
    assert inbox.bad == 0 and len(got) == 3 * len(odd)
    assert [m["name"] for m in got if m["k"] == "m"] == [n[: blocks.MAX_NAME] for n in odd]


def test_a_single_threaded_block_never_uses_more_cpu_than_wall_time(inbox: BlockInbox) -> None:
    """The CPU clock was read outside the wall clock at both ends (entry: CPU then wall; exit: wall then CPU),
    so a short busy block of a one-thread program reported more CPU than wall time (`mean_cpu_percent` 108 %
    for a 0.1 ms block, labelled exact). Now the wall-clock window holds the CPU window."""
    for _ in range(3000):
        with blocks.block("busy"):
            sum(range(50))
    ends = [m for m in inbox.read() if m["k"] == "e"]
    assert len(ends) == 3000
    assert sum(m["cpu"] for m in ends) <= sum(m["dur"] for m in ends)


REENTRY = """
import gc, os, signal, sys
from gputop_tracker import block, mark, tracked
from gputop_tracker.api import blocks

def handler(signum, frame):
    mark("in the handler")

signal.signal(signal.SIGUSR1, handler)
real_read_hwm = blocks._read_hwm
armed = []

def read_hwm():
    # what could come at any bytecode boundary while a block holds its lock: a signal whose Python handler
    # marks, or a garbage collection that finishes a @tracked generator left in a reference cycle
    if armed:
        what = armed.pop()
        if what == "signal":
            os.kill(os.getpid(), signal.SIGUSR1)
        else:
            gc.collect()
    return real_read_hwm()

blocks._read_hwm = read_hwm

@tracked("gen")
def gen():
    yield 1
    yield 2

class Cycle:
    pass

armed.append("signal")
with block("outer"):
    pass
c = Cycle()
c.me = c
c.g = gen()
next(c.g)
del c
armed.append("gc")
with block("collects"):
    pass
print("done", flush=True)
"""


def test_a_signal_handler_or_a_collection_that_reports_while_a_block_holds_the_lock(
    inbox: BlockInbox, tmp_path: Path
) -> None:
    """A Python signal handler that calls mark(), or a garbage collection that finishes a @tracked generator,
    runs in the thread that holds the sink's lock (inside a block's entry): the lock was not re-entrant and
    the program hung for ever. Now it finishes and every message arrives."""
    proc = _run_script(REENTRY, {blocks.ENV: inbox.path}, tmp_path, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
    got = [(m["k"], m["name"]) for m in inbox.read()]
    assert ("m", "in the handler") in got and ("e", "gen") in got
    assert got.count(("s", "outer")) == got.count(("e", "outer")) == 1
    assert got.count(("s", "collects")) == got.count(("e", "collects")) == 1


NESTED = """
import json, os, time
from gputop_tracker import Tracker, block
from gputop_tracker.api import blocks

ENV = blocks.ENV
out = {}
with Tracker(sleep_time=0.2, save=False, time_unit="seconds") as outer:
    outer_path = os.environ[ENV]
    with block("a"):
        pass
    with block("epoch"):
        with Tracker(sleep_time=0.2, save=False, time_unit="seconds") as inner:
            with block("inner"):
                pass
        out["env_after_inner"] = os.environ.get(ENV) == outer_path
        time.sleep(0.05)
    with block("b"):
        pass
out["env_after_outer"] = os.environ.get(ENV)
out["sink_after_outer"] = blocks._sink is None
# stopped out of order: the outer first, the inner's blocks still reach the inner
first, second = Tracker(sleep_time=0.2, save=False), Tracker(sleep_time=0.2, save=False)
first.start()
second.start()
first.stop()
with block("second only"):
    pass
second.stop()
out["env_after_both"] = os.environ.get(ENV)
out["sink_after_both"] = blocks._sink is None
for name, t in (("outer", outer), ("inner", inner), ("first", first), ("second", second)):
    d = t.to_json()
    out[name] = {
        "blocks": {b["name"]: [b["calls"], b["duration"]["total"]] for b in d["blocks"]},
        "notes": d["notes"],
        "pids": [p.pid for p in t.raw_usage.processes],
    }
out["inner_sampler"] = inner._handle.pid
out["outer_sampler"] = outer._handle.pid
print(json.dumps(out))
"""


def test_nested_trackers_each_get_their_blocks(tmp_path: Path) -> None:
    """A Tracker inside another: the inner's start closed the outer's FIFO fd, so a block open across the inner
    run ("epoch") never ended for the outer ("1 block runs had not ended"), and the outer's FIFO was named in
    the environment again after both stopped; the inner counted the outer's sampler as a process of its tree
    (and `wait_descendants` would wait for it for ever). Now each gets its own blocks, in any stop order, and
    an inner Tracker leaves the outer's sampler out (the outer still counts the inner's: a child the program
    started)."""
    proc = _run_script(NESTED, {}, tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json as _json

    out = _json.loads(proc.stdout)
    assert out["env_after_inner"] and out["env_after_outer"] is None and out["sink_after_outer"]
    assert out["env_after_both"] is None and out["sink_after_both"]
    outer, inner = out["outer"], out["inner"]
    assert sorted(outer["blocks"]) == ["a", "b", "epoch"] and outer["blocks"]["epoch"][1] >= 0.05
    assert list(inner["blocks"]) == ["inner"]
    assert not any("had not ended" in n for n in outer["notes"] + inner["notes"])
    assert out["outer_sampler"] not in inner["pids"]
    assert list(out["second"]["blocks"]) == ["second only"] and out["first"]["blocks"] == {}


def test_drops_of_the_last_blocks_are_told_at_exit(inbox: BlockInbox, tmp_path: Path) -> None:
    """The count of dropped messages rode only on the next message sent: the drops of a program's last blocks
    (a burst at the end: 214 of 50,153 runs in a 3 s loop of blocks) were never told, and the report said
    nothing was lost. Now the count is sent on its own at exit (waiting a little for room in the FIFO)."""
    script = tmp_path / "burst.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from gputop_tracker import block
            from gputop_tracker.api import blocks
            n = 0
            while not blocks._sink.dropped:  # the last message was dropped: its count is not told yet
                with block("hot"):
                    n += 1
            print(n, flush=True)
            sys.stdin.readline()  # the test drained the FIFO: room for the count at exit
            """
        )
    )
    env = {**os.environ, blocks.ENV: inbox.path}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdin is not None
    runs = int(proc.stdout.readline())
    got = inbox.read()
    proc.stdin.write("\n")
    proc.stdin.close()
    assert proc.wait(60) == 0
    got += inbox.read()
    assert got[-1]["k"] == "d"
    assert sum(m["k"] in "se" for m in got) + sum(m.get("dropped", 0) for m in got) == 2 * runs


def test_an_interrupted_start_leaves_no_sampler_running(
    store: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Ctrl-C while start() waits for the sampler (it takes a second to load): the sampler went on tracking
    the process until it exited (a notebook kernel: for days), its FIFO stayed, and the Tracker could not be
    used. Now the interrupt propagates and the sampler is stopped and reaped, its FIFO removed."""
    from gputop_tracker import Tracker
    from gputop_tracker.api import tracker
    from gputop_tracker.core.sampling import channel

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    spawned: list[channel.SamplerHandle] = []
    real = channel.start_spawned

    def start_spawned(cfg: object) -> channel.SamplerHandle:
        handle = real(cfg)  # type: ignore[arg-type]
        spawned.append(handle)

        def interrupted() -> Iterator[object]:
            raise KeyboardInterrupt
            yield

        handle.messages = interrupted  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr(tracker, "start_spawned", start_spawned)
    t = Tracker(sleep_time=0.1)
    with pytest.raises(KeyboardInterrupt):
        t.start()
    (handle,) = spawned
    assert handle.exit_status is not None  # reaped
    assert not os.path.exists(f"/proc/{handle.pid}")
    assert not [n for n in os.listdir(tmp_path) if n.startswith("gputop-blocks-")]
    assert os.environ.get(blocks.ENV) is None and blocks._sink is None
    assert handle.pid not in tracker._SAMPLERS


def test_the_fifo_is_usable_whatever_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a umask such as 0o277 the private directory was made 0o500 and the FIFO could not be made in it
    (for anyone but root): blocks silently went unreported. The modes are now set, not masked."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    old = os.umask(0o777)
    try:
        box = BlockInbox.create()
    finally:
        os.umask(old)
    assert box is not None
    try:
        assert os.stat(box.directory).st_mode & 0o777 == 0o700
        assert os.stat(box.path).st_mode & 0o777 == 0o600
    finally:
        box.close()


CLOSES_EVERYTHING = """
import os, sys, time
from gputop_tracker import Tracker
from gputop_tracker.api.tracker import TrackerError

t = Tracker(sleep_time=0.1, save=False, join_timeout=5, n_join_attempts=1)
t.start()
os.closerange(3, 1024)
files = [os.open(os.path.join(sys.argv[1], f"f{i}"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600) for i in range(12)]
try:
    t.stop()
    print("stopped")
except TrackerError as e:
    print("failed:", e)
for fd in files:
    os.write(fd, b"mine\\n")
    os.close(fd)
"""


def test_a_tracker_never_closes_the_files_that_took_its_pipes_numbers(tmp_path: Path) -> None:
    """The program closes every fd while a Tracker runs, then opens files that take the numbers of the pipes
    to the sampler: stop() closed two of the program's files (its writes then failed, EBADF). Now the
    Tracker closes only its own pipes; tracking fails with a line saying why, the program's files stay."""
    (tmp_path / "files").mkdir()
    script = tmp_path / "prog.py"
    script.write_text(CLOSES_EVERYTHING)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "files")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    # Either outcome is right: a reader thread blocked in its read when the fd was closed still gets the
    # summary (Linux finishes a read in progress on a closed fd); otherwise stop() says why there is none.
    assert proc.stdout.startswith(("stopped", "failed: this program closed the pipe to the sampler")), proc.stdout
    for i in range(12):
        assert (tmp_path / "files" / f"f{i}").read_bytes() == b"mine\n"


READER_OPENS = """
import sys, threading, time
opened = []


def hook(event, args):
    if threading.current_thread().name == "gputop-tracker-events" and event in ("open", "os.listdir", "os.scandir"):
        opened.append(f"{event} {args[0]}")


sys.addaudithook(hook)
from gputop_tracker import Tracker
from gputop_tracker.api.blocks import block

t = Tracker(sleep_time=0.1, save=False, prometheus_textfile=sys.argv[1])
t.on_sample(lambda sample: None)
t.on_event(lambda event: None)
t.start()
with block("grow"):
    b = bytearray(50_000_000)
    b[::4096] = b"1" * len(b[::4096])
    time.sleep(0.5)
usage = t.stop()
print(len(usage.blocks), len(opened))
print("\\n".join(opened[:5]))
"""


def test_the_trackers_reader_thread_opens_no_file(tmp_path: Path) -> None:
    """The reader thread validated each message kind's first line itself: pydantic built the model then and
    looked for plugins, reading every installed package's metadata (158 files). A program that closed every fd
    meanwhile and opened its own got one of them closed by that thread (seen: 1 run in 30 under load). Every
    validator is now built before the thread starts; it reads its pipe only (samples, events, blocks, the
    exporter it feeds)."""
    script = tmp_path / "prog.py"
    script.write_text(READER_OPENS)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "x.prom")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    blocks_seen, opened = proc.stdout.split("\n", 1)[0].split()
    assert int(blocks_seen) >= 1 and int(opened) == 0, proc.stdout


def test_a_tmpdir_that_cannot_be_used_falls_back_to_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """TMPDIR naming a directory that is gone (a job's scratch, cleaned): no FIFO, blocks silently off. Now the
    next usable place is taken, as tempfile does."""
    monkeypatch.setenv("TMPDIR", "/nonexistent/scratch")
    box = BlockInbox.create()
    assert box is not None
    try:
        assert os.path.dirname(box.directory) in ("/tmp", "/var/tmp", "/dev/shm")
    finally:
        box.close()


def test_one_block_object_used_by_threads_tasks_and_recursion(inbox: BlockInbox) -> None:
    """`shared = block("x")` used from 4 threads, recursively, and by interleaved asyncio tasks: each `with`
    overwrote the object's one run, so runs were lost, ends matched the wrong starts ("ends without their
    start (dropped)", "runs had not ended") and durations were another run's. Outside tracking the same code
    was fine. Now every run is paired with its own end, per thread and per task."""
    import asyncio
    import threading as _threading
    import time as _time

    shared = blocks.block("shared")
    gate = _threading.Barrier(4)

    def work() -> None:
        gate.wait()
        for _ in range(20):
            with shared:
                _time.sleep(0.001)

    threads = [_threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec = blocks.block("rec")

    def down(n: int) -> None:
        with rec:
            if n:
                down(n - 1)

    down(3)
    task_block = blocks.block("task")

    async def task(delay: float) -> None:
        with task_block:
            await asyncio.sleep(delay)

    async def main() -> None:
        await asyncio.gather(task(0.3), task(0.05))

    asyncio.run(main())
    got = inbox.read()
    starts = {m["id"]: m["name"] for m in got if m["k"] == "s"}
    ends = {m["id"]: m for m in got if m["k"] == "e"}
    assert set(starts) == set(ends) and len(starts) == 80 + 4 + 2
    assert all(ends[i]["name"] == name for i, name in starts.items())
    durations = sorted(m["dur"] for m in ends.values() if m["name"] == "task")
    assert 0.05 <= durations[0] < 0.3 <= durations[1]


def test_a_tracker_never_stopped_leaves_no_sampler_and_no_fifo(tmp_path: Path, store: Path) -> None:
    """The program exits with its Tracker running: the sampler ends on its own (the process it tracks is gone),
    and the FIFO directory the Tracker made in TMPDIR no longer stays behind until some later run sweeps it.
    A forked child that exits normally does not remove its parent's FIFO."""
    import time as _time

    proc = _run_script(
        """
        import os, sys
        from gputop_tracker import Tracker, block
        t = Tracker(sleep_time=0.1)
        t.start()
        if os.fork() == 0:
            sys.exit(0)  # runs the child's exit handlers
        os.wait()
        assert os.path.exists(os.environ["GPUTOP_TRACKER_BLOCKS"])
        with block("x"):
            pass
        print(t._handle.pid, flush=True)
        """,
        {"TMPDIR": str(tmp_path)},
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    sampler = int(proc.stdout)
    deadline = _time.monotonic() + 60
    while os.path.exists(f"/proc/{sampler}") and _time.monotonic() < deadline:
        _time.sleep(0.05)
    assert not os.path.exists(f"/proc/{sampler}")
    assert not [n for n in os.listdir(tmp_path) if n.startswith("gputop-blocks-")]


def test_a_stop_interrupted_by_ctrl_c_can_be_finished_by_another(store: Path, tmp_path: Path) -> None:
    """A Ctrl-C while stop() waits for the summary: the summary still arrived (on the reader thread), so the next
    stop() returned it at once — without reaping the sampler or writing `resource_usage_file`. Now the next
    stop() finishes the work."""
    from gputop_tracker import Tracker

    out = tmp_path / "usage.json"
    t = Tracker(sleep_time=0.1, resource_usage_file=out)
    t.start()
    reader = t._reader
    assert reader is not None
    real_join = reader.join
    calls: list[float | None] = []

    def interrupted_join(timeout: float | None = None) -> None:
        calls.append(timeout)
        if len(calls) == 1:
            real_join(timeout)  # the summary is in
            raise KeyboardInterrupt
        real_join(timeout)

    reader.join = interrupted_join  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        t.stop()
    usage = t.stop()
    assert usage is not None and out.exists()
    assert t._handle is not None and t._handle.exit_status is not None


def test_a_callback_that_raises_systemexit_costs_the_summary_nothing(
    store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A sample or event callback calling `sys.exit()` (to abort on a critical alert): SystemExit is not an
    Exception, it ended the reader thread, and stop() raised "the sampler process ended without a summary".
    Now it is said on stderr like any broken callback, and tracking goes on."""
    import time as _time

    from gputop_tracker import Tracker

    t = Tracker(sleep_time=0.1, save=False)
    seen: list[int] = []

    @t.on_sample
    def abort(sample: object) -> None:
        seen.append(1)
        raise SystemExit("abort from a callback")

    t.on_event(abort, types="start")
    with t:
        deadline = _time.monotonic() + 60
        while len(seen) < 3 and _time.monotonic() < deadline:
            _time.sleep(0.05)
    assert t.resource_usage is not None and len(seen) >= 3
    assert "SystemExit" in capfd.readouterr().err


@pytest.mark.parametrize("kind", ["regular file", "link to a pipe (/dev/stdout)"])
def test_blocks_are_never_written_into_what_is_not_the_sessions_fifo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """GPUTOP_TRACKER_BLOCKS naming a regular file or /dev/stdout (a link to the program's own output pipe): block
    records were written into it. Now only a FIFO named directly is used; anything else makes blocks no-ops."""
    r, w = os.pipe()
    try:
        if kind == "regular file":
            target = tmp_path / "notes.txt"
            target.write_bytes(b"mine\n")
        else:
            target = tmp_path / "stdout"
            target.symlink_to(f"/proc/self/fd/{w}")  # as /dev/stdout -> /proc/self/fd/1 with stdout a pipe
        saved = blocks._sink
        blocks._activate(str(target))
        try:
            with blocks.block("step"):
                pass
            blocks.mark("m")
        finally:
            blocks._activate(None)
            blocks._sink = saved
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 100)  # nothing went into the pipe
        if kind == "regular file":
            assert target.read_bytes() == b"mine\n"
    finally:
        os.close(r)
        os.close(w)


def test_the_inbox_removes_only_its_own_fifo() -> None:
    """Every path the tool removes is one it made: a file put where the FIFO was is left alone (and so is the
    directory that still holds it)."""
    box = BlockInbox.create()
    assert box is not None
    os.unlink(box.path)
    with open(box.path, "w") as f:
        f.write("mine")
    box.close()
    assert Path(box.path).read_text() == "mine"
    os.unlink(box.path)
    os.rmdir(box.directory)
