"""What the in-process probe adds to a Python process, start-up and exit together (target: at most 1 ms, 1 MiB).

Start-up and exit: the CPU time (user + system, start to exit) of `python -c pass` bare, with an empty directory
on PYTHONPATH (what any entry costs: each module the environment's .pth files import at start-up is looked up there
first), and with the probe (the session's FIFO variable set, so it installs its hooks and reports at exit), in
interleaved rounds; each figure is the mean of a run's difference with the run beside it in its round, with its
standard error (a shared machine's noise is mostly common to a round). In a fresh venv (`venv --without-pip`: no
.pth file, a user's plain environment) and in this venv (an editable install, whose .pth imports some 30 modules);
also as another Python version than the tool's meets the probe (its bytecode absent, PYTHONDONTWRITEBYTECODE: its
first process compiles the probe and keeps its bytecode) and where nothing can be cached at all. The same in
instructions (valgrind's callgrind, where installed: a count that does not move with the machine's load), and the
probe's own import as `python -X importtime` reports it (the cumulative µs of `sitecustomize`). Exit: the wall time
of the exit report itself (a FIFO with a reader).

The out-of-memory hook (a meta-path finder that answers only for `torch.cuda`): what it adds to a process that
imports ~180 standard-library modules and never torch (CPU time start to exit, with and without the probe, and the
finder's own cost per import, timed in-process); what hooking adds to `import torch` (the stand-in torch of
tests/probe_job/fakes: the import itself is tiny, so the hook's cost shows; real PyTorch's import takes seconds);
and what the observer costs at one CUDA out-of-memory error (the stand-in's allocator, 20 segments, one FIFO line).

    python bench/bench_probe.py [runs]
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from gputop_tracker.core.blocks.probe import PROBE_DIR, probe_environment


def _start(env: dict[str, str], python: str = sys.executable) -> float:
    """CPU seconds (user + system) of one `python -c pass`, start to exit: unlike wall time, not inflated by
    the other work of a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([python, "-c", "pass"], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


PEAK_CODE = (
    "import sys\ns = sys.modules.get('sitecustomize')\n"
    "getattr(s, '_report', lambda how: None)('exit')  # the exit report, now: its cost lands in VmHWM below\n"
    "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])"
)


def _peak(env: dict[str, str]) -> int:
    """The peak RSS (bytes) of one `python -c pass`, the exit report included: VmHWM read by the process itself
    after its report (a child's ru_maxrss would hold the parent's pages its vfork inherited)."""
    out = subprocess.run([sys.executable, "-c", PEAK_CODE], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout) * 1024


def _importtime(env: dict[str, str]) -> int:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True, check=True
    ).stderr
    # the outermost line: ours, with the chained import of the one it shadows inside it
    return max(int(line.split("|")[1]) for line in out.splitlines() if line.rstrip().endswith(" sitecustomize"))


EXIT_CODE = (
    "import time, sitecustomize as s\nt = time.perf_counter(); s._report('exit'); print(time.perf_counter() - t)"
)


def _exit_cost(env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", EXIT_CODE], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout)


def _drain(fd: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.01)


FAKES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "probe_job", "fakes")
STDLIB = sorted(
    m
    for m in sys.stdlib_module_names
    if not m.startswith("_") and m not in ("antigravity", "this", "idlelib", "turtle")
)
IMPORTS = (
    "import importlib, sys\n"
    "for m in " + repr(STDLIB) + ":\n"
    "    try:\n        importlib.import_module(m)\n    except Exception:\n        pass\n"
    "print(len(sys.modules))"
)


