"""Alerts, the event timeline, OOM dumps and the leak hint, with real workloads through the real CLI."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import cli, json_report_to, track

from gputop_tracker.core.model.models import Session
from gputop_tracker.core.proc import cgroup as cgroups
from gputop_tracker.core.summary import events as ev

PY = sys.executable
MB = 1_000_000

# Grows in 10 MB steps every 0.1 s up to TARGET bytes of RSS, writing (time, own RSS) after each step to LOG,
# then holds it HOLD seconds. With a 4th argument, waits for that file to exist before it starts.
GROW = r"""
import json, os, sys, time
target, log, hold = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
while len(sys.argv) > 4 and not os.path.exists(sys.argv[4]):
    time.sleep(0.02)
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
chunks, steps = [], []
time.sleep(0.3)
while rss() < target:
    b = bytearray(10_000_000)
    b[::4096] = b"1" * len(b[::4096])
    chunks.append(b)
    steps.append((time.time(), rss()))
    time.sleep(0.1)
with open(log, "w") as f:
    json.dump(steps, f)
time.sleep(hold)
"""

# Grows 10 MB every 0.05 s without end (killed by the OOM killer inside a small cgroup).
GROW_FOREVER = r"""
import time
chunks = []
while True:
    b = bytearray(10_000_000)
    b[::4096] = b"1" * len(b[::4096])
    chunks.append(b)
    time.sleep(0.05)
