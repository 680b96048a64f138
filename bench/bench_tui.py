"""Cost of the live view: run the real TUI in a pseudo-terminal and measure the TUI process itself.

Tracks a tree of 40 processes (a shell, 10 light Python CPU loops, 29 sleepers) with 2 simulated GPUs at the
default interval (0.5 s; `--interval` to change it), and reports the TUI process's CPU (utime+stime over the
window, % of one core; the sampler is a separate process, reported apart) and RSS. Target: <= 1% of a core (nvitop: 1.0% on
the same load) and <= 60 MB. A loaded machine raises the figure: compare with main run just before.

    python bench/bench_tui.py [--seconds 30] [--warmup 5] [--size 160x50] [--interval 0.5] [--profile FILE]
                              [--print-lines 4x5 | --print-bytes 4x300]

Printing workers (a training job prints all the time) in place of the 40-process tree: `--print-lines NxR`, N
workers each printing R log lines a second (about 90 bytes each); `--print-bytes NxB`, N workers each drawing a
progress bar (tqdm's way: a carriage return and the bar again, 10 times a second, a newline every 10 s) at B bytes
a second. The tree is then a shell and the N workers. Targets: <= 1% of a core at 4x300 B/s, <= 2% at 4x5 lines/s.

`--warmup 25` measures after the simulated GPUs' memory has levelled off (the first 20 s it rises, and the
GPU memory chart redraws at each new peak); `--warmup 540` after the charts' ring is full (512 points).
`--profile FILE` also records where the TUI spends its CPU with py-spy (speedscope format; `pip install
py-spy`, needs ptrace rights; BENCH_SPY_FORMAT=raw for collapsed stacks, BENCH_SPY_RATE=1000 for more samples:
the view uses ~10 ms of CPU a second, 200 Hz catches few). To compare two checkouts, run each in turn with
`PYTHONPATH=<checkout>` from a directory outside both (`python -m` puts the current directory first), the
two alternated: the figure moves by 0.1-0.2 points with the machine's load.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import signal
import struct
import sys
import tempfile
import termios
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
BUSY = "import time\nwhile True:\n    sum(range(20000))\n    time.sleep(0.5)"
# a shell, 10 light CPU loops (values change every sample), 29 sleepers: 40 long-lived processes
TREE = f"for i in $(seq 10); do {sys.executable} -c '{BUSY}' & done; for i in $(seq 29); do sleep 600 & done; wait"
# a worker printing log lines: `rate` lines a second, each about 90 bytes (a training loop's log)
LINES = (
    "import sys, time\n"
    "rank, rate = int(sys.argv[1]), float(sys.argv[2])\n"
    "n, t = 0, time.monotonic()\n"
    "while True:\n"
    "    n += 1\n"
    "    print(f'[rank {rank}] step {n:6d} loss {1 / n:.5f} lr 3.0e-04 grad-norm {n % 7 + 0.25:.3f} 1234.5 samples/s',"
    " flush=True)\n"
    "    t += 1 / rate\n"
    "    time.sleep(max(0.0, t - time.monotonic()))\n"
)
# a worker drawing a progress bar at `rate` bytes a second: 10 redraws a second (a carriage return, the bar padded
# to rate/10 bytes), a newline every 100 redraws (an epoch)
BAR = (
    "import sys, time\n"
    "rank, rate = int(sys.argv[1]), float(sys.argv[2])\n"
    "size = max(8, int(rate / 10))\n"
    "n, t = 0, time.monotonic()\n"
    "while True:\n"
    "    n += 1\n"
    "    done = n % 100\n"
    "    bar = f'\\r{rank}:{done:3d}%|' + '#' * (done // 10) + ' ' * (10 - done // 10) + '|'\n"
    "    bar = (bar + f' {n}it' + ' ' * size)[:size - 1]\n"
    "    sys.stdout.write(bar + ('\\n' if done == 0 else ' '))\n"
    "    sys.stdout.flush()\n"
    "    t += 0.1\n"
    "    time.sleep(max(0.0, t - time.monotonic()))\n"
)


def printers(script: str, spec: str) -> str:
    """A shell command starting N workers of `script` at rate R (spec "NxR"), then waiting."""
    n, rate = spec.lower().split("x")
    code = script.replace("'", "'\\''")
    return f"for i in $(seq {int(n)}); do {sys.executable} -c '{code}' $i {float(rate)} & done; wait"


def cpu_seconds(pid: int) -> float:
    return sum(user_system(pid))  # utime + stime of this process only


def user_system(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def thread_seconds(pid: int) -> dict[int, float]:
    """utime + stime of each thread of the process."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def descendants(pid: int) -> list[int]:
    out = children(pid)
    for c in list(out):
        out += descendants(c)
    return out