def _run_cpu(env: dict[str, str], code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


FINDER = """
import sys, time
finder = sys.meta_path[0]
assert getattr(finder, "__name__", "") == "gputop_probe_torch_cuda", sys.meta_path
names = sorted(sys.modules) * 20
t = time.perf_counter()
for n in names:
    finder.find_spec(n)
print((time.perf_counter() - t) / len(names))
"""

HOOK = """
import sys, time
import torch
import sitecustomize as probe
times = []
for _ in range(50):
    probe._hooked.clear()  # hook again (a second observer: only for this measurement)
    probe._gpu.clear()  # the GPU half loaded again too, as at the first hook
    t = time.perf_counter()
    probe._gpu_half()["torch_cuda"](sys.modules["torch.cuda"], vars(probe))
    times.append(time.perf_counter() - t)
times.sort()
print(times[len(times) // 2])
"""

OOM = """
import os, sys, time
import torch
GiB, MiB = 1 << 30, 1 << 20
big = [torch.empty(512 * MiB, dtype=torch.uint8, device="cuda") for _ in range(20)]
del big[:]
held = [torch.empty(300 * MiB, dtype=torch.uint8, device="cuda") for _ in range(20)]
times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    try:
        torch.empty(7 * GiB, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        times.append(time.perf_counter() - t)
times.sort()
print(times[len(times) // 2])
"""


def _oom_cost(env: dict[str, str], n: int) -> float:
    out = subprocess.run([sys.executable, "-c", OOM, str(n)], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout)


def hook_costs(runs: int, base: dict[str, str], probed: dict[str, str]) -> None:
    """The out-of-memory hook: nothing for a process without torch; what hooking and an OOM cost with it."""
    times: dict[str, list[float]] = {"without": [], "with": [], "torch without": [], "torch with": []}
    fakes = {"FAKE_TORCH_GPU_TOTAL": str(16 << 30)}
    torch_base = {**base, **fakes, "PYTHONPATH": FAKES}
    torch_probed = {**probed, **fakes, "PYTHONPATH": f"{PROBE_DIR}{os.pathsep}{FAKES}"}
    for _ in range(runs):
        times["without"].append(_run_cpu(base, IMPORTS))
        times["with"].append(_run_cpu(probed, IMPORTS))
        times["torch without"].append(_run_cpu(torch_base, "import torch"))
        times["torch with"].append(_run_cpu(torch_probed, "import torch"))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    low = {k: min(v) * 1e3 for k, v in times.items()}
    finder = subprocess.run([sys.executable, "-c", FINDER], env=probed, capture_output=True, text=True, check=True)
    per_import = float(finder.stdout) * 1e9
    hook = subprocess.run([sys.executable, "-c", HOOK], env=torch_probed, capture_output=True, text=True, check=True)
    print(
        f"out-of-memory hook: {len(STDLIB)} standard-library imports, no torch, CPU time start to exit (median / "
        f"min of {runs}): {med['without']:.1f} / {low['without']:.1f} ms without the probe, {med['with']:.1f} / "
        f"{low['with']:.1f} ms with it (the probe's start-up and exit report included); the finder itself "
        f"{per_import:.0f} ns per import, timed in-process (x {len(STDLIB)} = {per_import * len(STDLIB) / 1e3:.1f} µs)"
    )
    print(
        f"  `import torch` (stand-in), median / min: {med['torch without']:.2f} / {low['torch without']:.2f} ms "
        f"without the probe, {med['torch with']:.2f} / {low['torch with']:.2f} ms with it; the hook itself (the "
        f"out-of-memory half loaded, the observer attached), in-process: {float(hook.stdout) * 1e3:.3f} ms"
    )
    n = max(20, runs)
    plain, hooked = _oom_cost(torch_base, n), _oom_cost(torch_probed, n)
    print(
        f"  one CUDA out-of-memory error (stand-in allocator, 20 segments; median of {n}): {plain * 1e3:.3f} ms "
        f"without the probe, {hooked * 1e3:.3f} ms with it ({(hooked - plain) * 1e3:+.3f} ms: statistics, snapshot, "
        "a state file, one FIFO line)"
    )


def _instructions(env: dict[str, str], python: str) -> int | None:
    """Instructions one `python -c pass` executes, start to exit (valgrind's callgrind: the same count at every
    run, whatever the machine's load or clock); None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/cg", python, "-c", "pass"],
            env={**env, "PYTHONHASHSEED": "0"},  # the same dicts at every run
            capture_output=True,
            text=True,
        ).stderr
    counts = [int(line.rsplit(":", 1)[1]) for line in out.splitlines() if "Collected :" in line]
    return counts[0] if counts else None


def instructions(probed: dict[str, str], base: dict[str, str], d: str, fresh: str) -> None:
    """The probe's cost in instructions: ours, apart from what any directory on PYTHONPATH costs a start-up (each
    import of the environment's .pth files looks there first), in a fresh venv, this venv and the bare interpreter."""
    empty = os.path.join(d, "empty")
    os.makedirs(empty, exist_ok=True)
    for label, python in (
        ("a fresh venv", fresh),
        ("this venv", sys.executable),
        ("the bare interpreter", sys._base_executable),
    ):
        bare = _instructions(base, python)
        floor = _instructions({**base, "PYTHONPATH": empty}, python)
        ours = _instructions(probed, python)
        if bare is None or floor is None or ours is None:
            print("  instructions: no valgrind")
            return
        print(
            f"  instructions of python -c pass ({label}, callgrind): {bare / 1e6:.1f} M bare; an empty directory on "
            f"PYTHONPATH {(floor - bare) / 1e6:+.2f} M; the probe (start-up and exit report) {(ours - floor) / 1e6:+.2f} M "
            f"more ({(ours - bare) / bare:+.1%} in all)"
        )


def _venv(d: str) -> str:
    """A fresh venv of the tool's interpreter, without pip (no .pth file at all): its python."""
    path = os.path.join(d, "venv")
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", path], check=True)
    return os.path.join(path, "bin", "python")


def _rounds(python: str, envs: dict[str, dict[str, str]], rounds: int) -> dict[str, list[float]]:
    """CPU seconds of `python -c pass` under each environment, in interleaved rounds (a warm-up round first)."""
    out: dict[str, list[float]] = {k: [] for k in envs}
    for e in envs.values():
        _start(e, python)
    for _ in range(rounds):
        for k, e in envs.items():
            out[k].append(_start(e, python))
    return out


def _diff(times: dict[str, list[float]], a: str, b: str) -> str:
    """Mean ± standard error (median) of a's runs minus b's, round by round, in ms."""
    d = [(x - y) * 1e3 for x, y in zip(times[a], times[b], strict=True)]
    se = statistics.stdev(d) / len(d) ** 0.5
    return f"{statistics.mean(d):+.2f} ± {se:.2f} ms (median {statistics.median(d):+.2f})"


def cpu(rounds: int, base: dict[str, str], probed: dict[str, str], d: str, fresh: str) -> None:
    empty = os.path.join(d, "empty")
    os.makedirs(empty, exist_ok=True)
    plain = {**base, "PYTHONPATH": empty}
    # another Python version than the tool's (its bytecode absent), under PYTHONDONTWRITEBYTECODE: its first
    # process compiles the probe and keeps its bytecode in our __pycache__
    copy = os.path.join(d, "probe")
    shutil.copytree(PROBE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    uncached = {**probed, "PYTHONPATH": copy, "PYTHONDONTWRITEBYTECODE": "1"}
    bare_first = _start(base, fresh)
    first = _start(uncached, fresh) - bare_first  # that version's first process: compiles, writes its bytecode
    # nowhere to cache (the __pycache__ name taken by a file, and no private copy: gputop-track makes one in the
    # user's cache directory where it can): every start compiles the probe
    blocked = os.path.join(d, "blocked")
    shutil.copytree(PROBE_DIR, blocked, ignore=shutil.ignore_patterns("__pycache__"))
    with open(os.path.join(blocked, "__pycache__"), "w") as f:
        f.write("not a directory")
    nowhere = {**probed, "PYTHONPATH": blocked, "PYTHONDONTWRITEBYTECODE": "1"}
    envs = {"bare": base, "dir": plain, "probe": probed, "uncached": uncached, "nowhere": nowhere}
    t = _rounds(fresh, envs, rounds)
    print(
        f"python -c pass, CPU time start to exit, {rounds} interleaved rounds, each figure the mean ± s.e. (median) "
        "of a run's difference with the run beside it in its round (target: the probe adds at most 1 ms):"
    )
    print(
        f"  a fresh venv (no .pth file): {statistics.mean(t['bare']) * 1e3:.2f} ms bare; the probe adds "
        f"{_diff(t, 'probe', 'bare')}, of which its own {_diff(t, 'probe', 'dir')} and {_diff(t, 'dir', 'bare')} "
        "what any directory on PYTHONPATH costs"
    )
    print(
        f"  another Python version (bytecode absent, PYTHONDONTWRITEBYTECODE): its first process "
        f"{first * 1e3:+.2f} ms (compiles the probe, keeps its bytecode), each later one "
        f"{_diff(t, 'uncached', 'bare')}; nowhere to cache at all {_diff(t, 'nowhere', 'bare')}"
    )
    t = _rounds(sys.executable, {"bare": base, "dir": plain, "probe": probed}, rounds)
    print(
        f"  this venv (its .pth files import some 30 modules at start-up, each looked up in our directory first): "
        f"{statistics.mean(t['bare']) * 1e3:.2f} ms bare; the probe adds {_diff(t, 'probe', 'bare')}, of which its "
        f"own {_diff(t, 'probe', 'dir')} and {_diff(t, 'dir', 'bare')} the directory"
    )


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    probe_environment({})  # the bytecode cached for this interpreter, as a tracked run does
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "blocks")
        os.mkfifo(fifo)
        rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        stop = threading.Event()
        reader = threading.Thread(target=_drain, args=(rfd, stop), daemon=True)
        reader.start()
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUTOP_TRACKER_BLOCKS")}
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        probed = {**base, "PYTHONPATH": PROBE_DIR, "GPUTOP_TRACKER_BLOCKS": fifo}
        fresh = _venv(d)
        cpu(runs, base, probed, d, fresh)
        n = max(5, runs // 30)
        imports = [_importtime(probed) for _ in range(n)]
        exits = [_exit_cost(probed) for _ in range(n)]
        peaks = {k: [_peak(e) for _ in range(n)] for k, e in (("without", base), ("with", probed))}
        instructions(probed, base, d, fresh)
        hook_costs(max(10, runs // 10), base, probed)
        stop.set()
        reader.join()
        os.close(rfd)
    print(f"  the probe's import (-X importtime, median of {n}): {statistics.median(imports) / 1e3:.2f} ms")
    print(
        f"  its exit report (VmHWM, ru_maxrss, one FIFO write; median of {n}): {statistics.median(exits) * 1e3:.2f} ms"
    )
    pk = {k: statistics.median(v) / 2**20 for k, v in peaks.items()}
    print(
        f"  peak RSS of python -c pass (VmHWM, median of {n}): without {pk['without']:.2f} MiB, with the probe "
        f"{pk['with']:.2f} MiB ({pk['with'] - pk['without']:+.2f}) (target ≤ 1 MiB)"
    )


if __name__ == "__main__":
    main()