"""


def _session(store: Path) -> dict[str, Any]:
    files = [p for p in store.glob("*.json") if not p.name.startswith(".")]
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def _first_checkpoint(store: Path, timeout: float = 60) -> None:
    """The session the sampler saves right after its first sample: sampling runs."""
    deadline = time.monotonic() + timeout
    while not [p for p in store.glob("*.json") if not p.name.startswith(".")]:
        assert time.monotonic() < deadline, f"no session checkpoint in {store} after {timeout} s"
        time.sleep(0.05)


def _crossing(steps: list[list[float]], level: float) -> tuple[float, float]:
    """(time of the last step still below `level` bytes, time of the first step at or above it)."""
    below = max(t for t, r in steps if r < level)
    above = min(t for t, r in steps if r >= level)
    return below, above


def _check_timing(event: dict[str, Any] | Any, steps: list[list[float]], level: float, interval: float) -> None:
    t = event["time"] if isinstance(event, dict) else event.time
    below, above = _crossing(steps, level)
    # never before the memory was there; at most ~two intervals (plus scheduling slack on a loaded machine)
    # after it was. The order of the crossings is checked by the callers.
    assert below - 0.02 <= t <= above + 2 * interval + 0.8, (below, t, above)


def test_warning_then_critical_headless_and_session(tmp_path: Path, store: Path) -> None:
    limit = 300 * MB
    log = tmp_path / "steps.json"
    proc = track(
        "--headless",
        "--interval",
        "0.1",
        "--mem-limit",
        "300M",
        "--warn-at",
        "50",
        "--critical-at",
        "85",
        "--",
        PY,
        "-c",
        GROW,
        str(int(0.9 * limit)),
        str(log),
        "0.5",
    )
    assert proc.returncode == 0, proc.stderr
    steps = json.loads(log.read_text())
    alert_lines = [ln for ln in proc.stderr.splitlines() if "WARNING" in ln or "CRITICAL" in ln]
    assert len(alert_lines) == 2, proc.stderr
    assert "WARNING" in alert_lines[0] and "--mem-limit" in alert_lines[0]
    assert "CRITICAL" in alert_lines[1]
    events = _session(store)["summary"]["events"]
    warn = [e for e in events if e["type"] == "warning"]
    crit = [e for e in events if e["type"] == "critical"]
    assert len(warn) == 1 and len(crit) == 1
    assert warn[0]["time"] < crit[0]["time"]
    assert warn[0]["limit"] == limit and warn[0]["resource"] == "ram"
    _check_timing(warn[0], steps, 0.50 * limit, 0.1)
    _check_timing(crit[0], steps, 0.85 * limit, 0.1)
    types = [e["type"] for e in events]
    assert types[0] == "start" and types[-1] == "stop"
    assert "process_started" in types and "process_exited" in types and "peak" in types
    exited = [e for e in events if e["type"] == "process_exited"]
    assert exited[-1]["exit_code"] == 0
    # peaks do not flood: each new peak is >= 64 MiB above the last one reported
    tree_peaks = [e["value"] for e in events if e["type"] == "peak" and "pid" not in e and e["resource"] == "ram"]
    assert len(tree_peaks) <= 6
    assert all(b - a >= ev.PEAK_STEP_BYTES for a, b in itertools.pairwise(tree_peaks))


def test_api_callback_gets_warning_then_critical(tmp_path: Path, store: Path) -> None:
    from gputop_tracker import Tracker

    limit = 300 * MB
    log = tmp_path / "steps.json"
    got: list[Any] = []
    go = tmp_path / "go"
    # the tracked tree is the workload alone (this test process's own memory would count otherwise)
    child = subprocess.Popen([PY, "-c", GROW, str(int(0.9 * limit)), str(log), "0.5", str(go)])
    tracker = Tracker(sleep_time=0.1, mem_limit="300M", warn_at=50, critical_at=85, store=store, process_id=child.pid)
    with tracker:
        tracker.on_event(got.append, types=("warning", "critical"))
        go.touch()
        assert child.wait(30) == 0
    steps = json.loads(log.read_text())
    assert [e.type for e in got] == ["warning", "critical"], got
    _check_timing(got[0], steps, 0.50 * limit, 0.1)
    _check_timing(got[1], steps, 0.85 * limit, 0.1)
    assert [e.type for e in tracker.events(type="critical")] == ["critical"]
    assert tracker.events(type="warning", since=got[1].time + 0.001) == []
    assert tracker.raw_usage.alerts.mem_limit == limit
    assert any(e.type == "warning" for e in tracker.raw_usage.events)


def _cgroup_limit_works() -> bool:
    cg = cgroups.create_job_cgroup(f"probe-{os.getpid()}")
    if cg is None:
        return False
    try:
        return cg.set_limit(100 * MB)
    finally:
        cg.remove()


@pytest.mark.skipif(not _cgroup_limit_works(), reason="cannot create a memory cgroup with a limit here")
def test_oom_kill_in_small_cgroup_writes_dump(store: Path) -> None:
    proc = track(
        "--headless", "--interval", "0.1", "--mem-limit", "200M", "--enforce-mem-limit", "--", PY, "-c", GROW_FOREVER
    )
    assert proc.returncode == 137, proc.stderr
    assert "OOM at" in proc.stderr and "OOM killer" in proc.stderr, proc.stderr
    session = _session(store)
    ooms = [e for e in session["summary"]["events"] if e["type"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["source"] == "kernel"
    assert "the command was killed by the kernel's OOM killer" in session["summary"]["notes"]
    dump = Path(ooms[0]["dump"])
    assert dump.parent == store and dump.is_dir()
    manifest = json.loads((dump / "manifest.json").read_text())
    assert manifest["trigger"]["type"] == "oom" and manifest["environment"]["limits"]["mem_limit"] == 200 * MB
    assert set(manifest["files"]) == {"manifest.json", "samples.jsonl", "events.json", "processes.json", "gpus.json"}
    samples = [json.loads(ln) for ln in (dump / "samples.jsonl").read_text().splitlines()]
    totals = [s["tree"]["combined_total"] for s in samples]
    assert len(samples) >= 5
    # the growth up to the kill: rising, and the last sample close to the limit
    assert totals[-1] > totals[0] + 50 * MB
    assert sum(b >= a for a, b in itertools.pairwise(totals)) >= 0.8 * (len(totals) - 1)
    assert totals[-1] >= 0.7 * 200 * MB
    procs = json.loads((dump / "processes.json").read_text())
    assert any(p["pid"] == session["meta"]["pid"] and p["rss"] > 100 * MB for p in procs)
    assert any(e["type"] == "oom" for e in json.loads((dump / "events.json").read_text()))


def test_oom_counter_rise_detected_synthetic(tmp_path: Path) -> None:
    """Where no cgroup can be made: SIGKILL plus a synthetic cgroup counter (what OomCounters reads)."""
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    counters = ev.OomCounters(tmp_path, "v1")
    assert counters.rose() is None
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    assert counters.rose() == "cgroup memory.oom_control oom_kill 3 -> 4"
    assert counters.rose() is None


def test_cuda_oom_in_output_writes_dump_and_output_untouched(store: Path) -> None:
    code = (
        "import sys, time\n"
        "x = bytearray(50_000_000); x[::4096] = b'1' * len(x[::4096])\n"
        "print('step 1', flush=True); time.sleep(0.5)\n"
        "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr, flush=True)\n"
        "time.sleep(0.3); sys.exit(1)\n"
    )
    proc = track("--headless", "--interval", "0.1", "--watch-output", "--", PY, "-c", code)
    assert proc.returncode == 1
    assert proc.stdout == "step 1\n"
    assert "torch.OutOfMemoryError: CUDA out of memory" in proc.stderr
    ooms = [e for e in _session(store)["summary"]["events"] if e["type"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["source"] == "output" and "CUDA out of memory" in ooms[0]["message"]
    dump = Path(ooms[0]["dump"])
    samples = (dump / "samples.jsonl").read_text().splitlines()
    assert max(json.loads(s)["tree"]["combined_total"] for s in samples) >= 50 * MB
    # command lines and the job's output: the user's alone, whatever the umask (was 0755 / 0644)
    assert dump.stat().st_mode & 0o777 == 0o700
    assert {f.stat().st_mode & 0o777 for f in dump.iterdir()} == {0o600}


def test_no_watch_output_no_oom_from_output(store: Path) -> None:
    proc = track("--headless", "--", PY, "-c", "print('CUDA out of memory')")
    assert proc.returncode == 0 and proc.stdout == "CUDA out of memory\n"
    assert not [e for e in _session(store)["summary"]["events"] if e["type"] == "oom"]


def test_api_capture_oom_writes_dump(store: Path) -> None:
    from gputop_tracker import Tracker

    tracker = Tracker(sleep_time=0.1, store=store)
    samples: list[Any] = []
    tracker.on_sample(samples.append)
    with tracker:
        hold = bytearray(30 * MB)
        hold[::4096] = b"1" * len(hold[::4096])
        deadline = time.monotonic() + 60
        while len(samples) < 3:  # for the dump's samples
            assert time.monotonic() < deadline, len(samples)
            time.sleep(0.05)
        with pytest.raises(MemoryError), tracker.capture_oom():
            raise MemoryError("simulated: could not allocate")
        with tracker.capture_oom():
            pass  # no exception: nothing recorded
    assert tracker.last_oom is not None and tracker.last_oom.source == "api"
    dump = Path(tracker.last_oom.dump or "")
    manifest = json.loads((dump / "manifest.json").read_text())
    assert "MemoryError: simulated" in manifest["trigger"]["message"]
    assert (dump / "samples.jsonl").read_text().count("\n") >= 3
    assert len(tracker.events(type="oom")) == 1
    del hold


def test_is_oom_exception() -> None:
    class OutOfMemoryError(RuntimeError):  # torch.OutOfMemoryError's name
        pass

    assert ev.is_oom_exception(MemoryError())
    assert ev.is_oom_exception(OutOfMemoryError("CUDA out of memory"))
    assert ev.is_oom_exception(RuntimeError("CUDA error: out of memory"))
    assert not ev.is_oom_exception(RuntimeError("shape mismatch"))
    assert not ev.is_oom_exception(ValueError("out of memory"))


def test_dump_pruning_keeps_newest(tmp_path: Path) -> None:
    for i in range(4):
        d = tmp_path / f"s{i}.oom-1"
        d.mkdir()
        (d / "samples.jsonl").write_bytes(b"x" * 1000)
        os.utime(d, (1000 + i, 1000 + i))
    ev.prune_dumps(tmp_path, keep=3, max_bytes=10_000)
    assert sorted(p.name for p in ev.dump_dirs(tmp_path)) == ["s1.oom-1", "s2.oom-1", "s3.oom-1"]
    ev.prune_dumps(tmp_path, keep=3, max_bytes=2500)
    assert sorted(p.name for p in ev.dump_dirs(tmp_path)) == ["s2.oom-1", "s3.oom-1"]


LEAKY_AND_FLAT = r"""
import os, time
flat = bytearray(100_000_000); flat[::4096] = b"1" * len(flat[::4096])
if os.fork() == 0:
    chunks = []
    for _ in range(40):
        b = bytearray(5_000_000); b[::4096] = b"1" * len(b[::4096]); chunks.append(b)
        time.sleep(0.1)
    os._exit(0)
