"""Code blocks: `block`, `tracked`, `mark` in real tracked programs — the CLI, multiprocessing
workers (spawn and fork), nested blocks, the Python API — and the FIFO transport's promises (never blocks,
drops and counts when full, silent once the sampler is gone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import track_json

from gputop_tracker.api import blocks
from gputop_tracker.core.blocks.inbox import BlockInbox
from gputop_tracker.core.model import models

MB = 1000 * 1000

PRELUDE = (
    f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
    + """
import os, sys, time, json
from blocksync import drained
from gputop_tracker import block, tracked, mark

def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

def touch(n):
    buf = bytearray(n)
    for i in range(0, n, 4096):
        buf[i] = 1
    return buf


def synced():
    # every block boundary so far has been served (and sampled) while this process lives: the sampler reads
    # the mark only after it finished serving what it had read before
    drained()
    mark("sync")
    drained()

def truth(key, value):
    with open(os.environ["TRUTH"], "a") as f:
        f.write(json.dumps({"key": key, "pid": os.getpid(), "value": value}) + "\\n")
"""
)


def _run(tmp_path: Path, body: str, *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run `body` (after PRELUDE) under the real CLI; (the JSON report, the figures the script wrote)."""
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    truth_file = tmp_path / "truth.jsonl"
    proc, report = track_json(
        tmp_path, *args, "--", sys.executable, str(script), env={"TRUTH": str(truth_file)}, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    truth: dict[str, Any] = {}
    if truth_file.exists():
        for line in truth_file.read_text().splitlines():
            t = json.loads(line)
            truth[t["key"]] = t
    return report, truth


def _blocks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["name"]: b for b in report["blocks"]}


def test_done_means_alloc_block_and_tracked_step(tmp_path: Path, strict_models: None) -> None:
    """The issue's "done means": 300 MB touched for 50 ms at --interval 1, and a function called 3 times."""
    report, truth = _run(
        tmp_path,
        """
        with block("alloc"):
            buf = touch(300 * 1000 * 1000)
            time.sleep(0.05)
            truth("alloc", hwm())
        drained()  # the sampler has read the block's end (and sampled it, the process alive meanwhile)
        del buf

        @tracked("step")
        def step(i):
            mark(f"step {i}")
            return sum(range(10000))

        for i in range(3):
            step(i)
        """,
        "--interval",
        "1",
    )
    usage = models.ResourceUsage.model_validate(report)  # extra="forbid": every key is in the models
    by_name = _blocks(report)
    alloc, step = by_name["alloc"], by_name["step"]
    assert alloc["calls"] == 1
    assert abs(alloc["peak_ram"] - truth["alloc"]["value"]) <= 0.02 * truth["alloc"]["value"]
    assert alloc["sources"]["peak_ram"].startswith("exact")
    assert alloc["duration"]["total"] >= 0.05
    assert alloc["pids"] == [truth["alloc"]["pid"]]
    assert alloc["cpu_seconds"] > 0
    assert step["calls"] == 3
    assert step["duration"]["min"] <= step["duration"]["mean"] <= step["duration"]["max"]
    types = [e.type for e in usage.events]
    assert types.count("block_start") == 4 and types.count("block_end") == 4 and types.count("mark") == 3
    assert [e.message for e in usage.events if e.type == "mark"] == ["step 0", "step 1", "step 2"]
    # a 50 ms block at a 1 s interval still got a sample while it ran (the boundary samples)
    assert alloc["sources"]["peak_private"] == "sampled lower bound (1 of 1 runs seen by a sample)"
    assert alloc["peak_private"] is not None and alloc["peak_private"] <= alloc["peak_ram"]