def children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return out


LAST = bytearray()


def drain(fd: int, until: float) -> int:
    """Read the screen output (a terminal must be read, or the app blocks) until the deadline."""
    n = 0
    while (left := until - time.monotonic()) > 0:
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                break
            if not data:
                break
            n += len(data)
            LAST[:] = (LAST + data)[-4000:]
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--size", default="160x50")
    ap.add_argument("--interval", default="0.5", help="seconds between samples (default: the CLI's default, 0.5)")
    ap.add_argument("--print-lines", metavar="NxR", help="N workers each printing R lines a second, no other tree")
    ap.add_argument("--print-bytes", metavar="NxB", help="N workers each drawing a progress bar at B bytes a second")
    ap.add_argument(
        "--profile", metavar="FILE", help="also record where the TUI spends its CPU with py-spy (speedscope)"
    )
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))
    store = tempfile.mkdtemp(prefix="bench-tui-")
    tree = TREE
    if args.print_lines:
        tree = printers(LINES, args.print_lines)
    elif args.print_bytes:
        tree = printers(BAR, args.print_bytes)
    argv = [
        sys.executable,
        "-m",
        "gputop_tracker",
        "--interval",
        args.interval,
        "--simulate-gpus",
        "2",
        "--",
        "sh",
        "-c",
        tree,
    ]
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(TERM="xterm-256color", GPUTOP_TRACKER_STORE=store)
        os.execv(argv[0], argv)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    drain(fd, time.monotonic() + args.warmup)
    samplers = children(pid)
    tree = [d for c in samplers for d in descendants(c)]
    threads0 = thread_seconds(pid)
    spy = None
    if args.profile:
        import subprocess

        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--nonblocking",
                "-r",
                os.environ.get("BENCH_SPY_RATE", "200"),
                "-f",
                os.environ.get("BENCH_SPY_FORMAT", "speedscope"),
                "-o",
                args.profile,
                "-d",
                str(int(args.seconds)),
                "-p",
                str(pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    us0 = user_system(pid)
    c0, s0, t0 = cpu_seconds(pid), sum(cpu_seconds(c) for c in samplers), time.monotonic()
    written = drain(fd, t0 + args.seconds)
    c1, s1, t1 = cpu_seconds(pid), sum(cpu_seconds(c) for c in samplers), time.monotonic()
    us1 = user_system(pid)
    threads1 = thread_seconds(pid)
    rss, hwm = status_kb(pid, "VmRSS"), status_kb(pid, "VmHWM")
    wall = t1 - t0
    if spy is not None:
        spy.wait()
    os.write(fd, b"q")
    drain(fd, time.monotonic() + 1.0)
    os.write(fd, b"s")  # stop it: SIGTERM to the tree
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        drain(fd, time.monotonic() + 0.2)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = -1
    for p in tree:  # "stop it" signals the command; its background children are ours to clean up
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    load = f", printing {args.print_lines} lines/s" if args.print_lines else ""
    load += f", printing {args.print_bytes} B/s" if args.print_bytes else ""
    print(f"terminal {cols}x{rows}, interval {args.interval} s, 2 simulated GPUs{load}, window {wall:.1f} s")
    print(f"tracked tree: {len(tree)} processes")
    print(
        f"TUI process  CPU {100 * (c1 - c0) / wall:.2f}% of one core   RSS {rss / 1024:.1f} MB (peak {hwm / 1024:.1f} MB)"
    )
    user, system = (100 * (b - a) / wall for a, b in zip(us0, us1, strict=True))
    print(f"  user {user:.2f}%  system {system:.2f}% (the kernel's share: wake-ups, pipe and terminal I/O)")
    per_thread = "  ".join(
        f"{'main' if tid == pid else tid} {100 * (t - threads0.get(tid, 0.0)) / wall:.2f}%"
        for tid, t in sorted(threads1.items())
    )
    print(f"  by thread  {per_thread}  (main: the UI; the others: terminal input/output, the two readers)")
    print(f"sampler      CPU {100 * (s1 - s0) / wall:.2f}% of one core (separate process)")
    if os.environ.get("BENCH_DEBUG"):
        print(repr(bytes(LAST)))
    print(
        f"screen output {written / wall / 1024:.1f} KiB/s; exit status {os.waitstatus_to_exitcode(status) if status >= 0 else 'killed'}"
    )


if __name__ == "__main__":
    main()