os.wait()
"""


def test_leak_hint_flags_growing_not_flat(store: Path) -> None:
    proc = track("--headless", "--interval", "0.1", "--", PY, "-c", LEAKY_AND_FLAT)
    assert proc.returncode == 0, proc.stderr
    summary = _session(store)["summary"]
    procs = {p["role"]: p for p in summary["processes"] if p["name"].startswith("python")}
    grower, flat = procs["descendant"], procs["main"]
    assert grower["leak_suspected"] and grower["rss_r2"] > 0.9
    assert 30 * MB < grower["rss_slope"] < 70 * MB  # 5 MB every 0.1 s
    assert not flat["leak_suspected"]
    assert [s["pid"] for s in summary["leak_suspects"]] == [grower["pid"]]
    assert "possible leak" in proc.stderr


def test_sessions_events_export(store: Path) -> None:
    assert track("--headless", "--", PY, "-c", "pass").returncode == 0
    sid = _session(store)["meta"]["id"]
    text = track("sessions", "events", sid)
    assert text.returncode == 0 and "start" in text.stdout and "stop" in text.stdout
    js = track("sessions", "events", sid, "-f", "json", "-t", "stop")
    assert [e["type"] for e in json.loads(js.stdout)] == ["stop"]
    csv = track("sessions", "events", sid, "-f", "csv")
    assert csv.stdout.splitlines()[0].startswith("time,elapsed,type,message")
    full = json.loads(track("sessions", "export", sid, "-f", "json").stdout)
    assert next(e["type"] for e in full["summary"]["events"]) == "start"
    bad = track("sessions", "events", sid, "-t", "nope")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--warn-at", "90", "--critical-at", "80"],
        ["--warn-at", "0"],
        ["--critical-at", "120"],
        ["--mem-limit", "lots"],
        ["--mem-limit", "-5G"],
        ["--enforce-mem-limit"],
        ["--oom-dumps", "-1"],
    ],
)
def test_bad_alert_flags_exit_2(args: list[str]) -> None:
    proc = track("--headless", *args, "--", "true")
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_old_session_without_events_loads() -> None:
    s = Session.model_validate({"meta": {"id": "x"}, "summary": {"max_ram": {}}})
    assert s.events == [] and s.summary is not None and s.summary.leak_suspects == []


def test_level_watch_hysteresis_and_rearm() -> None:
    w = ev.LevelWatch(80, 95)
    assert w.check(50, 0) == 0
    assert w.check(81, 1) == 1
    assert w.check(79, 2) == 0  # hovering at the line: no new event
    assert w.check(82, 3) == 0
    assert w.check(96, 4) == 2
    assert w.check(10, 5) == 0
    assert w.check(85, 10) == 0  # crossed again within REARM_SECONDS: not repeated
    assert w.check(10, 20) == 0
    assert w.check(85, 20 + ev.REARM_SECONDS) == 1


async def test_live_view_shows_alerts() -> None:
    """The live view: an alert colours the header (worst so far) and notifies; peaks stay quiet."""
    import asyncio

    from fakesource import FakeSource
    from textual.widgets import Static

    from gputop_tracker.core.model.models import Event
    from gputop_tracker.core.sampling.channel import EventMessage
    from gputop_tracker.tui.live.app import LiveApp

    src = FakeSource(3)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=(160, 50)) as pilot:
        src.push(EventMessage(Event(time=1.0, type="peak", message="tree RAM peak 100 MB")))
        src.push(EventMessage(Event(time=2.0, type="warning", message="RAM 81% of --mem-limit")))
        for _ in range(300):
            if app.alert == "warning":
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        assert app.alert == "warning" and "WARNING" in str(app.query_one("#header", Static).content)
        src.push(EventMessage(Event(time=3.0, type="critical", message="RAM 96% of --mem-limit")))
        src.push(EventMessage(Event(time=4.0, type="warning", message="GPU 0 memory 81%")))
        for _ in range(300):
            if app.n_messages >= 8:
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        assert app.alert == "critical"  # a later, milder alert does not lower it
        assert "CRITICAL" in str(app.query_one("#header", Static).content)
        assert [n.title for n in app._notifications] == ["WARNING", "CRITICAL", "WARNING"]


def test_history_detail_lists_events(store: Path) -> None:
    from gputop_tracker.core.report import render as report
    from gputop_tracker.core.store import sessions as st

    assert (
        track(
            "--headless",
            "--mem-limit",
            "10M",
            "--",
            PY,
            "-c",
            "x = bytearray(30_000_000); import time; time.sleep(0.6)",
        ).returncode
        == 0
    )
    entry = st.load(next(store.glob("*.json")))
    assert entry.session is not None
    lines = report.events_lines(entry.session.events)
    assert any("critical" in ln and "--mem-limit" in ln for ln in lines)
    text = report.to_text(entry.session.summary)  # type: ignore[arg-type]
    assert "Alerts (" in text and "critical" in text


def test_gpu_memory_levels_and_gpu_lost() -> None:
    """GPU memory against the GPU's total, through SummaryBuilder with plain GpuReadings (no GPU needed)."""
    from gputop_tracker.core.gpu import GpuReading
    from gputop_tracker.core.summary.builder import SummaryBuilder

    b = SummaryBuilder(main_pid=1, command=["x"], mode="launch", interval=0.5, start_time=100.0)
    total = 80 * 10**9
    for i, (used, lost) in enumerate([(10, False), (70, False), (79, False), (79, True)]):
        g = GpuReading(index=0, uuid="GPU-0", name="fake", memory_total=total, memory_used=used * 10**9, lost=lost)
        b.add(101.0 + i, [], [g], (64 * 10**9, 1 * 10**9, 0.0))
    kinds = [(e["type"], e.get("resource")) for e in b.events.events if e["type"] in ev.ALERT_TYPES]
    assert kinds == [("warning", "gpu0"), ("critical", "gpu0"), ("gpu_lost", "gpu0")]
    assert b.summary()["events"][0]["percent"] == 87.5


