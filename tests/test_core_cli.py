"""The headless CLI against real processes: exit codes, argv, signals, attach, reports and sessions."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    WORKLOADS,
    cli,
    json_report_to,
    kernel_figures,
    sigint_default,
    track,
    track_json,
    track_workload,
    workload_command,
)

PY = sys.executable

GPU_TRACKER_FIELDS = {
    "max_ram": {"unit", "system_capacity", "system", "main", "descendants", "combined"},
    "max_gpu_ram": {"unit", "system_capacity", "system", "main", "descendants", "combined"},
    "cpu_utilization": {
        "system_core_count",
        "n_expected_cores",
        "system",
        "main",
        "descendants",
        "combined",
        "main_n_threads",
        "descendants_n_threads",
        "combined_n_threads",
    },
    "gpu_utilization": {"system_gpu_count", "n_expected_gpus", "gpu_percentages"},
    "compute_time": {"unit", "time"},
}
PERCENT_FIELDS = {"max_sum_percent", "max_hardware_percent", "mean_sum_percent", "mean_hardware_percent"}

# waits for the file argv[1] to exist, then exits 0: a command that lives exactly as long as the test wants
WAITS_FOR_GO = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.02)\n"


def first_checkpoint(store: Path, timeout: float = 60) -> dict:
    """The session the sampler saves right after its first sample (status `running`): sampling runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for f in store.glob("*.json"):
            try:
                session = json.loads(f.read_text())
            except (OSError, ValueError):
                continue  # being replaced
            if session["summary"]["n_samples"] >= 1:
                return dict(session)
        time.sleep(0.05)
    raise AssertionError(f"no session checkpoint in {store} after {timeout} s")


def test_false_exits_1() -> None:
    assert track("--headless", "--", "false").returncode == 1


def test_exit_code_passed_through() -> None:
    assert track("--headless", "--", "sh", "-c", "exit 7").returncode == 7


def test_missing_command_is_127_with_one_line() -> None:
    proc = track("--headless", "--", "no-such-command-xyz")
    assert proc.returncode == 127
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no-such-command-xyz" in lines[0] and "not found" in lines[0]
    assert "Traceback" not in proc.stderr


