"""Core tracker benchmark: what tracking costs, printed beside the targets and the naive psutil way.

    python bench/bench_core.py            # ~1 minute on 2 cores

1. Sampler CPU time per sample for trees of 1, 10 and 100 processes at 10 Hz: the real sampler code
   (ProcessTree + HostReader + GPU backend + SummaryBuilder), timed with process_time, against psutil's
   naive per-process reads of the same tree.
2. Wall time of `gputop-track --headless -- true` (median of 10).
3. PSS of all of gputop-track's own processes (front end + sampler) while tracking a sleeping command.
4. Exact figures, each beside the kernel's own number: a 1 GiB / 50 ms spike at a 1 s
   interval (10 runs), 30 short children, a double-forked grandchild, 400 MB shared by two processes.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gputop_tracker.core.gpu.backend import open_backend
from gputop_tracker.core.sampling.procfs import HostReader, ProcessTree
from gputop_tracker.core.summary.builder import SummaryBuilder

PY = sys.executable
WORKLOADS = str(Path(__file__).resolve().parents[1] / "tests" / "workloads.py")
CLI = [PY, "-m", "gputop_tracker"]
# what a user runs: the installed console script (falls back to -m from a bare checkout)
_SCRIPT = Path(PY).parent / "gputop-track"
ENTRY = [str(_SCRIPT)] if _SCRIPT.exists() else CLI


def spawn_tree(n: int) -> subprocess.Popen[bytes]:
    """A root with n-1 sleeping descendants (a chain of shells would be slower to start: use fork)."""
    code = (
        "import os, sys, time\n"
        f"for _ in range({n - 1}):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(120); os._exit(0)\n"
        "time.sleep(120)\n"
    )
    p = subprocess.Popen([PY, "-c", code])
    deadline = time.time() + 10
    while time.time() < deadline:
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        if len(kids) >= n - 1:
            break
        time.sleep(0.05)
    return p


def sampler_cost(n: int, samples: int = 100) -> float:
    root = spawn_tree(n)
    try:
        tree = ProcessTree(root.pid, exclude={os.getpid()})
        host = HostReader()
        gpu = open_backend()
        b = SummaryBuilder(main_pid=root.pid, command=["bench"], mode="attach", interval=0.1, start_time=time.time())
        costs = []
        for _ in range(samples):
            t0 = time.process_time()
            tree.discover()
            readings = tree.read(time.monotonic())
            gpus = gpu.read([r.handle.pid for r in readings])
            b.add(time.time(), readings, gpus, host.read())
            costs.append(time.process_time() - t0)
            time.sleep(0.1)
        assert len(readings) == n, (len(readings), n)
        tree.close()
        return statistics.mean(costs[1:]) * 1000
    finally:
        os.killpg(os.getpgid(root.pid), signal.SIGKILL) if False else None
        subprocess.run(["pkill", "-KILL", "-P", str(root.pid)])
        root.kill()
        root.wait()


def psutil_cost(n: int, samples: int = 30) -> float:
    import psutil

    root = spawn_tree(n)
    try:
        p = psutil.Process(root.pid)
        costs = []
        for _ in range(samples):
            t0 = time.process_time()
            procs = [p, *p.children(recursive=True)]
            for q in procs:
                try:
                    q.memory_full_info()
                    q.cpu_percent()
                    q.num_threads()
                except psutil.Error:
                    pass
            psutil.virtual_memory()
            costs.append(time.process_time() - t0)
            time.sleep(0.05)
        return statistics.mean(costs[1:]) * 1000
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(root.pid)])
        root.kill()
        root.wait()


def true_wall(runs: int = 10) -> float:
    # an installed package has its bytecode compiled; a checkout run with PYTHONDONTWRITEBYTECODE would
    # compile every module on every start and measure the compiler, not the tool
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([PY, "-m", "compileall", "-q", str(root / "gputop_tracker")], env=env, stdout=subprocess.DEVNULL)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([*ENTRY, "--headless", "--no-save", "--", "true"], stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def pss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def own_pss() -> tuple[int, int]:
    fe = subprocess.Popen([*CLI, "--headless", "--no-save", "--", "sleep", "4"], stderr=subprocess.DEVNULL)
    time.sleep(2.0)
    kids = subprocess.run(["pgrep", "-P", str(fe.pid)], capture_output=True, text=True).stdout.split()
    sampler = int(kids[0])
    fe_pss, s_pss = pss_of(fe.pid), pss_of(sampler)
    fe.wait()
    return fe_pss, s_pss


def run_json(args: list[str], env: dict[str, str] | None = None) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        subprocess.run(
            [*CLI, "--headless", "--no-save", "-f", "json", "-o", str(out), "--ru", "bytes", "--tu", "seconds", *args],
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        return json.loads(out.read_text())


def workload(name: str, *args: str, interval: str = "1", env: dict[str, str] | None = None) -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory() as d:
        k = Path(d) / "k.json"
        r = run_json(["--interval", interval, "--", PY, WORKLOADS, name, str(k), *args], env)
        return r, json.loads(k.read_text())


def main() -> None:
    print("== sampler CPU per sample at 10 Hz (ms) ==")
    print(f"{'N':>5} {'gputop':>9} {'psutil naive+USS':>17} {'ratio':>7}  target")
    for n, target in ((1, None), (10, 0.5), (100, 2.5)):
        ours = sampler_cost(n)
        naive = psutil_cost(n)
        t = f"<= {target} ms" if target else ""
        print(f"{n:>5} {ours:>9.3f} {naive:>17.3f} {naive / ours:>6.1f}x  {t}")
    print()
    wall = true_wall()
    print(f"`gputop-track --headless -- true`: {wall:.3f} s median of 10 (target <= 0.25 s)")
    fe, s = own_pss()
    print(
        f"own memory (PSS): front end {fe / 1e6:.1f} MB + sampler {s / 1e6:.1f} MB = {(fe + s) / 1e6:.1f} MB (target <= 40 MB)"
    )
    print()
    print("== exact figures, beside the kernel's own numbers ==")
    caught = 0
    for _ in range(10):
        r, k = workload("spike", "1000", "50", "0.2")
        if abs(r["max_ram"]["main"]["total_rss"] - k["self_maxrss"]) <= 0.02 * k["self_maxrss"]:
            caught += 1
    print(
        f"1 GB held 50 ms, interval 1 s: peak within 2% of VmHWM/ru_maxrss in {caught}/10 runs "
        f"(last: reported {r['max_ram']['main']['total_rss'] / 1e6:.1f} MB, kernel {k['self_maxrss'] / 1e6:.1f} MB)"
    )
    r, k = workload("children", "30", "200", "80")
    kcpu = k["cpu_self"] + k["cpu_children"]
    print(
        f"30 children x (200 MB, 80 ms CPU): CPU {r['cpu_time']['total']:.3f} s vs rusage {kcpu:.3f} s "
        f"({100 * (r['cpu_time']['total'] / kcpu - 1):+.1f}%); peak {r['max_ram']['combined']['total_rss'] / 1e6:.1f} MB "
        f"vs children ru_maxrss {k['children_maxrss'] / 1e6:.1f} MB ({r['max_ram']['peak_source']})"
    )
    r, k = workload("double_fork", "200", "0.5", env={"GPUTOP_TRACKER_NO_CGROUP": "1"})
    print(
        f"double-forked grandchild (200 MB, 0.5 s CPU): CPU {r['cpu_time']['total']:.3f} s "
        f"(grandchild rusage {k['grandchild_cpu']:.3f} s + main {k['cpu_self']:.3f} s); "
        f"peak {r['max_ram']['combined']['total_rss'] / 1e6:.1f} MB vs grandchild ru_maxrss {k['grandchild_maxrss'] / 1e6:.1f} MB"
    )
    r, k = workload("shared", "400", "3", interval="0.5")
    m = r["max_ram"]
    print(
        f"two processes sharing 400 MB: combined {m['combined']['total_rss'] / 1e6:.1f} MB "
        f"(Σ PSS {m['combined_sampled'] / 1e6:.1f} MB; summing RSS would say {sum(p['peak_rss'] for p in r['processes']) / 1e6:.1f} MB)"
    )


if __name__ == "__main__":
    main()
