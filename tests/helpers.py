"""Helpers shared by the tests: run the real CLI, read the kernel's own figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

WORKLOADS = str(Path(__file__).with_name("workloads.py"))


def cli(*args: str) -> list[str]:
    """The command line that runs the real CLI with `args`."""
    return [sys.executable, "-m", "gputop_tracker", *args]


def python_c(code: str) -> subprocess.CompletedProcess[str]:
    """A fresh Python interpreter running `code` (this one's executable), its output captured; 60 s at most."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def json_report_to(out: Path, *args: str) -> list[str]:
    """The CLI's arguments for a headless run that writes its JSON report to `out`, followed by `args`."""
    return ["--headless", "-f", "json", "-o", str(out), *args]


def track(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI (headless: no TTY here) and capture its output."""
    return subprocess.run(
        cli(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        **kw,
    )


def track_json(tmp_path: Path, *args: str, **kw: Any) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "report.json"
    proc = track(*json_report_to(out, "--ru", "bytes", "--gru", "bytes", "--tu", "seconds", *args), **kw)
    assert out.exists(), proc.stderr
    report = json.loads(out.read_text())
    crashed = [n for n in report.get("notes", []) if n.startswith("tracking failed")]
    assert not crashed, crashed  # a bug in the sampler, caught and noted: never the way a run should end
    return proc, report


def workload_command(workload: str, *args: str) -> list[str]:
    """The command line that runs one workloads.py `workload` with `args`."""
    return [sys.executable, WORKLOADS, workload, *args]


def track_workload(
    tmp_path: Path, interval: str, workload: str, *args: str, **kw: Any
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """track_json of one workloads.py `workload` sampled every `interval` s; it writes the kernel's own figures
    to the path returned third (read it with kernel_figures), `args` follow that path on its command line."""
    k = tmp_path / "k.json"
    proc, report = track_json(tmp_path, "--interval", interval, "--", *workload_command(workload, str(k), *args), **kw)
    return proc, report, k


def kernel_figures(path: Path) -> dict[str, float]:
    return {k: float(v) for k, v in json.loads(path.read_text()).items()}


def output_reader(fd: int) -> tuple[Any, list[str], threading.Thread]:
    """A live view's SamplerSource reading the job's output at `fd` (no sampler behind it), the list its output()
    fills, and the started thread filling it; the caller closes the source and joins the thread."""
    from gputop_tracker.tui.live.run import SamplerSource

    source = SamplerSource(handle=None, output_fd=fd)  # type: ignore[arg-type]  # output() needs no sampler
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(source.output()), daemon=True)
    reader.start()
    return source, got, reader


@contextmanager
def killed_if_running(proc: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """On the way out, a failed assertion's too: kills and reaps `proc` if it still runs."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_for(cond: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> None:
    """Until `cond()` is true, or an AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def sigint_default() -> None:
    """A preexec_fn: the started program gets SIGINT at its default, whatever pytest's own is (a CI that runs the
    tests as a script's background job starts them with SIGINT ignored, which the tool, rightly, keeps ignored)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def can_create_cgroup(name: str) -> bool:
    """Whether this machine lets us make a job's memory cgroup (one named `name` is made, then removed)."""
    from gputop_tracker.core.proc.cgroup import create_job_cgroup

    cg = create_job_cgroup(name)
    if cg is None:
        return False
    cg.remove()
    return True


def symlinked_file(tmp_path: Path, target_name: str, text: str) -> tuple[Path, Path]:
    """A file `target_name` holding `text`, mode 0640, and a link.json in `tmp_path` that points to it."""
    target = tmp_path / target_name
    target.write_text(text)
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    return target, link


# The start of a PyTorch workload (argv: facts file, seconds): ~4 GiB allocated on the GPU, two 8192² matrices
# `a` and `b` to multiply until `end`; the rest, from a new line, writes its facts to `out`.
TORCH_MATMUL_START = r"""
import json, sys, time, torch
out, seconds = sys.argv[1], float(sys.argv[2])
x = torch.empty(4 * 1024**3 // 4, dtype=torch.float32, device="cuda")
a = torch.randn(8192, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")
torch.cuda.synchronize()
end = time.time() + seconds"""


def build_or_skip(build: Callable[[Path], Path | None], where: Path, what: str) -> Path:
    """The stand-in library `build` compiles into `where`; the test skipped where no C compiler can build `what`."""
    lib = build(where)
    if lib is None:
        import pytest

        pytest.skip(f"no C compiler (gcc/cc): {what} cannot be built")
    return lib


# main starts a child and writes "main child" PIDs to the pidfile (argv 1); both wait for the done file (argv 2)
PARENT_CHILD_WORKLOAD = r"""
import os, subprocess, sys, time
pidfile, done = sys.argv[1], sys.argv[2]
child = subprocess.Popen([sys.executable, "-c",
    "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)", done])
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.replace(pidfile + ".tmp", pidfile)
child.wait()
sys.exit(7)
"""


def parent_child_workload(last_words: str = "") -> str:
    """PARENT_CHILD_WORKLOAD with `last_words` (lines of Python) run by main just before it exits 7."""
    return PARENT_CHILD_WORKLOAD.replace("sys.exit(7)\n", last_words + "sys.exit(7)\n")


def wait_pids(pidfile: Path, proc: subprocess.Popen[str], timeout: float) -> tuple[int, int]:
    """The main and child PIDs parent_child_workload wrote to `pidfile`; fails if `proc` (the tracker) ends first."""
    deadline = time.monotonic() + timeout
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the workload never wrote its pids"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    main, child = pidfile.read_text().split()
    return int(main), int(child)
