"""Helpers of the Prometheus tests: parse an exposition with prometheus-client's own parser, scrape, poll."""

from __future__ import annotations

import errno
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
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


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    """Nobody holds `port` on any interface now (IPv4, and IPv6 where there is one)."""
    families = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, host in families:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT):
                continue  # no IPv6 here
            return False
    return True


def free_port() -> int:
    """A port nobody holds now, below the kernel's ephemeral range where possible: a port the kernel hands out
    for bind(0) or an outgoing connection may be taken again by anyone before our program binds it. It may
    still be taken meanwhile (another job picking ports too): `PORT_RETRIES` runs retry on "already in use"."""
    low, _high = _ephemeral_range()
    if low > 11000:
        for _ in range(100):
            port = random.randrange(10000, low - 1000)
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT_RETRIES = 5
T = TypeVar("T")


def in_use(e: BaseException | str) -> bool:
    """A failure to bind because the port is taken (our exporter's message, or the OS's)."""
    return "already in use" in str(e).lower() or (isinstance(e, OSError) and e.errno == errno.EADDRINUSE)


def on_free_port(start: Callable[[int], T]) -> tuple[T, int]:
    """`start(port)` on a free port, again on another one while the port turns out to be taken meanwhile."""
    for attempt in range(PORT_RETRIES):
        port = free_port()
        try:
            return start(port), port
        except Exception as e:
            if not in_use(e) or attempt == PORT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def listens(pid: int, port: int) -> bool:
    """`pid` has a listening TCP socket on `port`."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


def cli_on_free_port(make_args: Callable[[int], list[str]], **kw: Any) -> tuple[subprocess.Popen[str], int]:
    """The real CLI serving on a free port, once it listens there: started again on another port while the one
    it was given turns out to be taken (it then exits at once, saying so, before it starts the command)."""
    for attempt in range(PORT_RETRIES):
        port = free_port()
        proc = cli(*make_args(port), **kw)
        deadline = time.monotonic() + 120
        while proc.poll() is None and not listens(proc.pid, port):
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"the CLI neither listened on {port} nor exited: {proc.communicate()}")
            time.sleep(0.05)
        if proc.poll() is None:
            return proc, port
        _, err = proc.communicate()
        if not in_use(err) or attempt == PORT_RETRIES - 1:
            raise AssertionError(f"the CLI exited with {proc.returncode} before it listened on {port}:\n{err}")
    raise AssertionError("unreachable")


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
        self.argv = [sys.executable, str(script), str(self.figures_path), str(self.done), str(mb)]  # the command

        def args(port: int) -> list[str]:
            return ["--headless", "--interval", "0.2", *(f.replace("{port}", str(port)) for f in flags),
                    "--", *self.argv]  # fmt: skip

        self.port = 0  # with "{port}" in a flag: a free port, the run started again while it was taken
        if any("{port}" in f for f in flags):
            self.proc, self.port = cli_on_free_port(args, env=env)
        else:
            self.proc = cli(*args(0), env=env)

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