def test_an_executable_script_without_shebang_runs_as_a_shell_would_run_it(tmp_path: Path) -> None:
    """A shell, `env` and execvp() run an executable text file without `#!` with /bin/sh; gputop-track said
    `cannot run: Exec format error` and exit 126. Found on PATH too; a binary one stays an error (126)."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "no-shebang-job"
    script.write_text('echo "args: $1 $2"\nexit 7\n')
    script.chmod(0o755)
    proc = track("--headless", "--no-save", "--", str(script), "a", "b c")
    assert (proc.returncode, proc.stdout) == (7, "args: a b c\n"), proc.stderr
    path = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    assert track("--headless", "--no-save", "--", "no-shebang-job", env={"PATH": path}).returncode == 7
    foreign = tmp_path / "foreign-binary"
    foreign.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(56))
    foreign.chmod(0o755)
    proc = track("--headless", "--no-save", "--", str(foreign))
    assert proc.returncode == 126 and proc.stderr == f"gputop-track: {foreign}: cannot run: Exec format error\n"


def test_argv_kept_exactly_and_stdout_untouched() -> None:
    proc = track("--headless", "--", PY, "-c", "import sys; print('a b'); print(sys.argv[1:])", "x  y", "'q'")
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["a b", "['x  y', \"'q'\"]"]


def test_stdin_passed_through() -> None:
    proc = track("--headless", "--", PY, "-c", "import sys; print(sys.stdin.read().upper())", input="hello\n")
    assert proc.stdout.strip() == "HELLO"


def test_killed_by_signal_is_128_plus_n() -> None:
    assert track("--headless", "--", "sh", "-c", "kill -9 $$").returncode == 137


def test_json_report_has_every_gpu_tracker_field(tmp_path: Path) -> None:
    proc, report = track_json(tmp_path, "--", "true")
    assert proc.returncode == 0
    for section, keys in GPU_TRACKER_FIELDS.items():
        assert keys <= set(report[section]), section
    for part in ("main", "descendants", "combined"):
        assert set(report["max_ram"][part]) == {"total_rss", "private_rss", "shared_rss", "lower", "upper"}
    for part in ("system", "main", "descendants", "combined"):
        assert set(report["cpu_utilization"][part]) == PERCENT_FIELDS
    assert set(report["gpu_utilization"]["gpu_percentages"]) == PERCENT_FIELDS
    for key in ("cpu_time", "gpus", "command", "exit_code", "start_time", "end_time", "host", "interval"):
        assert key in report
    assert report["n_samples"] >= 1
    assert isinstance(report["schema_version"], int)
    assert report["tool_version"]
    assert report["command"] == ["true"]


def test_peak_of_500mb_child_within_2_percent_of_kernel(tmp_path: Path) -> None:
    k = tmp_path / "kernel.json"
    proc, report = track_json(tmp_path, "--", PY, WORKLOADS, "hold", str(k), "500", "3")
    assert proc.returncode == 0, proc.stderr
    kernel = kernel_figures(k)["self_maxrss"]
    combined = report["max_ram"]["combined"]["total_rss"]
    main = report["max_ram"]["main"]["total_rss"]
    assert combined == pytest.approx(kernel, rel=0.02)
    assert main == pytest.approx(kernel, rel=0.02)
    # private is the 500 MB the child wrote; shared is what is left of its RSS
    assert report["max_ram"]["main"]["private_rss"] >= 500e6
    assert report["sources"]["max_ram.main.total_rss"].startswith("exact")


def test_no_gpu_is_reported_without_traceback(tmp_path: Path) -> None:
    proc = track("--headless", "--", "true")
    assert proc.returncode == 0
    assert "GPU" in proc.stderr and "no " in proc.stderr.lower()
    assert "Traceback" not in proc.stderr
    _, report = track_json(tmp_path, "--", "true")
    assert report["gpus"] == [] and report["gpu_utilization"]["system_gpu_count"] == 0
    assert report["gpu_note"]


def test_text_report_goes_to_stderr_and_lists_figures() -> None:
    proc = track("--headless", "--", PY, "-c", "print('out')")
    assert proc.stdout == "out\n"
    for word in ("RAM (peaks)", "combined", "CPU time", "threads", "GPU", "Session saved"):
        assert word in proc.stderr


def test_json_to_stdout_stays_valid_json() -> None:
    proc = track(
        "--headless", "-f", "json", "--", PY, "-c", "print('noise on stdout'); import sys; print('e', file=sys.stderr)"
    )
    assert proc.returncode == 0
    report = json.loads(proc.stdout)  # the command's stdout went to stderr
    assert "max_ram" in report
    assert "noise on stdout" in proc.stderr


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_is_forwarded_and_report_still_written(tmp_path: Path, store: Path, sig: int, code: int) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        cli(*json_report_to(out, "--interval", "0.1", "--", "sleep", "30")),
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    checkpoint = first_checkpoint(store)  # the command runs and is being sampled
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    report = json.loads(out.read_text())
    assert report["exit_signal"] == sig and report["exit_code"] == code
    # the report holds the samples taken before the signal, and the last one after it
    assert report["n_samples"] > checkpoint["summary"]["n_samples"] >= 1
    sessions = list(store.glob("*.json"))
    assert len(sessions) == 1
    assert json.loads(sessions[0].read_text())["meta"]["status"] == "finished"


def test_attach_follows_tree_and_stops_within_one_interval(tmp_path: Path, store: Path) -> None:
    k, go, out = tmp_path / "k.json", tmp_path / "go", tmp_path / "report.json"
    target = subprocess.Popen([PY, WORKLOADS, "hold_until", str(k), "150", str(go)])
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{k}.ready").exists():  # the 150 MB are held
            assert time.monotonic() < deadline and target.poll() is None, "the workload never got ready"
            time.sleep(0.05)
        proc = subprocess.Popen(
            [PY, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(out), "--ru", "bytes", "--tu",
             "seconds", "--interval", "0.5", "--attach", str(target.pid)],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        first_checkpoint(store)  # attached and sampling
        go.touch()
        target.wait(timeout=60)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        ended_after_exit = time.monotonic() - t0
    finally:
        go.touch()
        target.kill()
        target.wait()
    assert proc.returncode == 0, err
    report = json.loads(out.read_text())
    figures = kernel_figures(k)
    assert report["mode"] == "attach" and report["pid"] == target.pid
    assert report["max_ram"]["main"]["total_rss"] == pytest.approx(figures["self_maxrss"], rel=0.02)
    # tracking ends within an interval of the target's exit (plus scheduling slack), never before it
    assert figures["exit_time"] <= report["end_time"] < figures["exit_time"] + 0.5 + 0.5
    # and the tool then ends: never waits for anything else (the start-up and the save are load-dependent)
    assert ended_after_exit < 30


def test_attach_errors_are_one_line_exit_2() -> None:
    for pid in ("999999999", "0", "-5", "abc"):
        proc = track("--headless", "--attach", pid)
        assert proc.returncode == 2, (pid, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1
        assert "Traceback" not in proc.stderr


def test_attach_to_a_thread_id_is_one_line_naming_the_process(tmp_path: Path) -> None:
    """A process whose second thread prints its TID (as `top -H` shows it), then waits for stdin to close."""
    code = (
        "import sys, threading\n"
        "t = threading.Thread(target=lambda: (print(threading.get_native_id(), flush=True), sys.stdin.read()))\n"
        "t.start(); t.join()\n"
    )
    job = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        tid = int(job.stdout.readline())
        proc = track("--headless", "--no-save", "--attach", str(tid), timeout=30)
    finally:
        assert job.stdin is not None
        job.stdin.close()
        job.wait(10)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"gputop-track: error: {tid} is a thread of process {job.pid}, not a process: attach to {job.pid}\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--ru", "parsecs", "--", "true"],
        ["--interval", "0.001", "--", "true"],
        ["--interval", "abc", "--", "true"],
        [],
        ["-f", "xml", "--", "true"],
        ["--attach", "1", "--", "true"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str]) -> None:
    proc = track("--headless", *args)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("gputop-track: error:")


def test_unwritable_output_still_reports(tmp_path: Path) -> None:
    proc = track("--headless", "-o", str(tmp_path / "missing" / "r.json"), "--", "true")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_units_convert(tmp_path: Path) -> None:
    k = tmp_path / "k.json"
    out = tmp_path / "r.json"
    proc = track(
        *json_report_to(out, "--ru", "megabytes", "--tu", "minutes", "--"),
        *workload_command("hold", str(k), "100", "0.5"),
    )
    assert proc.returncode == 0
    r = json.loads(out.read_text())
    assert r["max_ram"]["unit"] == "megabytes" and r["compute_time"]["unit"] == "minutes"
    assert r["max_ram"]["main"]["total_rss"] == pytest.approx(kernel_figures(k)["self_maxrss"] / 1e6, rel=0.02)
    assert 0.4 / 60 < r["compute_time"]["time"] < 5 / 60


def test_cpu_seconds_of_a_burner_match_rusage(tmp_path: Path) -> None:
    proc, r, k = track_workload(tmp_path, "0.2", "burner", "1.0")
    assert proc.returncode == 0
    kernel = kernel_figures(k)["cpu_self"]
    assert r["cpu_time"]["total"] == pytest.approx(kernel, rel=0.02, abs=0.03)
    assert r["cpu_time"]["source"] == "exact"
    # sampled percentages: some interval is at least as busy as the run on average (whatever the load)
    assert r["cpu_utilization"]["main"]["max_sum_percent"] >= 0.8 * r["cpu_time"]["mean_percent"] > 0


def test_sessions_commands(tmp_path: Path, store: Path) -> None:
    proc = track("--headless", "--", "sh", "-c", "sleep 0.3; exit 3")
    assert proc.returncode == 3
    (session_file,) = store.glob("*.json")
    sid = session_file.stem
    listing = track("sessions", "list")
    assert listing.returncode == 0 and sid in listing.stdout and "sleep 0.3" in listing.stdout
    show = track("sessions", "show", sid[:20], "-f", "json", "--ru", "bytes")
    assert show.returncode == 0 and json.loads(show.stdout)["exit_code"] == 3
    csv_out = tmp_path / "t.csv"
    exp = track("sessions", "export", sid, "-f", "csv", "-o", str(csv_out))
    assert exp.returncode == 0
    header, *rows = csv_out.read_text().splitlines()
    assert header.startswith("time,elapsed,combined_total") and len(rows) >= 1
    exp_json = track("sessions", "export", sid, "-f", "json")
    assert json.loads(exp_json.stdout)["meta"]["id"] == sid
    assert track("sessions", "show", "nope").returncode == 2
    assert track("sessions", "delete", sid).returncode == 0
    assert not list(store.glob("*.json"))


def test_a_command_that_ended_before_any_sample_lists_no_peak_ram(store: Path) -> None:
    """`sh -c 'exit 3'` ends before the first sample reads it: the list shows "-" (JSON null), not a 0 B that
    would read as measured; the text report likewise."""
    proc = track("--headless", "--", "sh", "-c", "exit 3")
    assert proc.returncode == 3
    if "0 processes seen" not in proc.stderr:
        pytest.skip("a sample read it before it ended (a slow machine): nothing to check")
    assert re.search(r"^  main +- +- +- ", proc.stderr, re.MULTILINE), proc.stderr
    (session_file,) = store.glob("*.json")
    listed = json.loads(track("sessions", "list", "-f", "json").stdout)
    (item,) = [i for i in listed if i["id"] == session_file.stem]
    assert item["peak_ram_bytes"] is None
    row = next(line for line in track("sessions", "list").stdout.splitlines() if session_file.stem in line)
    assert "exit 3" in row and " 0 B " not in row and re.search(r" 3 +- +- ", row), row


def test_corrupt_session_is_listed_not_fatal(store: Path) -> None:
    store.mkdir(parents=True)
    (store / "20250101-000000-x-1-aaaa.json").write_text('{"schema_version": 1, "meta": {"id": "x"')
    (store / "20250101-000001-x-1-bbbb.json").write_text('{"schema_version": 99, "meta": {"id": "y"}}')
    listing = track("sessions", "list")
    assert listing.returncode == 0
    assert "corrupt or truncated" in listing.stdout and "newer gputop-tracker" in listing.stdout
    show = track("sessions", "show", "20250101-000000")
    assert show.returncode == 2 and "unreadable" in show.stderr


@pytest.mark.slow  # 50 tracked runs at once: ~20-45 s on 2 cores
def test_fifty_concurrent_runs_lose_nothing(store: Path) -> None:
    """Fifty runs save into one store at once: every session is written whole, under its own id."""
    procs = [
        subprocess.Popen(
            [PY, "-m", "gputop_tracker", "--headless", "--", "sh", "-c", f"exit {i % 5}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(50)
    ]
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [i % 5 for i in range(50)]
    files = list(store.glob("*.json"))
    assert len(files) == 50
    ids = set()
    for f in files:
        data = json.loads(f.read_text())
        assert data["meta"]["status"] == "finished"
        ids.add(data["meta"]["id"])
    assert len(ids) == 50
    assert not list(store.glob(".*tmp"))


def test_no_save_writes_no_session(store: Path) -> None:
    assert track("--headless", "--no-save", "--", "true").returncode == 0
    assert not store.exists() or not list(store.glob("*.json"))


def test_front_end_killed_sampler_still_saves_session(store: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    proc = subprocess.Popen(
        [PY, "-m", "gputop_tracker", "--headless", "--interval", "0.1", "--", PY, "-c", WAITS_FOR_GO, str(go)],
        stderr=subprocess.DEVNULL,
    )
    start = first_checkpoint(store)["meta"]["start_time"]  # the sampler runs
    proc.kill()  # the front end dies; the sampler and the command go on
    proc.wait()
    ended = time.time()
    go.touch()  # the command ends only now
    deadline = time.monotonic() + 60
    data: dict = {}
    while time.monotonic() < deadline:
        files = list(store.glob("*.json"))
        try:
            data = json.loads(files[0].read_text()) if files else {}
        except (OSError, ValueError):
            data = {}  # being replaced
        if data and data["meta"]["status"] == "finished":
            break
        time.sleep(0.2)
    assert data["meta"]["status"] == "finished" and data["summary"]["exit_code"] == 0, data
    # tracked on alone until the command's end, after the front end died, and says so
    assert data["summary"]["compute_time"]["time"] >= ended - start
    assert any(f"front end (PID {proc.pid}) died" in n for n in data["summary"]["notes"]), data["summary"]["notes"]


def test_sighup_is_forwarded(tmp_path: Path, store: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [PY, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(out), "--", "sleep", "30"],
        stderr=subprocess.PIPE,
        text=True,
    )
    first_checkpoint(store)  # the command runs and is being sampled
    proc.send_signal(signal.SIGHUP)
    proc.communicate(timeout=60)
    assert proc.returncode == 129
    assert json.loads(out.read_text())["exit_signal"] == signal.SIGHUP


def test_readers_ignore_unknown_keys(store: Path) -> None:
    assert track("--headless", "--", "true").returncode == 0
    (f,) = store.glob("*.json")
    data = json.loads(f.read_text())
    data["from_the_future"] = {"x": 1}
    data["summary"]["new_figure"] = 42
    data["meta"]["new_meta"] = "y"
    f.write_text(json.dumps(data))
    show = track("sessions", "show", f.stem, "-f", "json")
    assert show.returncode == 0, show.stderr
    assert "new_figure" not in json.loads(show.stdout)


COUNT_SIGTERMS = """
import signal, sys, time
n = 0
def on_term(*_):
    global n
    n += 1
    print(f"SIGTERM {n}", flush=True)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
