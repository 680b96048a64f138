"""Helpers shared by the tests: run the real CLI, read the kernel's own figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKLOADS = str(Path(__file__).with_name("workloads.py"))


def track(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI (headless: no TTY here) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "gputop_tracker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        **kw,
    )


def track_json(tmp_path: Path, *args: str, **kw: Any) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "report.json"
    proc = track(
        "--headless", "-f", "json", "-o", str(out), "--ru", "bytes", "--gru", "bytes", "--tu", "seconds", *args, **kw
    )
    assert out.exists(), proc.stderr
    report = json.loads(out.read_text())
    crashed = [n for n in report.get("notes", []) if n.startswith("tracking failed")]
    assert not crashed, crashed  # a bug in the sampler, caught and noted: never the way a run should end
    return proc, report


def kernel_figures(path: Path) -> dict[str, float]:
    return {k: float(v) for k, v in json.loads(path.read_text()).items()}


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
