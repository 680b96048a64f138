"""Core tracker benchmark: what tracking costs, printed beside the targets and the naive psutil way.

    python bench/bench_core.py            # ~2 minutes on 2 cores
    python bench/bench_core.py --tool-cpu --baseline DIR   # only section 0, this checkout beside another

0. The tool's own CPU, as a user pays it: `gputop-track --headless --interval 0.1 --gpu-backend none -- sleep S`
   (the session saved, start-up and exit included), rusage of the whole run minus `sleep S` alone, as % of a
   core over the run's wall time; split into the front end (its own rusage) and the sampler. With
   `--baseline DIR` (a copy of another version's source tree, e.g. `git archive main gputop_tracker | tar -x -C
   DIR`) both run alternately under the same load and print side by side. CPU seconds, not wall: other load on
   the machine changes them less, but print the load average beside them (on a shared VM they still spread by
   ±10 %: run it twice). `--json`: the run writes `-f json -o FILE` instead of the text report. Measured on the
   2-core VM (20 s, 5 runs each, medians): 2.06 % of a core before the front end ended without the interpreter's
   teardown, 1.78 % after (range 1.78-2.34 % and 1.53-1.89 %).

1. Sampler CPU time per sample for trees of 1, 10 and 100 processes at 10 Hz: the real sampler code
   (ProcessTree + HostReader + GPU backend + SummaryBuilder), timed with process_time, against psutil's
   naive per-process reads of the same tree.
2. Wall time of `gputop-track --headless -- true` (median of 10).
3. PSS of all of gputop-track's own processes (front end + sampler) while tracking a sleeping command.
4. Exact figures, each beside the kernel's own number: a 1 GiB / 50 ms spike at a 1 s
   interval (10 runs), 30 short children, a double-forked grandchild, 400 MB shared by two processes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gputop_tracker.core.gpu import open_backend
from gputop_tracker.core.proc.host import HostReader
from gputop_tracker.core.proc.procfs import ProcessTree
from gputop_tracker.core.summary.builder import SummaryBuilder

PY = sys.executable
WORKLOADS = str(Path(__file__).resolve().parents[1] / "tests" / "workloads.py")
CLI = [PY, "-m", "gputop_tracker"]
# what a user runs: the installed console script (falls back to -m from a bare checkout)
_SCRIPT = Path(PY).parent / "gputop-track"
ENTRY = [str(_SCRIPT)] if _SCRIPT.exists() else CLI


# runs the CLI in-process as the console script does, so its own CPU (start-up included: rusage counts from exec)
# and its children's (the sampler, which reaped the job) can be told apart; writes "self children" to the file
# named in the env from an atexit handler: the last thing before the process ends (the front end's own exit work
# after it is counted in the whole run only). A source tree without `_entry.run` runs `main` as it did.
_SPLIT = """
import atexit, os, resource, sys
sys.argv = ["gputop-track", *sys.argv[1:]]
from gputop_tracker import _entry
front = os.getpid()
def split():
    if os.getpid() != front:  # a forked sampler that ends through Python's exit (not os._exit)
        return
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.environ["GPUTOP_BENCH_SPLIT"], "w") as f:
        f.write(f"{me.ru_utime + me.ru_stime} {kids.ru_utime + kids.ru_stime}")
atexit.register(split)
if hasattr(_entry, "run"):
    _entry.run()
sys.exit(_entry.main())
"""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_tool_run(source: Path, seconds: float, json_report: bool = False) -> tuple[float, float, float, float]:
    """(tool CPU s, front end CPU s, sampler CPU s, wall s) of one tracked `sleep`, the job's own CPU taken off."""
    with tempfile.TemporaryDirectory() as d:
        split = Path(d) / "split"
        env = {**os.environ, "PYTHONPATH": str(source), "GPUTOP_TRACKER_STORE": str(Path(d) / "store")}
        env["GPUTOP_BENCH_SPLIT"] = str(split)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        args = ["--headless", "--interval", "0.1", "--gpu-backend", "none", "--", "sleep", str(seconds)]
        if json_report:  # the report as a file of JSON instead of text on stderr
            args[1:1] = ["-f", "json", "-o", str(Path(d) / "out.json")]
        c0, t0 = _children_cpu(), time.perf_counter()
        # run from the temporary directory: `python -c` puts its working directory first on sys.path, so run
        # from a checkout every source tree would be that checkout
        subprocess.run([PY, "-c", _SPLIT, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d)
        whole, wall = _children_cpu() - c0, time.perf_counter() - t0
        c1 = _children_cpu()
        subprocess.run(["sleep", str(seconds / 10)])  # the job alone (it sleeps: its cost is exec and exit)
        job = _children_cpu() - c1
        front, children = (float(x) for x in split.read_text().split())
    return whole - job, front, children - job, wall


def tool_cpu(sources: dict[str, Path], seconds: float, runs: int, json_report: bool = False) -> None:
    """Section 0: each source's runs alternate, so drifting load hits them alike; medians, then min-max."""
    for source in sources.values():
        subprocess.run([PY, "-m", "compileall", "-q", str(source / "gputop_tracker")], stdout=subprocess.DEVNULL)
    results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in sources}
    load0 = os.getloadavg()[0]
    for _ in range(runs):
        for name, source in sources.items():
            results[name].append(one_tool_run(source, seconds, json_report))
    load1 = os.getloadavg()[0]
    report = "-f json -o FILE" if json_report else "text report"
    print(f"== tool CPU, one sleeping process at --interval 0.1, {seconds:g} s, {report}, {runs} runs each ==")
    print(f"   (load average {load0:.1f} -> {load1:.1f} on {os.cpu_count()} cores; target <= 2% of a core)")
    # exit: what the run cost past the front end's atexit handlers (the interpreter's teardown), and noise
    print(f"{'':>10} {'% of a core':>12} {'range':>13} {'CPU s':>7} {'front end':>10} {'sampler':>8} {'exit':>6}")
    for name, rows in results.items():
        pct = [100 * r[0] / r[3] for r in rows]
        med = statistics.median
        print(
            f"{name:>10} {med(pct):>11.2f}% {min(pct):>6.2f}-{max(pct):.2f}% {med(r[0] for r in rows):>7.3f}"
            f" {med(r[1] for r in rows):>10.3f} {med(r[2] for r in rows):>8.3f}"
            f" {med(r[0] - r[1] - r[2] for r in rows):>6.3f}"
        )
    print()


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool-cpu", action="store_true", help="only section 0, the tool's own CPU")
    ap.add_argument("--baseline", type=Path, help="another version's source tree (holding gputop_tracker/)")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the tracked sleep (default 20)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each version (default 3)")
    ap.add_argument("--json", action="store_true", help="section 0 with -f json -o FILE (default: the text report)")
    opts = ap.parse_args()
    sources = {"this": Path(__file__).resolve().parents[1]}
    if opts.baseline is not None:
        if not (opts.baseline / "gputop_tracker").is_dir():
            ap.error(f"--baseline {opts.baseline}: no gputop_tracker/ in it")
        sources = {"baseline": opts.baseline.resolve(), **sources}
    tool_cpu(sources, opts.seconds, opts.runs, opts.json)
    if opts.tool_cpu:
        return
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
