"""Helpers of the Prometheus tests: parse an exposition with prometheus-client's own parser, scrape, poll."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

MB = 1000 * 1000

# Holds MB until told (a file appears), after writing the kernel's own figures for itself: no timing luck.
HOLDER = r"""
import os, sys, time
out, done, mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
buf = bytearray(mb * 1000 * 1000)
for i in range(0, len(buf), 4096):
    buf[i] = 1
figures = {}
with open("/proc/self/smaps_rollup") as f:
    for line in f:
        if line.startswith(("Pss:", "Rss:")):
            figures[line.split(":")[0].lower()] = int(line.split()[1]) * 1024
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("VmRSS:"):
            figures["vmrss"] = int(line.split()[1]) * 1024
t = os.times()
figures["cpu_user"], figures["cpu_system"] = t.user, t.system
with open(out + ".tmp", "w") as f:
    f.write(repr(figures).replace("'", '"'))
os.replace(out + ".tmp", out)
deadline = time.monotonic() + 120
while not os.path.exists(done) and time.monotonic() < deadline:
    time.sleep(0.05)
"""

# --------------------------------------------------------------------------- the collector, from messages


Families = dict[str, Any]


def parse(text: str) -> Families:
    """{family name: family}, via prometheus-client's parser (a counter's family name has no `_total`)."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def values(families: Families, name: str, sample: str | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    """{sorted labels without `session`: value} of one family's samples named `sample` (default: the family)."""
    fam = families[name]
    want = sample or name
    return {
        tuple(sorted((k, v) for k, v in s.labels.items() if k != "session")): s.value
        for s in fam.samples
        if s.name == want
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int, host: str = "127.0.0.1") -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        return str(r.read().decode())


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `check` until it returns something truthy; errors count as not yet."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            got = check()
        except (OSError, AssertionError, KeyError, ValueError) as e:
            got, last = None, e
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def cli(*args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gputop_tracker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        **kw,
    )


class Holder:
    """The real CLI tracking HOLDER (MB held until `release`)."""

    def __init__(self, tmp_path: Path, mb: int, *flags: str, env: dict[str, str] | None = None) -> None:
        self.figures_path = tmp_path / "figures.json"
        self.done = tmp_path / "done"
        script = tmp_path / "holder.py"
        script.write_text(HOLDER)
        self.proc = cli(
            "--headless", "--interval", "0.2", *flags,
            "--", sys.executable, str(script), str(self.figures_path), str(self.done), str(mb),
            env=env,
        )  # fmt: skip

    def figures(self) -> dict[str, int]:
        def read() -> dict[str, int] | None:
            assert self.proc.poll() is None, self.proc.communicate()
            return json.loads(self.figures_path.read_text()) if self.figures_path.exists() else None

        return dict(wait_until(read, 60, "the workload's own figures"))

    def release(self) -> tuple[int, str]:
        self.done.write_text("")
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.done.write_text("")
            try:
                self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
