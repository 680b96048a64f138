"""Jobs whose processes each record the kernel's truth about themselves, run as
`python3 tests/evidence_jobs.py NAME DIR`: every process that holds memory writes DIR/PID.json with its own peak
(the largest of VmHWM read just before it lets go of its memory and ru_maxrss of its images since its own start),
so a test can hold each row of the report against it. Each class is one the probe's paths once got wrong."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

MB = 1 << 20


def touch(n: int) -> bytearray:
    b = bytearray(n)
    b[::4096] = b"1" * len(b[::4096])
    return b


def status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def record(out: str, peak: int | None = None, **extra: object) -> None:
    """This process's own truth: its peak RSS (given, or VmHWM now)."""
    truth = peak if peak is not None else status_kb("VmHWM")
    with open(os.path.join(out, f"{os.getpid()}.json"), "w") as f:
        json.dump({"pid": os.getpid(), "peak": truth, **extra}, f)


# ---------------------------------------------------------------------------------------------- the classes


def exec_after_larger(out: str) -> None:
    """A child holds 300 MiB for 20 ms, then execs into a 60 MiB Python program; the parent holds 100 MiB."""
    held = touch(100 * MB)
    pid = os.fork()
    if pid == 0:
        big = touch(300 * MB)
        first = status_kb("VmHWM")
        time.sleep(0.02)
        del big
        code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import evidence_jobs as j; " + (
            f"x = j.touch(60 * j.MB); j.record({out!r}, max({first}, j.status_kb('VmHWM')))"
        )
        os.execv(sys.executable, [sys.executable, "-c", code])
    os.waitpid(pid, 0)
    record(out)
    del held


def reset_vmhwm(out: str) -> None:
    """Holds 300 MiB for 0.6 s, frees it, resets its own VmHWM (as profilers do), then holds 30 MiB."""
    big = touch(300 * MB)
    time.sleep(0.6)
    peak = status_kb("VmHWM")
    del big
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    small = touch(30 * MB)
    time.sleep(0.3)
    record(out, peak)
    del small


def killed_child(out: str) -> None:
    """A child holds 200 MiB and is killed by SIGKILL: it sends nothing."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        b = touch(200 * MB)
        record(out)
        os.write(w, b"x")
        time.sleep(60)
        del b
    os.close(w)
    os.read(r, 1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    record(out)


C_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
int main(int argc, char **argv) {
    size_t n = 150u << 20; char *p = malloc(n); memset(p, 1, n);
    struct rusage ru; getrusage(RUSAGE_SELF, &ru);
    FILE *f = fopen(argv[1], "w"); fprintf(f, "{\"pid\": %d, \"peak\": %ld}", getpid(), ru.ru_maxrss * 1024L);
    fclose(f); free(p); return 0;
}
"""


def c_child(out: str) -> None:
    """A C program (no probe) holds 150 MiB: only its parent's reap record tells of it."""
    exe = os.path.join(out, "cchild")
    src = exe + ".c"
    with open(src, "w") as f:
        f.write(C_SOURCE)
    subprocess.run(["gcc", "-O1", "-o", exe, src], check=True)
    pid = os.fork()
    if pid == 0:
        os.execv(exe, [exe, os.path.join(out, "c.json")])
    os.waitpid(pid, 0)
    record(out)


def _work(i: int) -> int:
    out = os.environ["EVIDENCE_OUT"]
    b = touch((60 + 20 * i) * MB)
    record(out)
    time.sleep(0.05)
    return len(b)


def with_pool(out: str) -> None:
    """`with Pool() as p:` — __exit__ terminates the workers (SIGTERM): they send no exit report."""
    os.environ["EVIDENCE_OUT"] = out
    with mp.get_context("fork").Pool(2) as p:
        p.map(_work, range(4), chunksize=1)
    record(out)


def forkserver(out: str) -> None:
    """multiprocessing's forkserver: the server and the resource tracker outlive the main."""
    os.environ["EVIDENCE_OUT"] = out
    ctx = mp.get_context("forkserver")
    procs = [ctx.Process(target=_work, args=(i,)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    record(out)


def isolated(out: str) -> None:
    """Python children the probe cannot enter: -I, -S, and one whose parent replaced PYTHONPATH."""
    code = (
        f"import sys, os; sys.path.insert(0, {os.path.dirname(__file__)!r}); import evidence_jobs as j; "
        f"b = j.touch(80 * j.MB); j.record({out!r})"
    )
    for flags in (["-I"], ["-S"]):
        subprocess.run([sys.executable, *flags, "-c", code], check=True)
    env = {**os.environ, "PYTHONPATH": "/nonexistent"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    record(out)


JOBS = {f.__name__: f for f in (exec_after_larger, reset_vmhwm, killed_child, c_child, with_pool, forkserver, isolated)}

if __name__ == "__main__":
    JOBS[sys.argv[1]](sys.argv[2])
