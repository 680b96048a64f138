"""What the Prometheus export costs the front end and the sampler, with a scrape every second.

    python bench/bench_prometheus.py [SECONDS]     # ~4 min on 2 cores (default 20 s per run)

The real CLI (`--headless --interval 0.1`) tracks a tree of N sleeping processes (1, 20, 100) in four ways:
no export; `--prometheus` never scraped; `--prometheus` scraped once a second; `--prometheus-textfile`.
CPU time of the front end (our child) and the sampler (its child) is read from /proc/PID/stat between
t = 2 s and the end (so start-up is left out), as % of one core; the scrape latency (median, max) and the
size of one exposition; and the samples the sampler took (JSON report), against the interval's count —
a slowed sampler would show there.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
INTERVAL = 0.1  # fast sampling, so a cost per sample shows above the clock tick

TREE = r"""
import subprocess, sys, time
n, seconds = int(sys.argv[1]), float(sys.argv[2])
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(%f)" % seconds]) for _ in range(n - 1)]
time.sleep(seconds)
for k in kids:
    k.wait()
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Scraper(threading.Thread):
    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.latencies: list[float] = []
        self.size = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                    body = r.read()
            except OSError:
                continue
            self.latencies.append(time.perf_counter() - t0)
            self.size = len(body)


def run(n: int, mode: str, seconds: float, tmp: Path) -> dict[str, float]:
    port = free_port()
    out = tmp / f"report-{n}-{mode}.json"
    flags: list[str] = []
    if mode in ("endpoint", "scraped"):
        flags = ["--prometheus", f"127.0.0.1:{port}"]
    elif mode == "textfile":
        flags = ["--prometheus-textfile", str(tmp / "bench.prom")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop_tracker", "--headless", "--no-save", "-f", "json", "-o", str(out), "--tu", "seconds",
         "--interval", str(INTERVAL), *flags, "--", sys.executable, "-c", TREE, str(n), str(seconds)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    scraper = Scraper(port)
    if mode == "scraped":
        scraper.start()
    time.sleep(2.0)
    sampler = children(proc.pid)[0]
    front0, sampler0, t0 = cpu_seconds(proc.pid), cpu_seconds(sampler), time.monotonic()
    time.sleep(seconds - 3.0)
    front1, sampler1, t1 = cpu_seconds(proc.pid), cpu_seconds(sampler), time.monotonic()
    scraper.stop.set()
    proc.wait(60)
    report = json.loads(out.read_text())
    lat = scraper.latencies
    return {
        "front": 100 * (front1 - front0) / (t1 - t0),
        "sampler": 100 * (sampler1 - sampler0) / (t1 - t0),
        "samples": report["n_samples"],
        "expected": report["compute_time"]["time"] / INTERVAL,
        "scrape_ms_median": 1000 * statistics.median(lat) if lat else float("nan"),
        "scrape_ms_max": 1000 * max(lat) if lat else float("nan"),
        "scrapes": len(lat),
        "bytes": scraper.size,
    }


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    modes = ("off", "endpoint", "scraped", "textfile")
    print(f"{seconds:.0f} s per run, interval {INTERVAL} s; CPU as % of one core from t=2 s to t={seconds - 1:.0f} s")
    print(
        f"{'N':>4} {'export':<10} {'front end %':>11} {'sampler %':>9} {'samples':>12} {'scrape ms (median/max)':>23} {'bytes':>7}"
    )
    with tempfile.TemporaryDirectory() as d:
        for n in (1, 20, 100):
            for mode in modes:
                r = run(n, mode, seconds, Path(d))
                scrape = (
                    f"{r['scrape_ms_median']:.1f} / {r['scrape_ms_max']:.1f} ({r['scrapes']:.0f})"
                    if r["scrapes"]
                    else "-"
                )
                print(
                    f"{n:>4} {mode:<10} {r['front']:>11.2f} {r['sampler']:>9.2f} "
                    f"{r['samples']:>5.0f} of {r['expected']:>4.0f} {scrape:>23} {r['bytes'] or '-':>7}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
