"""The node_exporter textfile when runs meet it: two runs naming one FILE, a Tracker never stopped. Real CLI runs
and real programs; the file read with prometheus-client's parser."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from promutil import cli, parse, wait_until

pytest.importorskip("prometheus_client")


def _session_of(prom: Path) -> str:
    return str(parse(prom.read_text())["gputop_session_info"].samples[0].labels["session"])


def _kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the run and everything it started (its sampler, its command): nothing of it cleans up."""
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for p in tree:
        p.kill()
    psutil.wait_procs(tree, timeout=30)
    proc.communicate(timeout=30)


def test_a_textfile_another_run_is_writing_is_refused_and_left_to_it(tmp_path: Path) -> None:
    """Two runs naming one FILE (`gputop-${SLURM_JOB_ID}.prom` for two tasks of a node): the second took the
    first's file for one an earlier run left behind, and each replaced the other's figures every 2 s. Now the
    second is refused before its command starts while the first writes it; once the first is gone (killed: its
    file stays), the next run takes the file over."""
    prom = tmp_path / "gputop.prom"
    sleeper = ["--", sys.executable, "-c", "import time; time.sleep(120)"]
    first = cli("--headless", "--interval", "0.2", "--prometheus-textfile", str(prom), *sleeper)
    try:
        wait_until(lambda: prom.exists() and _session_of(prom), 60, "the first run's textfile")
        session = _session_of(prom)
        marker = tmp_path / "second-ran"
        second = cli("--headless", "--prometheus-textfile", str(prom), "--", sys.executable, "-c",
                     f"open({str(marker)!r}, 'w')")  # fmt: skip
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2, err
        assert "another gputop-track run is writing it" in err and len(err.strip().splitlines()) == 1, err
        assert not marker.exists()
        time.sleep(2.5)  # past the first run's next rewrite: still its figures, under the name
        assert _session_of(prom) == session
        # the API refuses it at once as well (a ValueError, as any bad argument)
        from gputop_tracker import Tracker

        with pytest.raises(ValueError, match="another gputop-track run is writing it"):
            Tracker(prometheus_textfile=prom)
    finally:
        _kill_tree(first)  # no clean-up: its file stays, as a stale one
    assert prom.exists() and _session_of(prom) == session
    third = cli("--headless", "--prometheus-textfile", str(prom), "--", sys.executable, "-c", "pass")
    _, err = third.communicate(timeout=60)
    assert third.returncode == 0, err
    assert not prom.exists()  # taken over, then removed at its end


def test_two_trackers_of_one_program_cannot_share_a_textfile(tmp_path: Path) -> None:
    from gputop_tracker import Tracker

    prom = tmp_path / "job.prom"
    with Tracker(sleep_time=0.1, save=False, prometheus_textfile=prom) as t:
        wait_until(lambda: prom.exists() and _session_of(prom) == t.session_id, 60, "the textfile")
        with pytest.raises(ValueError, match="another gputop-track run is writing it"):
            Tracker(sleep_time=0.1, save=False, prometheus_textfile=prom)
    assert not prom.exists()


NEVER_STOPPED = """
    import os, sys, time
    from gputop_tracker import Tracker
    prom = sys.argv[1]
    t = Tracker(sleep_time=0.1, save=False, prometheus_textfile=prom).start()
    deadline = time.monotonic() + 60
    while not os.path.exists(prom) and time.monotonic() < deadline:
        time.sleep(0.05)
    if os.fork() == 0:
        sys.exit(0)  # a forked child's exit leaves the parent's file alone
    os.wait()
    print("SEEN" if os.path.exists(prom) else "MISSING", flush=True)
    if sys.argv[2] == "raise":
        raise RuntimeError("the program fails with its Tracker running")
"""


@pytest.mark.parametrize("end", ["return", "raise"])
def test_a_tracker_never_stopped_leaves_no_textfile(tmp_path: Path, end: str) -> None:
    """A program that ends (or fails) with its Tracker running: the textfile stayed, and node_exporter served the
    finished run's last figures as live until someone deleted the file. Now it goes at the program's exit."""
    prom = tmp_path / "job.prom"
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(NEVER_STOPPED))
    proc = subprocess.run(
        [sys.executable, str(script), str(prom), end], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.stdout.strip() == "SEEN", proc.stdout + proc.stderr
    assert proc.returncode == (0 if end == "return" else 1), proc.stderr
    assert not prom.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("job.prom")] == []  # no temporary file
