"""Real workloads with known memory and CPU, run as `python3 tests/workloads.py NAME ARGS...`.

Each writes the kernel's own figures for itself (getrusage) to the JSON file given as its first
argument, so a test can compare the tracker's report against them.
"""

from __future__ import annotations

import json
import mmap
import os
import resource
import sys
import time
from collections.abc import Callable

MB = 1000 * 1000


def touch(buf: bytearray | mmap.mmap, step: int = 4096) -> None:
    for i in range(0, len(buf), step):
        buf[i] = 1


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += 1


def vmhwm() -> int:
    """The kernel's exact peak RSS of this process image. (ru_maxrss of an exec'd process also holds the
    peak of the image exec replaced — the parent's, for a test runner that spawned us.)"""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def rusage() -> dict[str, float]:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "self_maxrss": vmhwm(),
        "children_maxrss": c.ru_maxrss * 1024,
        "cpu_self": s.ru_utime + s.ru_stime,
        "cpu_children": c.ru_utime + c.ru_stime,
    }


def write(path: str, data: dict[str, float]) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def hold(out: str, mb: str, seconds: str) -> None:
    """Hold MB for SECONDS."""
    buf = bytearray(int(mb) * MB)
    touch(buf)
    time.sleep(float(seconds))
    write(out, rusage())


def hold_until(out: str, mb: str, go: str) -> None:
    """Hold MB (OUT.ready once it is held) until the file GO exists; the figures also say when it exited."""
    buf = bytearray(int(mb) * MB)
    touch(buf)
    write(out + ".ready", {})
    while not os.path.exists(go):
        time.sleep(0.02)
    write(out, {**rusage(), "exit_time": time.time()})


def spike(out: str, mb: str, ms: str, after: str) -> None:
    """Allocate MB, hold it MS milliseconds, free it, then live on AFTER seconds."""
    time.sleep(0.3)
    buf = bytearray(int(mb) * MB)
    touch(buf)
    time.sleep(float(ms) / 1000)
    del buf
    time.sleep(float(after))
    write(out, rusage())


def spike_child(out: str, mb: str, ms: str) -> None:
    """A short-lived child holds MB for MS milliseconds; the parent lives on."""
    time.sleep(0.3)
    pid = os.fork()
    if pid == 0:
        buf = bytearray(int(mb) * MB)
        touch(buf)
        time.sleep(float(ms) / 1000)
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.5)
    write(out, rusage())


def children(out: str, n: str, mb: str, cpu_ms: str) -> None:
    """N sequential children, each touching MB and burning CPU_MS of CPU."""
    for _ in range(int(n)):
        pid = os.fork()
        if pid == 0:
            buf = bytearray(int(mb) * MB)
            touch(buf)
            burn(float(cpu_ms) / 1000)
            os._exit(0)
        os.waitpid(pid, 0)
    write(out, rusage())


def double_fork(out: str, mb: str, cpu_s: str) -> None:
    """A grandchild outlives its parent (double fork), holds MB and burns CPU_S; main waits it out."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os.close(r)
            buf = bytearray(int(mb) * MB)
            touch(buf)
            burn(float(cpu_s))
            s = resource.getrusage(resource.RUSAGE_SELF)
            os.write(w, json.dumps({"maxrss": s.ru_maxrss * 1024, "cpu": s.ru_utime + s.ru_stime}).encode())
            os._exit(0)
        os._exit(0)  # the grandchild is orphaned now
    os.close(w)
    os.waitpid(pid, 0)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    time.sleep(0.3)
    grand = json.loads(data)
    write(out, {**rusage(), "grandchild_maxrss": grand["maxrss"], "grandchild_cpu": grand["cpu"]})


def shared(out: str, mb: str, seconds: str) -> None:
    """Two processes share MB of MAP_SHARED anonymous memory, both touching every page."""
    region = mmap.mmap(-1, int(mb) * MB, flags=mmap.MAP_SHARED)
    touch(region)
    pid = os.fork()
    if pid == 0:
        x = 0
        for i in range(0, len(region), 4096):
            x += region[i]
        time.sleep(float(seconds))
        os._exit(0)
    time.sleep(float(seconds))
    os.waitpid(pid, 0)
    write(out, rusage())


def burner(out: str, cpu_s: str) -> None:
    burn(float(cpu_s))
    write(out, rusage())


def autoreap(out: str, n: str, cpu_ms: str, gap_ms: str) -> None:
    """SIGCHLD ignored: N children, each burning CPU_MS, are reaped by the kernel itself (no wait), so their
    time never reaches our cutime. Each child sends its own CPU time through a pipe."""
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    r, w = os.pipe()
    for _ in range(int(n)):
        if os.fork() == 0:
            os.close(r)
            burn(float(cpu_ms) / 1000)
            s = resource.getrusage(resource.RUSAGE_SELF)
            os.write(w, f"{s.ru_utime + s.ru_stime}\n".encode())
            os._exit(0)
        time.sleep(float(gap_ms) / 1000)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    time.sleep(0.3)
    write(out, {**rusage(), "autoreaped_cpu": sum(float(x) for x in data.split())})


def _worker_with_a_hidden_child(
    out: str, main_mb: str, in_child: Callable[[str], None], after_reap: Callable[[str], None]
) -> None:
    """Main holds MAIN_MB; a forked worker, alive past main's end, forks and reaps a child that runs
    `in_child(side)` between two samples, then runs `after_reap(side)`. Figures of the child go to the side file;
    main, once they are there (and a second more), writes its own rusage and them to `out`."""
    buf = bytearray(int(main_mb) * MB)
    touch(buf)
    side = out + ".child"
    if os.fork() == 0:
        time.sleep(1.2)
        pid = os.fork()
        if pid == 0:
            in_child(side)
            os._exit(0)
        os.waitpid(pid, 0)
        after_reap(side)
        time.sleep(2)
        os._exit(0)
    while not os.path.exists(side):
        time.sleep(0.05)
    time.sleep(1)
    with open(side) as f:
        child = json.load(f)
    write(out, {**rusage(), **child})


def hidden_grandchild(out: str, main_mb: str, child_mb: str) -> None:
    """Main holds MAIN_MB; a forked worker, alive past main's end, forks and reaps a child that holds CHILD_MB
    for a moment between samples. The worker writes the child's ru_maxrss; main writes its own figures."""

    def in_child(side: str) -> None:
        b2 = bytearray(int(child_mb) * MB)
        touch(b2)

    def after_reap(side: str) -> None:
        write(side, {"child_maxrss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024})

    _worker_with_a_hidden_child(out, main_mb, in_child, after_reap)


def hidden_file_child(out: str, main_mb: str, path: str) -> None:
    """Main holds MAIN_MB; a forked worker, alive past main's end, forks and reaps a child that maps PATH (a
    file already in the page cache, charged to another cgroup) and reads every page, between two samples.
    The child's VmHWM counts those pages; a memory cgroup made for the run does not."""

    def in_child(side: str) -> None:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            total = sum(m[i] for i in range(0, len(m), 4096))
            write(side, {"child_hwm": vmhwm(), "sum": total})

    _worker_with_a_hidden_child(out, main_mb, in_child, lambda side: None)


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
