"""The sampler's own I/O: a front end that stops reading, --watch-output's tee, a crash in tracking, the
command's limits and its first sample (real processes, the real sampler)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import track

PY = sys.executable
WAITS_FOR_GO = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.02)\n"

PAUSED_READER = textwrap.dedent(
    """
    import fcntl, json, os, sys, threading, time
    from gputop_tracker.core.sampling import sampler
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: one page, full after a few samples
    cfg = sampler.EngineConfig(mode="launch", argv=["sleep", "2"], interval=0.05, store=sys.argv[1],
                               stream_samples=True)
    got = []
    resumed = []
    def reader():
        got.append(os.read(r, 4096))
        time.sleep(3.0)  # the front end is stopped (kill -STOP) for 3 s
        resumed.append(time.monotonic())
        while chunk := os.read(r, 1 << 20):
            got.append(chunk)
    t = threading.Thread(target=reader)
    t.start()
    code = sampler.Engine(cfg, w).run()
    ended = time.monotonic()
    os.close(w)
    t.join()
    lines = [json.loads(ln) for ln in b"".join(got).splitlines() if ln.startswith(b'{"kind":"summary"')]
    print(json.dumps({"code": code, "after_resume": ended - resumed[0] if resumed else None,
                      "summary": lines[-1]["summary"] if lines else None}))
    """
)


def test_paused_front_end_keeps_sample_rate_and_gets_the_summary(tmp_path: Path) -> None:
    proc = subprocess.run([PY, "-c", PAUSED_READER, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == 0
    s = out["summary"]
    assert s is not None, "the final summary reached the front end once it read again"
    # 2 s at 0.05 s: ~40 samples; a sampler blocked on the full pipe takes a handful (~8)
    assert s["n_samples"] >= 20, s["n_samples"]
    assert any("live-view messages dropped" in n for n in s["notes"]), s["notes"]
    # ended soon after the reader came back (3 s in, the command gone at 2 s), not after the final flush's
    # whole timeout (5 s from the command's end: ~4 s after the reader came back)
    assert out["after_resume"] is not None and out["after_resume"] < 2.0, out["after_resume"]


def test_watch_output_keeps_background_writers(tmp_path: Path) -> None:
    mark = tmp_path / "bgalive"
    cmd = f"(sleep 1; echo late; touch {mark}) & echo early"
    proc = track("--headless", "--no-save", "--watch-output", "--", "sh", "-c", cmd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["early", "late"], proc.stdout
    assert mark.exists(), "the background writer died (SIGPIPE)"


def test_watch_output_slow_consumer_neither_stalls_sampling_nor_loses_bytes(tmp_path: Path) -> None:
    report, done = tmp_path / "r.json", tmp_path / "done"
    # the command writes 1 MB, lives on 3 s and then marks it done; the consumer reads nothing until then
    # (30 s at most): a tee that blocked on the full pipe would block the command's write, so no "seen"
    writer = (
        "import sys, time; sys.stdout.buffer.write(b'x' * 1_000_000); sys.stdout.flush(); time.sleep(3); "
        f"open('{done}', 'w').close()"
    )
    consumer = (
        f"i=0; while [ ! -e {done} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; [ -e {done} ] && echo seen"
    )
    script = (
        f'"$0" -m gputop_tracker --headless -f json -o {report} --no-save --watch-output --interval 0.1 '
        f'-- "$0" -c "{writer}" | ({consumer}; wc -c)'
    )
    proc = subprocess.run(["bash", "-c", script, PY], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["seen", "1000000"], proc.stdout
    summary = json.loads(report.read_text())
    assert summary["n_samples"] >= 10, summary["n_samples"]  # ~30 in 3 s; a blocked tee: ~1


CRASH = textwrap.dedent(
    """
    import json, os, sys
    from gputop_tracker.core.sampling import sampler
    from gputop_tracker.core.summary.builder import SummaryBuilder
    orig = SummaryBuilder.summary
    calls = []
    def summary(self, *a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected")
        return orig(self, *a, **k)
    SummaryBuilder.summary = summary
    r, w = os.pipe()
    mark = sys.argv[2]
    cfg = sampler.EngineConfig(mode="launch", argv=["sh", "-c", f"sleep 0.8; touch {mark}; exit 5"],
                               interval=0.1, store=sys.argv[1])
    engine = sampler.Engine(cfg, w)
    code = engine.run()
    os.close(w)
    print(json.dumps({"code": code, "marked": os.path.exists(mark),
                      "cgroup": str(engine.cgroup.path) if engine.cgroup else None}))
    """
)


def test_a_crash_in_tracking_still_saves_waits_and_cleans_up(tmp_path: Path) -> None:
    store = tmp_path / "store"
    mark = tmp_path / "done"
    proc = subprocess.run([PY, "-c", CRASH, str(store), str(mark)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == 5 and out["marked"], out  # we waited for the command and kept its exit code
    if out["cgroup"]:
        assert not Path(out["cgroup"]).exists(), "the job cgroup was removed"
    files = [p for p in store.glob("*.json") if not p.name.startswith(".")]
    assert len(files) == 1
    session = json.loads(files[0].read_text())
    assert session["meta"]["status"] == "finished" and session["meta"]["exit_code"] == 5
    assert any("tracking failed (RuntimeError: injected)" in n for n in session["summary"]["notes"])


def test_command_keeps_its_open_files_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("hard limit too low to tell")

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    proc = track("--headless", "--no-save", "--", "sh", "-c", "ulimit -n", preexec_fn=lower)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "256"


def test_short_command_is_sampled_before_the_first_checkpoint(tmp_path: Path) -> None:
    """The first sample comes before the first checkpoint (a save, which once came first and took long enough
    for a short command to end unseen): the first checkpoint on disk already holds a sample of the command.
    Asserted on that checkpoint, which stays for a checkpoint period, not on a short command's luck."""
    store, go = tmp_path / "store", tmp_path / "go"
    proc = subprocess.Popen(
        [PY, "-m", "gputop_tracker", "--headless", "--", PY, "-c", WAITS_FOR_GO, str(go)],
        env={**os.environ, "GPUTOP_TRACKER_STORE": str(store)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (files := [f for f in store.glob("*.json") if not f.name.startswith(".")]):
            assert time.monotonic() < deadline and proc.poll() is None, "no checkpoint"
            time.sleep(0.01)
        session = json.loads(files[0].read_text())
    finally:
        go.touch()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert session["meta"]["status"] == "running"
    assert session["summary"]["n_samples"] >= 1 and session["summary"]["n_processes"] >= 1, session["summary"]