deadline, first = time.monotonic() + 60, None
while time.monotonic() < deadline:
    if n and first is None:
        first = time.monotonic()
    if first is not None and time.monotonic() > first + 2:  # 2 s for a second one to arrive
        break
    time.sleep(0.05)
sys.exit(0)
"""


def test_signal_to_our_process_group_reaches_the_command_once() -> None:
    """`timeout`, `kill -TERM -PGID`: the whole group is signalled; the command must see it once, not twice."""
    proc = subprocess.Popen(
        [PY, "-m", "gputop_tracker", "--headless", "--no-save", "--", PY, "-c", COUNT_SIGTERMS],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"  # the command runs, its handler in place
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert out.count("SIGTERM") == 1, out
    assert proc.returncode == 0


def test_the_text_report_says_the_time_unit_and_names_python_children_that_sent_no_report() -> None:
    """`--tu` changed the wall time but not the CPU line; "1 Python processes"; and a Python child whose
    environment lost PYTHONPATH (so no probe) was named only in the JSON (`probe.python_unreported`)."""
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.8)'], env={})"
    proc = track("--headless", "--no-save", "--tu", "minutes", "--interval", "0.1", "--", PY, "-c", child)
    assert proc.returncode == 0, proc.stderr
    cpu = next(line for line in proc.stderr.splitlines() if "CPU time" in line)
    assert re.search(r"user [0-9.]+ minutes \+ system [0-9.]+ minutes = [0-9.]+ minutes", cpu), cpu
    assert "probe           on: 1 Python process reported its peak at exit" in proc.stderr, proc.stderr
    assert re.search(
        r"PID \d+ \(python[0-9.]*\): Python that sent no report \(its environment lost PYTHONPATH", proc.stderr
    ), proc.stderr


def test_sessions_list_marks_simulated_gpus_and_byte_counts_are_whole_numbers(store: Path) -> None:
    """`sessions list -f json` and the CSV export gave byte counts as floats (43876352.0); `sessions list` had no
    mark for a session whose GPUs were simulated (a demo's figures)."""
    assert track("--headless", "--simulate-gpus", "1", "--interval", "0.1", "--", "sleep", "0.5").returncode == 0
    assert track("--headless", "--interval", "0.1", "--", "sleep", "0.3").returncode == 0
    listed = json.loads(track("sessions", "list", "-f", "json").stdout)
    sim, real = sorted(listed, key=lambda item: not item["simulated_gpus"])
    assert sim["simulated_gpus"] is True and real["simulated_gpus"] is False
    assert type(sim["peak_ram_bytes"]) is int and type(sim["peak_gpu_ram_bytes"]) is int, sim
    assert type(real["peak_ram_bytes"]) is int and real["peak_gpu_ram_bytes"] is None, real
    rows = {line.split()[0]: line for line in track("sessions", "list").stdout.splitlines()[1:]}
    assert "[sim] sleep 0.5" in rows[sim["id"]] and "[sim]" not in rows[real["id"]]
    header, *lines = track("sessions", "export", sim["id"], "-f", "csv").stdout.splitlines()
    columns = header.split(",")
    for line in lines:
        cells = dict(zip(columns, line.split(","), strict=True))
        for name in ("combined_total", "main_rss", "threads", "n_processes", "gpu_memory", "gpu0_memory"):
            assert cells[name].isdigit(), (name, line)
