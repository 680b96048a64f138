"""The /proc reader on its own, against real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gputop_tracker.core.sampling.procfs import PAGE_SIZE, ProcessTree

PY = sys.executable


def _wait_children(pid: int, n: int) -> list[int]:
    deadline = time.time() + 10
    while time.time() < deadline:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        if len(kids) >= n:
            return [int(k) for k in kids]
        time.sleep(0.02)
    raise AssertionError("children did not start")


def test_tree_finds_descendants_and_reads_memory() -> None:
    code = "import os, time\nb = bytearray(50_000_000)\nb[::4096] = b'1' * len(b[::4096])\nif os.fork() == 0:\n    time.sleep(30)\ntime.sleep(30)"
    root = subprocess.Popen([PY, "-c", code])
    try:
        (child,) = _wait_children(root.pid, 1)
        time.sleep(0.3)
        tree = ProcessTree(root.pid, exclude={os.getpid()})
        new, gone = tree.discover()
        assert {h.pid for h in new} == {root.pid, child} and not gone
        readings = {r.handle.pid: r for r in tree.read(time.monotonic())}
        assert readings[root.pid].rss >= 50_000_000
        assert readings[root.pid].hwm >= readings[root.pid].rss
        assert readings[root.pid].threads == 1
        # after fork the 50 MB are shared copy-on-write: PSS splits them between the two
        assert readings[root.pid].pss < readings[root.pid].rss - 20_000_000
        assert readings[root.pid].rss % PAGE_SIZE == 0
        tree.close()
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(root.pid)])
        root.kill()
        root.wait()


def test_vanished_during_read_then_listing_does_not_crash() -> None:
    """A process reaped between discover() and read() is reported gone exactly once."""
    root = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    child = None
    try:
        tree = ProcessTree(root.pid, exclude={os.getpid()})
        tree.discover()
        # adopt a second process by hand (as if discovered), then make it vanish before the read
        child = subprocess.Popen(["sleep", "30"])
        tree.root = child.pid
        tree._last_pid = b""
        tree.handles.clear()
        tree.root_gone = False
        tree.discover()
        assert child.pid in tree.handles
        child.kill()
        child.wait()
        tree.read(time.monotonic())
        assert child.pid not in tree.handles
        subprocess.run(["true"])  # a new pid: the next discover lists /proc again
        _, gone = tree.discover()
        assert [h.pid for h in gone] == [child.pid]
        assert tree.discover() == ([], [])
        tree.close()
    finally:
        root.kill()
        root.wait()


ALLOCATOR = """
import sys
held = []
print("ready", flush=True)
for line in sys.stdin:
    b = bytearray(int(line))
    b[::4096] = b"1" * len(b[::4096])
    held.append(b)
    print("ok", flush=True)
"""


def test_private_is_a_marked_bound_until_smaps_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before a process's first smaps_rollup read, and after its memory moved since the last one, its private,
    shared and PSS figures are lower bounds, marked so (`bound`, a sample's `mem_bound`); a read makes them the
    kernel's figures again."""
    from gputop_tracker.core.sampling import procfs
    from gputop_tracker.core.summary.builder import SummaryBuilder
    from gputop_tracker.core.summary.events import FlightRecorder

    proc = subprocess.Popen([PY, "-c", ALLOCATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    tree = ProcessTree(proc.pid, exclude={os.getpid()})
    b = SummaryBuilder(
        main_pid=proc.pid, command=["x"], mode="attach", interval=1.0, start_time=0.0, recorder=FlightRecorder(10, 1.0)
    )

    def read(now: float) -> procfs.Reading:
        (r,) = tree.read(now)
        sample = b.add(now, [r], [], (1 << 30, 1 << 29, 0.0), want_sample=True)
        assert sample is not None and sample["processes"][0]["mem_bound"] is r.bound
        return r

    try:
        assert proc.stdout.readline().strip() == "ready"
        tree.discover()
        t0 = time.monotonic()  # the clock the sampler passes (its smaps budget refills with it)
        with monkeypatch.context() as m:
            m.setattr(procfs, "SMAPS_FIRST_CAP", -1.0)  # no first read allowed: out of budget
            r = read(t0)
        uss, _pss = procfs.read_smaps_rollup(proc.pid) or (0, 0)
        assert r.bound and r.private <= uss  # not read yet: only growth since first seen counts
        r = read(t0 + 1.0)  # the first read
        assert not r.bound and abs(r.private - procfs.read_smaps_rollup(proc.pid)[0]) < 1 << 20  # type: ignore[index]
        before = r.private
        proc.stdin.write(f"{30_000_000}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        r = read(t0 + 1.1)  # statm moved, the next read is not due yet: carried forward
        uss, _pss = procfs.read_smaps_rollup(proc.pid) or (0, 0)
        assert r.bound and before + 25_000_000 <= r.private <= uss
        r = read(t0 + 3.0)  # read again: the kernel's figure
        assert not r.bound and abs(r.private - procfs.read_smaps_rollup(proc.pid)[0]) < 1 << 20  # type: ignore[index]
    finally:
        tree.close()
        proc.kill()
        proc.wait()