def test_run_peaks_survive_the_resets(tmp_path: Path) -> None:
    """A block resets VmHWM at entry: the VmHWM just before (in the block message) still counts for the run's
    peak and the process's own peak — in the main process and in a descendant, whatever the samples saw."""
    child = tmp_path / "child.py"
    child.write_text(
        PRELUDE
        + textwrap.dedent(
            """
            buf = touch(250 * 1000 * 1000)
            del buf
            truth("child_before", hwm())
            with block("child small"):
                small = touch(10 * 1000 * 1000)
            """
        )
    )
    report, truth = _run(
        tmp_path,
        f"""
        import subprocess
        buf = touch(400 * 1000 * 1000)
        del buf
        truth("main_before", hwm())
        with block("small"):
            small = touch(10 * 1000 * 1000)
        subprocess.run([sys.executable, {str(child)!r}], check=True)
        """,
        "--interval",
        "5",
    )
    main_before, child_before = truth["main_before"], truth["child_before"]
    main_total = report["max_ram"]["main"]["total_rss"]
    assert abs(main_total - main_before["value"]) <= 0.02 * main_before["value"]
    procs = {p["pid"]: p for p in report["processes"]}
    assert procs[main_before["pid"]]["peak_rss"] >= main_before["value"]
    assert procs[child_before["pid"]]["peak_rss"] >= child_before["value"]
    assert report["max_ram"]["descendants"]["total_rss"] >= child_before["value"]
    assert report["max_ram"]["combined"]["total_rss"] >= main_before["value"]
    small = _blocks(report)["small"]
    assert small["peak_ram"] < main_before["value"] - 300 * MB  # the block's own peak is after the reset


def test_nested_blocks_keep_what_an_inner_reset_cleared(tmp_path: Path) -> None:
    report, truth = _run(
        tmp_path,
        """
        with block("outer"):
            buf = touch(200 * 1000 * 1000)
            del buf
            truth("outer", hwm())
            for _ in range(2):
                with block("inner"):
                    small = touch(20 * 1000 * 1000)
                    truth("inner", hwm())
        """,
    )
    by_name = _blocks(report)
    outer, inner = by_name["outer"], by_name["inner"]
    assert outer["calls"] == 1 and inner["calls"] == 2
    assert abs(outer["peak_ram"] - truth["outer"]["value"]) <= 0.02 * truth["outer"]["value"]
    assert inner["peak_ram"] < outer["peak_ram"] - 100 * MB
    assert inner["duration"]["total"] <= outer["duration"]["total"]


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_block_in_a_multiprocessing_worker(tmp_path: Path, method: str) -> None:
    report, truth = _run(
        tmp_path,
        f"""
        import multiprocessing as mp

        @tracked("work")
        def work(n):
            truth("worker", 0)
            with block("worker alloc"):
                buf = touch(n)
                truth("worker alloc", hwm())
            return n

        if __name__ == "__main__":
            ctx = mp.get_context({method!r})
            p = ctx.Process(target=work, args=(50 * 1000 * 1000,))
            p.start()
            p.join()
            assert p.exitcode == 0
        """,
    )
    by_name = _blocks(report)
    worker_pid = truth["worker"]["pid"]
    assert by_name["work"]["calls"] == 1 and by_name["work"]["pids"] == [worker_pid]
    alloc = by_name["worker alloc"]
    assert alloc["pids"] == [worker_pid] and worker_pid != report["pid"]
    assert abs(alloc["peak_ram"] - truth["worker alloc"]["value"]) <= 0.02 * truth["worker alloc"]["value"]


def test_threads_and_default_names(tmp_path: Path) -> None:
    report, _truth = _run(
        tmp_path,
        """
        import threading

        @tracked
        def job():
            return sum(range(1000))

        def loop():
            for _ in range(50):
                job()
                with block():
                    pass

        threads = [threading.Thread(target=loop) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        import asyncio

        @tracked("coroutine")
        async def wait():
            await asyncio.sleep(0.02)
            return 5

        assert asyncio.run(wait()) == 5 and asyncio.run(wait()) == 5
        """,
    )
    by_name = _blocks(report)
    assert by_name["job"]["calls"] == 400
    (line_block,) = [b for n, b in by_name.items() if n.startswith("script.py:")]
    assert line_block["calls"] == 400
    assert not any("dropped" in n for n in report["notes"])
    coroutine = by_name["coroutine"]
    assert coroutine["calls"] == 2 and coroutine["duration"]["min"] >= 0.02  # the await, not the creation


