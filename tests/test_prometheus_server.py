"""A real Prometheus server scrapes the real CLI's endpoint.

The server (Debian package `prometheus`; `.ci/run` installs it where apt-get can) runs on 127.0.0.1 on a
free port with its own storage in tmp_path and a 1 s scrape interval pointed at `gputop-track --prometheus`;
the test asks its HTTP API until `gputop_tree_memory_bytes{kind="total"}` is near what the tracked job holds.
Skipped, saying why, where no `prometheus` binary exists. The server is always killed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from promutil import MB, PORT_RETRIES, Holder, free_port, in_use, wait_until

from gputop_tracker.core.model.text import command_line

pytestmark = pytest.mark.slow

PROMETHEUS = os.environ.get("GPUTOP_TEST_PROMETHEUS") or shutil.which("prometheus")


class Server:
    def __init__(self, tmp_path: Path, target_port: int) -> None:
        assert PROMETHEUS is not None
        self.port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: gputop\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        )
        self.log = (tmp_path / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: killed whole, never sharing our signals
        )
        self.log_path = tmp_path / "prometheus.log"

    def get(self, path: str, **params: str) -> Any:
        assert self.proc.poll() is None, f"prometheus exited: {self.log_path.read_text()[-2000:]}"
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}{query}", timeout=10) as r:
            body = r.read().decode()
        return json.loads(body) if body.startswith("{") else body

    def ready(self) -> bool:
        return "Ready" in str(self.get("/-/ready"))

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = self.get("/api/v1/query", query=promql)
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(15)
        self.log.close()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    if PROMETHEUS is None:
        pytest.skip(
            "no `prometheus` binary on PATH (Debian: apt-get install prometheus; .ci/run installs it where apt-get works)"
        )
    made: list[Server] = []

    def make(target_port: int) -> Server:
        """A Prometheus server, ready; started again on another port while the one it was given was taken."""
        for attempt in range(PORT_RETRIES):
            server = Server(tmp_path, target_port)
            made.append(server)
            wait_until(lambda s=server: s.proc.poll() is not None or s.ready(), 90, "prometheus ready")
            if server.proc.poll() is None:
                return server
            server.stop()
            log = server.log_path.read_text()
            if not in_use(log) or attempt == PORT_RETRIES - 1:
                raise AssertionError(f"prometheus exited: {log[-2000:]}")
        raise AssertionError("unreachable")

    yield make
    for server in made:
        server.stop()


def test_real_prometheus_scrapes_the_tree_memory(tmp_path: Path, server_factory: Any) -> None:
    holder = Holder(tmp_path, 300, "--prometheus", "127.0.0.1:{port}")
    target = holder.port
    try:
        server = server_factory(target)
        own = holder.figures()
        assert abs(own["pss"] - 300 * MB) < 0.1 * 300 * MB

        def near() -> list[dict[str, Any]]:
            found = server.query('gputop_tree_memory_bytes{kind="total"}')
            return [r for r in found if abs(float(r["value"][1]) - own["pss"]) <= 0.10 * own["pss"]]

        result = wait_until(near, 90, f"gputop_tree_memory_bytes near {own['pss']} in Prometheus")
        labels = result[0]["metric"]
        assert labels["job"] == "gputop" and labels["instance"] == f"127.0.0.1:{target}"
        session = labels["session"]
        # the counter and the info metric arrived too, joinable on the session label
        cpu = wait_until(lambda: server.query("gputop_tree_cpu_seconds_total"), 30, "the CPU counter")
        assert {r["metric"]["mode"] for r in cpu} == {"user", "system"}
        joined = server.query(
            'gputop_tree_memory_bytes{kind="total"} * on(session) group_left(command) gputop_session_info'
        )
        assert joined and joined[0]["metric"]["session"] == session
        # the command line, shortened to 120 characters (where the checkout's path is long, before the script's name)
        label, full = joined[0]["metric"]["command"], command_line(holder.argv)
        assert len(label) <= 120 and (label == full or (label.endswith("…") and full.startswith(label[:-1]))), label
    finally:
        code, err = holder.release()
    assert code == 0, err
    assert "Traceback" not in err
