"""The /proc reader on its own, against real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop_tracker.core.proc.procfs import PAGE_SIZE, ProcessTree

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
    from gputop_tracker.core.proc import procfs
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
        uss, _pss, _rss = procfs.read_smaps_rollup(proc.pid) or (0, 0, 0)
        assert r.bound and r.private <= uss  # not read yet: only growth since first seen counts
        r = read(t0 + 1.0)  # the first read
        assert not r.bound and abs(r.private - procfs.read_smaps_rollup(proc.pid)[0]) < 1 << 20  # type: ignore[index]
        before = r.private
        proc.stdin.write(f"{30_000_000}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        r = read(t0 + 1.1)  # statm moved, the next read is not due yet: carried forward
        uss, _pss, _rss = procfs.read_smaps_rollup(proc.pid) or (0, 0, 0)
        assert r.bound and before + 25_000_000 <= r.private <= uss
        r = read(t0 + 3.0)  # read again: the kernel's figure
        assert not r.bound and abs(r.private - procfs.read_smaps_rollup(proc.pid)[0]) < 1 << 20  # type: ignore[index]
    finally:
        tree.close()
        proc.kill()
        proc.wait()


def test_pages_mapped_while_smaps_is_walked_are_not_counted_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """statm is read before smaps_rollup is walked. Pages the process maps in between are in the walk's USS; were
    the statm before the walk the baseline, the growth after it would count them a second time and the carried
    forward USS would pass the kernel's (seen under load: a Python process's 8 KiB stdin buffer)."""
    from gputop_tracker.core.proc import procfs

    proc = subprocess.Popen([PY, "-c", ALLOCATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    tree = ProcessTree(proc.pid, exclude={os.getpid()})
    walk = procfs.read_smaps_rollup

    def allocate(n: int) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"{n}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"

    def allocate_then_walk(pid: int) -> tuple[int, int, int] | None:
        allocate(20_000_000)  # after the statm read of this sample, before the walk
        return walk(pid)

    try:
        assert proc.stdout.readline().strip() == "ready"
        tree.discover()
        t0 = time.monotonic()
        (r,) = tree.read(t0)  # first read: statm, then the walk
        allocate(1_000_000)  # statm moves, so the next sample reads statm and walks again
        with monkeypatch.context() as m:
            m.setattr(procfs, "read_smaps_rollup", allocate_then_walk)
            (r,) = tree.read(t0 + 2.0)
        uss = walk(proc.pid)[0]  # type: ignore[index]
        (r,) = tree.read(t0 + 2.1)  # nothing moved since the walk's end, but the walk was not settled
        assert r.bound and uss - (1 << 20) <= r.private <= uss
        allocate(10_000_000)
        (r,) = tree.read(t0 + 2.2)  # grown since the walk, a re-read not due: carried forward
        uss = walk(proc.pid)[0]  # type: ignore[index]
        assert r.bound and uss - (1 << 20) <= r.private <= uss, (r.private, uss)
    finally:
        tree.close()
        proc.kill()
        proc.wait()


def test_a_torn_smaps_walk_is_never_published(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under load a slow walk can miss pages a process freed and faulted again while statm, read on both sides,
    shows the same RSS: the walk's USS against statm's RSS would call those pages shared. Such a walk (its own RSS
    far from statm's) is set aside and walked again: private + shared never exceed RSS, shared stays small."""
    from gputop_tracker.core.proc import procfs

    proc = subprocess.Popen([PY, "-c", ALLOCATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    tree = ProcessTree(proc.pid, exclude={os.getpid()})
    walk = procfs.read_smaps_rollup

    def torn(pid: int) -> tuple[int, int, int] | None:
        got = walk(pid)
        assert got is not None
        missed = 150 << 20  # the walk missed 150 MiB of private pages: they were freed and faulted elsewhere
        return max(0, got[0] - missed), max(0, got[1] - missed), max(0, got[2] - missed)

    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write(f"{200_000_000}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        tree.discover()
        with monkeypatch.context() as m:
            m.setattr(procfs, "read_smaps_rollup", torn)
            (r,) = tree.read(time.monotonic())
        assert tree.torn == 1
        assert r.private + r.shared <= r.rss and r.shared < 20 << 20, (r.private, r.shared, r.rss)
        (r,) = tree.read(time.monotonic() + 1.0)  # walked again, whole this time
        uss = walk(proc.pid)[0]  # type: ignore[index]
        assert not r.bound and abs(r.private - uss) < 1 << 20 and r.shared < 20 << 20
    finally:
        tree.close()
        proc.kill()
        proc.wait()


# A subreaper (as the sampler is) starts a root that forks from a second thread, and a child of it that
# double-forks (its grandchild, orphaned, comes to us); then it looks for the tree both ways — the threads'
# `children` files and the /proc listing — and tells what each found, and which one listed /proc.
FIND_BOTH_WAYS = r"""
import ctypes, json, os, subprocess, sys, threading, time
from gputop_tracker.core.proc import procfs
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
ROOT = '''
import os, threading, time
def spawn():
    if os.fork() == 0:  # a child of a second thread: in that thread's `children` file
        if os.fork() == 0:
            if os.fork() == 0:
                time.sleep(60)
            os._exit(0)  # its child, orphaned, goes to the subreaper
        time.sleep(60)
        os._exit(0)
    time.sleep(60)  # while this thread lives, its child is listed under it, not under the main thread
threading.Thread(target=spawn, daemon=True).start()
time.sleep(60)
'''
root = subprocess.Popen([sys.executable, "-c", ROOT])
time.sleep(1.0)
listed = []
real_listdir = os.listdir
def listdir(path):
    listed.append(path)
    return real_listdir(path)
procfs.os.listdir = listdir
found = {}
for way, limit in (("children", 32), ("listing", 0)):
    procfs.CHILDREN_MAX_THREADS = limit
    listed.clear()
    tree = procfs.ProcessTree(root.pid, exclude={os.getpid()})
    new, gone = tree.discover()
    found[way] = {"pids": sorted(h.pid for h in new), "listed_proc": "/proc" in listed, "reaper": tree.reaper}
    tree.close()
ppid = {}
for name in real_listdir("/proc"):
    try:
        with open(f"/proc/{name}/stat", "rb") as f:
            ppid[int(name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError):
        pass
truth, grew = {root.pid}, True
while grew:
    more = {p for p, pp in ppid.items() if pp in truth or (pp == os.getpid() and p != root.pid)}
    grew = not more <= truth
    truth |= more
found["truth"] = sorted(truth)
for p in truth:
    try:
        os.kill(p, 9)
    except OSError:
        pass
print(json.dumps(found))
"""


def test_new_processes_found_alike_in_children_files_and_the_proc_listing() -> None:
    """A small tree is found through its threads' `children` files without listing /proc (whose cost grows with
    every process of the machine), and finds what the listing finds: a child of a second thread, and an orphan
    that came to us as subreaper."""
    proc = subprocess.run([PY, "-c", FIND_BOTH_WAYS], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["children"]["reaper"] is not None  # the orphan rule was in play
    assert len(found["truth"]) == 4  # root, the thread's child, its orphaned grandchild, and that one's child
    assert found["children"]["pids"] == found["truth"]
    assert found["listing"]["pids"] == found["truth"]
    assert not found["children"]["listed_proc"] and found["listing"]["listed_proc"]


FORKS_ON_DEMAND = """
import os, sys, time
b = bytearray(int(sys.argv[1]))
b[::4096] = b"1" * len(b[::4096])
for n in range(2):
    while not os.path.exists(f"{sys.argv[2]}.go{n}"):
        time.sleep(0.01)
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    open(f"{sys.argv[2]}.forked{n}", "w").close()
time.sleep(60)
"""


def _true_pss(pids: list[int]) -> int:
    from gputop_tracker.core.proc.procfs import read_smaps_rollup

    return sum((read_smaps_rollup(pid) or (0, 0, 0))[1] for pid in pids)


@pytest.mark.parametrize("out_of_budget", [False, True])
def test_a_fork_lowers_every_sharers_pss_not_only_the_parents(
    out_of_budget: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The parent holds 150 MB and forks a first child, both read (75 MB each); then a second child: each now
    holds a third. The first child's PSS fell though its statm did not move: re-read with the parent (or, out of
    budget, counted as a lower bound), else Σ PSS exceeds what the tree holds (Pool(4) in the adversarial suite:
    a lower bound 15 MB above the truth)."""
    from gputop_tracker.core.proc import procfs

    flag = str(tmp_path / "f")
    proc = subprocess.Popen([PY, "-c", FORKS_ON_DEMAND, "150000000", flag])
    try:
        tree = ProcessTree(proc.pid, exclude={os.getpid()})
        now = time.monotonic()
        for step in range(2):
            open(f"{flag}.go{step}", "w").close()
            deadline = time.monotonic() + 30
            while not os.path.exists(f"{flag}.forked{step}"):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            kids = _wait_children(proc.pid, step + 1)
            tree._last_pid = b""  # list /proc now, whatever loadavg says
            tree.discover()
            now += 1.0
            with monkeypatch.context() as m:
                if out_of_budget and step == 1:
                    m.setattr(procfs, "SMAPS_FIRST_CAP", -1.0)  # no re-read allowed this time
                readings = tree.read(now)
            total = sum(r.pss for r in readings)
            truth = _true_pss([proc.pid, *kids])
            assert len(readings) == step + 2
            assert total <= truth + 2_000_000, (step, total, truth)  # a lower bound never above the kernel's Σ
        if not out_of_budget:
            assert total >= truth - 5_000_000  # re-read: the kernel's figure, not a loose bound
        tree.close()
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)])
        proc.kill()
        proc.wait()