def test_tracker_in_process_reports_blocks(tmp_path: Path, store: Path) -> None:
    """A Tracker in the program itself: its blocks (and its children's) report; before and after, no-ops."""
    script = tmp_path / "api.py"
    script.write_text(
        PRELUDE
        + textwrap.dedent(
            """
            import subprocess
            from gputop_tracker import Tracker
            from gputop_tracker.api import blocks
            assert not blocks.tracking()
            with Tracker(sleep_time=0.2, ram_unit="bytes", time_unit="seconds") as t:
                assert blocks.tracking() and os.environ[blocks.ENV]
                with block("api alloc"):
                    buf = touch(100 * 1000 * 1000)
                    inside = hwm()
                subprocess.run([sys.executable, "-c",
                    "from gputop_tracker import block\\nwith block('child'): pass"], check=True)
                mark("done")
            assert not blocks.tracking() and blocks.ENV not in os.environ
            with block("after"):
                pass
            usage = t.resource_usage
            by_name = {b.name: b for b in usage.blocks}
            print(json.dumps({"inside": inside, "names": sorted(by_name),
                              "peak": by_name["api alloc"].peak_ram,
                              "marks": [e.message for e in usage.events if e.type == "mark"]}))
            """
        )
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["names"] == ["api alloc", "child"]
    assert abs(out["peak"] - out["inside"]) <= 0.02 * out["inside"]
    assert out["marks"] == ["done"]


# --------------------------------------------------------------------------- the transport, in this process


def test_a_full_fifo_drops_and_counts_never_blocks(inbox: BlockInbox, tmp_path: Path) -> None:
    """Nobody reads: the program goes on, drops and counts; its next message says how many, and carries the
    VmHWM a dropped block start read before its reset (the run's peak is never lost with a message)."""
    script = tmp_path / "full.py"
    script.write_text(
        PRELUDE
        + textwrap.dedent(
            """
            from gputop_tracker.api import blocks
            for i in range(20000):  # ~60 bytes each: far more than the FIFO holds
                mark(f"m{i}")
            big = touch(100 * 1000 * 1000)
            del big
            before = hwm()
            with block("dropped both ends"):
                pass
            dropped = blocks._sink.dropped
            print(json.dumps({"dropped": dropped, "before": before}), flush=True)
            sys.stdin.readline()  # the test has drained the FIFO
            mark("after")
            """
        )
    )
    env = {**os.environ, blocks.ENV: inbox.path}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdin is not None
    first = json.loads(proc.stdout.readline())
    got = inbox.read()
    assert got and all(m["k"] == "m" for m in got)
    assert len(got) + first["dropped"] == 20002
    proc.stdin.write("\n")
    proc.stdin.close()
    assert proc.wait(60) == 0
    (last,) = inbox.read()
    assert last["name"] == "after" and last["dropped"] == first["dropped"]
    assert last["hwm"] >= first["before"] > 100 * MB


def test_threads_starting_at_once_lose_no_message(inbox: BlockInbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """8 threads make their first block at once while the FIFO is being opened (slowed here to 50 ms): every
    start and end arrives, none is dropped uncounted by a thread that found the fd not yet open."""
    real_open = os.open

    def slow_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if path == inbox.path:
            time.sleep(0.05)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", slow_open)
    gate = threading.Barrier(8)

    def work() -> None:
        gate.wait()
        for _ in range(5):
            with blocks.block("together"):
                pass

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = inbox.read()
    starts = sorted(m["id"] for m in got if m["k"] == "s")
    ends = sorted(m["id"] for m in got if m["k"] == "e")
    assert starts == ends == list(range(1, 41))
    assert not any("dropped" in m for m in got)
    assert all(m["peak"] is not None for m in got if m["k"] == "e")  # no run's reset was forgotten


def test_a_forked_child_opens_its_own_fd_even_if_the_parent_was_opening(inbox: BlockInbox) -> None:
    """A thread of the parent holds the open lock when the program forks: the child does not wait on it."""
    blocks.mark("parent")  # the parent's fd is open
    lock = blocks._open_lock[0]
    with lock:  # as if another thread were opening the FIFO at the fork
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                blocks.mark("child")
                with blocks.block("in the child"):
                    pass
            finally:
                os._exit(0)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    got = inbox.read()
    assert [m["name"] for m in got] == ["parent", "child", "in the child", "in the child"]
    assert {m["pid"] for m in got[1:]} == {pid}


def _fifo_fds(box: BlockInbox) -> list[int]:
    """This process's fds on the FIFO but the inbox's own two (its reading end and its keeping write end)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == box.path and int(name) not in (box.fd, box.keep_fd):
                out.append(int(name))
        except OSError:
            pass
    return out


def test_a_forked_child_that_reuses_the_fifos_fd_number_keeps_its_file(inbox: BlockInbox, tmp_path: Path) -> None:
    """A daemon closes its fds and opens a log, which gets the number the FIFO had in the parent: the child's
    first block closed that number (the log) and its writes went into the sampler's FIFO."""
    blocks.mark("parent")
    (number,) = _fifo_fds(inbox)
    log = tmp_path / "child.log"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
            if fd != number:
                os.dup2(fd, number)
                os.close(fd)
            blocks.mark("child")
            os.write(number, b"log line\n")
            code = 0
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert log.read_bytes() == b"log line\n"
    assert [m["name"] for m in inbox.read()] == ["parent", "child"] and inbox.bad == 0


def test_each_tracker_run_closes_the_fifo_it_reported_to(inbox: BlockInbox) -> None:
    """`_activate` replaced the sink without closing its fd: one FIFO fd leaked per Tracker run (per %%gputop)."""
    blocks.mark("first")
    assert len(_fifo_fds(inbox)) == 1
    old = blocks._sink
    blocks._activate(inbox.path)
    assert _fifo_fds(inbox) == [] and old is not None and old.fd == -2
    blocks.mark("second")
    assert len(_fifo_fds(inbox)) == 1
    blocks._activate(None)
    assert _fifo_fds(inbox) == []
    assert [m["name"] for m in inbox.read()] == ["first", "second"]


def test_a_forked_child_leaving_its_parents_block_sends_nothing(inbox: BlockInbox) -> None:
    """The child inherits the parent's open block; once it had a block of its own (its sink's pid is the
    child's), leaving the parent's block sent an end for a run the child never started."""
    with blocks.block("outer"):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            with blocks.block("child own"):
                pass
    if pid == 0:  # pragma: no cover - the child, after leaving "outer"
        os._exit(0)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    got = [(m["k"], m["name"], m["pid"]) for m in inbox.read()]
    me = os.getpid()
    assert sorted(got) == sorted(
        [("s", "outer", me), ("s", "child own", pid), ("e", "child own", pid), ("e", "outer", me)]
    )


def test_sampler_gone_never_kills_the_program_with_sigpipe(inbox: BlockInbox, tmp_path: Path) -> None:
    """The sampler dies while the program runs, and the program restored SIGPIPE's default: its next block
    finds no reader (EPIPE), the program lives on and its blocks become no-ops."""
    script = tmp_path / "pipe.py"
    script.write_text(
        PRELUDE
        + textwrap.dedent(
            """
            import signal
            from gputop_tracker.api import blocks
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            mark("opened")  # the FIFO is open for writing now
            print("ready", flush=True)
            sys.stdin.readline()  # the reader is gone
            with block("after the sampler died"):
                pass
            assert blocks._sink.fd == -2 and blocks.block("x") is blocks._NOOP
            print("alive", flush=True)
            """
        )
    )
    env = {**os.environ, blocks.ENV: inbox.path}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == "ready\n"
    inbox.close()
    proc.stdin.write("\n")
    proc.stdin.close()
    assert proc.wait(60) == 0
    assert proc.stdout.read() == "alive\n"


def test_sampler_gone_is_silent(inbox: BlockInbox) -> None:
    inbox.close()
    blocks.mark("y")  # finds no reader: reporting stops, silently
    sink = blocks._sink
    assert sink is not None and sink.fd == -2
    assert blocks.block("x") is blocks._NOOP  # and a block no longer resets this process's VmHWM


def test_outside_tracking_is_a_noop_and_the_import_is_light() -> None:
    code = (
        "import sys, os\n"
        "os.environ.pop('GPUTOP_TRACKER_BLOCKS', None)\n"
        "from gputop_tracker import block, tracked, mark\n"
        "from gputop_tracker.api import blocks\n"
        "assert not blocks.tracking()\n"
        "with block('x'):\n    mark('m')\n"
        "f = tracked(lambda: 7)\nassert f() == 7\n"
        "assert tracked('n')(lambda: 8)() == 8\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'textual', 'gputop_tracker')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != blocks.ENV}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(
        [
            "gputop_tracker",
            "gputop_tracker._probe",  # the probe's FIFO rule (standard library only)
            "gputop_tracker._probe.sitecustomize",  # the probe, imported under its package: nothing runs at import
            "gputop_tracker._version",
            "gputop_tracker.api",
            "gputop_tracker.api.blocks",
            "gputop_tracker.core",
            "gputop_tracker.core.blocks",
            "gputop_tracker.core.blocks.protocol",  # the channel's name, no imports
            "gputop_tracker.core.face",  # the packages' faces (each name loaded on first use)
            "gputop_tracker.core.proc",
            "gputop_tracker.core.proc.vmhwm",  # the VmHWM reader the sampler uses too (no imports)
        ]
    )


# --------------------------------------------------------------------------- reports: show, export, compare


def test_sessions_show_export_and_compare(tmp_path: Path, store: Path) -> None:
    from helpers import track

    ids = []
    for i, extra in enumerate(("", "with block('only b'):\n    pass\n")):
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        report, _truth = _run(run_dir, f"with block('load'):\n    buf = touch({(i + 1) * 50} * 1000 * 1000)\n{extra}")
        ids.append(report["session_id"])
    a, b = ids
    text = track("sessions", "show", b)
    assert text.returncode == 0, text.stderr
    assert "Blocks (2;" in text.stdout and "load" in text.stdout and "only b" in text.stdout
    shown = json.loads(track("sessions", "show", b, "-f", "json", "--ru", "megabytes").stdout)
    assert {x["name"] for x in shown["blocks"]} == {"load", "only b"}
    assert 100 < _blocks(shown)["load"]["peak_ram"] < 200  # megabytes: the report's unit
    exported = json.loads(track("sessions", "export", b).stdout)
    assert [x["name"] for x in exported["summary"]["blocks"]] == ["load", "only b"]
    events = track("sessions", "events", b, "-t", "block_start", "-f", "json")
    assert events.returncode == 0, events.stderr
    assert [e["name"] for e in json.loads(events.stdout)] == ["load", "only b"]

    cmp_text = track("sessions", "compare", a, b)
    assert cmp_text.returncode == 0, cmp_text.stderr
    assert "Overall" in cmp_text.stdout and "Block load" in cmp_text.stdout
    assert "Block only b  (only in B)" in cmp_text.stdout
    cmp = json.loads(track("sessions", "compare", a, b, "-f", "json").stdout)
    assert cmp["a"]["id"] == a and cmp["b"]["id"] == b
    load = next(x for x in cmp["blocks"] if x["name"] == "load")
    assert load["in"] == "both"
    peak = next(f for f in load["figures"] if f["figure"] == "peak_ram")
    assert peak["unit"] == "bytes" and peak["diff"] == peak["b"] - peak["a"]
    assert 40 * MB < peak["diff"] < 60 * MB
    assert next(x for x in cmp["blocks"] if x["name"] == "only b")["in"] == "b"
    assert {f["figure"] for f in cmp["overall"]} >= {"duration", "peak_ram", "cpu_seconds"}
    bad = track("sessions", "compare", a, "nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_garbage_in_the_fifo_is_left_and_a_busy_step_stays_off_the_timeline(tmp_path: Path) -> None:
    """Anything else written to the FIFO is counted and ignored (the sampler never fails on it); a block run
    300 times keeps all its figures while only its first runs go on the bounded event timeline."""
    report, _truth = _run(
        tmp_path,
        """
        fd = os.open(os.environ["GPUTOP_TRACKER_BLOCKS"], os.O_WRONLY | os.O_NONBLOCK)
        for junk in (b"not json\\n", b'{"k":"s","pid":"x","t":1}\\n', b'{"k":"e","pid":1,"t":1,"id":1.5,"name":"z"}\\n',
                     b'[1,2]\\n', b'{"k":"s","pid":1,"t":1,"id":1,"name":"q","hwm":1e400}\\n'):
            os.write(fd, junk)

        @tracked("step")
        def step():
            pass

        for _ in range(300):
            step()
        with block("after junk"):
            pass
        """,
    )
    by_name = _blocks(report)
    assert by_name["step"]["calls"] == 300 and by_name["after junk"]["calls"] == 1
    assert set(by_name) == {"step", "after junk"}
    starts = [e for e in report["events"] if e["type"] == "block_start"]
    assert sum(e["name"] == "step" for e in starts) == 100
    assert sum(e["name"] == "after junk" for e in starts) == 1
    assert any("left off the event timeline" in n for n in report["notes"])


def test_gpu_figures_of_a_block_with_simulated_gpus(tmp_path: Path) -> None:
    """The GPU figures of a block are sampled: the (simulated) GPU memory of its process and the utilization."""
    report, _truth = _run(
        tmp_path,
        """
        with block("on gpu"):
            time.sleep(0.05)
        synced()
        """,
        "--simulate-gpus",
        "1",
    )
    b = _blocks(report)["on gpu"]
    assert b["peak_gpu_ram"] is not None and b["peak_gpu_ram"] > 0
    assert b["mean_gpu_utilization"] is not None
    assert b["sources"]["peak_gpu_ram"].startswith("sampled")


def test_a_killed_samplers_fifo_is_swept_by_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampler killed (SIGKILL) cannot remove its FIFO; the next one removes every such leftover of ours."""
    from gputop_tracker.core.blocks import inbox as blockinbox

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f"{blockinbox.PREFIX}{int(dead.stdout)}-abc"
    gone.mkdir()
    os.mkfifo(gone / "blocks")
    alive = tmp_path / f"{blockinbox.PREFIX}{os.getpid()}-def"
    alive.mkdir()
    other = tmp_path / "unrelated"
    other.mkdir()
    box = BlockInbox.create()
    assert box is not None
    try:
        assert not gone.exists() and alive.exists() and other.exists()
        assert Path(box.directory).parent == tmp_path
    finally:
        box.close()
    assert not Path(box.directory).exists()


def test_a_program_writing_blocks_without_pause_never_keeps_the_sampler_reading(
    inbox: BlockInbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The FIFO was read until it was empty: a writer as fast as the reader kept the sampler in `read` (no
    sample taken meanwhile). A read now takes what was there, at most the FIFO's size."""
    from gputop_tracker.core.blocks import inbox as blockinbox

    line = b'{"k":"m","pid":1,"name":"x","t":1.0}\n'
    full = line * (65536 // len(line)) + b"\n" * (65536 % len(line))
    calls = [0]

    def endless(fd: int, n: int) -> bytes:  # a writer that never pauses: every read comes back full
        calls[0] += 1
        if calls[0] > 1000:
            raise AssertionError("still reading")
        return full

    monkeypatch.setattr(blockinbox.os, "read", endless)
    got = inbox.read()
    assert calls[0] == blockinbox.PIPE_SIZE // 65536 and len(got) == calls[0] * (65536 // len(line))


def test_an_async_generator_left_by_break_ends_its_run(inbox: BlockInbox) -> None:
    """`async for … break`: the loop's finalizer closes the generator in a task of its own, which had no run
    open: the end was dropped and the block stayed open for ever."""
    import asyncio

    @blocks.tracked
    async def agen():  # type: ignore[no-untyped-def]
        for i in range(5):
            yield i

    async def main() -> None:
        async for x in agen():
            if x == 2:
                break
        await asyncio.sleep(0.05)  # the finalizer's aclose runs

    asyncio.run(main())
    got = [(m["k"], m["name"]) for m in inbox.read()]
    assert got.count(("s", got[0][1])) == 1 and got.count(("e", got[0][1])) == 1, got


FORK_WHILE_LOCKED = """
import os, sys, threading, time
from gputop_tracker.api import blocks
blocks.mark("opened")
sink = blocks._sink
sink.dropped = 1  # a drop: its count is told at exit (an atexit hook, inherited by a forked child)
blocks._tell_drops_at_exit()
held = threading.Event()
def hold():
    with sink.lock:
        held.set()
        time.sleep(3)
threading.Thread(target=hold, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: atexit runs in the child
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child exit", os.waitstatus_to_exitcode(status), flush=True)
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("child hung", flush=True)
"""


def test_a_forked_child_never_hangs_at_exit_on_a_lock_held_at_the_fork(inbox: BlockInbox) -> None:
    """The parent had dropped a message (its drops are told at exit) and a thread held the sink's lock when the
    program forked: the child's exit waited for that lock for ever (no thread of its own would release it)."""
    env = {**os.environ, blocks.ENV: inbox.path}
    proc = subprocess.run(
        [sys.executable, "-c", FORK_WHILE_LOCKED], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.stdout.strip().splitlines()[-1] == "child exit 0", proc.stdout + proc.stderr


def test_a_forked_child_keeps_no_fd_of_any_trackers_fifo(inbox: BlockInbox) -> None:
    """Nested Trackers (each its own sink) and then a fork: the outer sinks' fds stayed open in the child."""
    outer = blocks._push(inbox.path)
    blocks.mark("outer")
    inner = blocks._push(inbox.path)
    blocks.mark("inner")
    try:
        assert len(_fifo_fds(inbox)) == 2
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os._exit(len(_fifo_fds(inbox)))
        _pid, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        blocks._pop(inner)
        blocks._pop(outer)
    assert _fifo_fds(inbox) == []