def test_the_report_and_the_front_end_know_the_same_alerts() -> None:
    """The report's copy (what the headless front end prints, without loading the sampler's modules)."""
    from gputop_tracker.core.report import render

    assert render.ALERT_TYPES == ev.ALERT_TYPES


# The machine-wide oom_kill counter (a fake /proc/vmstat) rises while the command runs, once the sampler has
# read its baseline; the command either exits normally (an unrelated OOM elsewhere: not ours) or is SIGKILLed
# soon after (ours).
MACHINE_OOM = r"""
import json, os, sys, threading, time
from pathlib import Path
from gputop_tracker.core.summary import events as ev
from gputop_tracker.core.sampling import sampler
fake = Path(sys.argv[2])
fake.write_text("pgfault 1\noom_kill 7\n")
orig = ev.OomCounters
baseline_read = threading.Event()
def counters(d, v):
    c = orig(d, v, machine=fake)
    baseline_read.set()
    return c
sampler.ev.OomCounters = counters
def bump():
    assert baseline_read.wait(60)
    fake.write_text("pgfault 1\noom_kill 8\n")
threading.Thread(target=bump, daemon=True).start()
r, w = os.pipe()
cfg = sampler.EngineConfig(mode="launch", argv=["sh", "-c", sys.argv[3]], interval=0.1, store=sys.argv[1],
                           use_cgroup=False)
code = sampler.Engine(cfg, w).run()
os.close(w)
data = os.read(r, 1 << 22)
s = [json.loads(ln) for ln in data.splitlines() if ln.startswith(b'{"kind":"summary"')][-1]["summary"]
print(json.dumps({"code": code, "ooms": [e for e in s["events"] if e["type"] == "oom"], "notes": s["notes"]}))
"""


