"""The /proc reader on its own, against real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gputop_tracker.core.procfs import PAGE_SIZE, ProcessTree

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