@pytest.mark.parametrize(("cmd", "ours"), [("sleep 0.6 & wait; sleep 0.4", False), ("sleep 0.3; kill -9 $$", True)])
def test_machine_wide_oom_counter_needs_a_sigkill_of_ours(tmp_path: Path, cmd: str, ours: bool) -> None:
    proc = subprocess.run(
        [PY, "-c", MACHINE_OOM, str(tmp_path / "store"), str(tmp_path / "vmstat"), cmd],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    note = "the command was killed by the kernel's OOM killer"
    if ours:
        assert out["code"] == 137 and len(out["ooms"]) == 1 and note in out["notes"], out
    else:
        assert out["code"] == 0 and out["ooms"] == [] and note not in out["notes"], out


@pytest.mark.skipif(not _cgroup_limit_works(), reason="cannot create a memory cgroup with a limit here")
def test_unrelated_real_oom_kill_is_not_ours(tmp_path: Path, store: Path) -> None:
    """A hog OOM-killed in a small cgroup of its own while a normal run is tracked: no OOM event, no dump."""
    hog_cg = cgroups.create_job_cgroup(f"testhog-{os.getpid()}")
    assert hog_cg is not None and hog_cg.set_limit(50 * MB)
    out, go = tmp_path / "out.json", tmp_path / "go"
    try:
        run = subprocess.Popen(
            cli(
                *json_report_to(out, "--interval", "0.1", "--", "sh", "-c"),
                f"(while [ ! -e {go} ]; do sleep 0.05; done) & wait; sleep 0.5",  # a child, then main alone
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _first_checkpoint(store)  # tracked and sampled: the hog's kill happens while the run is tracked
        join = hog_cg.join_fd()
        hog = subprocess.run(
            [PY, "-c", GROW_FOREVER], preexec_fn=lambda: os.write(join, str(os.getpid()).encode()), timeout=60
        )
        os.close(join)
        assert hog.returncode == -9
        go.touch()
        _stdout, stderr = run.communicate(timeout=60)
    finally:
        go.touch()
        hog_cg.remove()
    assert run.returncode == 0, stderr
    assert "OOM" not in stderr, stderr
    summary = json.loads(out.read_text())
    assert not [e for e in summary["events"] if e["type"] == "oom"]
    assert not [n for n in summary["notes"] if "OOM killer" in n]
    assert not ev.dump_dirs(store)


def test_an_oom_dump_holds_gpu_readings_with_sets() -> None:
    """A GPU reading's attributed pids (a frozenset) made the OOM dump's JSON fail, and with it the whole run's
    tracking ("tracking failed (TypeError …)", seen with --simulate-gpus and an OOM message)."""
    from types import SimpleNamespace

    from gputop_tracker.core.sampling.oomdump import dump_gpus

    reading = SimpleNamespace(index=0, attributed_pids=frozenset({7, 3}), process_memory={}, processes=[{"pid": 3}])
    (gpu,) = dump_gpus([reading])
    assert gpu["attributed_pids"] == [3, 7] and "process_memory" not in gpu
    json.dumps(gpu)
