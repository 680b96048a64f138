"""Bad input, odd outputs and a failing stdout: one line and exit 2 for bad input, nothing measured lost."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import killed_if_running, symlinked_file, track

from gputop_tracker.cli.relay import SI_KERNEL, SignalRelay
from gputop_tracker.core.store import sessions as store_mod

PY = sys.executable


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("gputop-track: error:"), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--interval", "nan"],
        ["--interval", "inf"],
        ["--interval", "1e9"],
        ["--oom-window", "inf"],
        ["--oom-window", "nan"],
        ["--oom-window", "-1"],
        ["--oom-dump-mb", "nan"],
        ["--oom-dump-mb", "inf"],
        ["--oom-dumps", "-1"],
        ["--mem-limit", "1e400"],
        ["--mem-limit", "-4G"],
        ["--mem-limit", "nan"],
        ["--warn-at", "-5"],
        ["--warn-at", "nan"],
        ["--critical-at", "nan"],
        ["--critical-at", "inf"],
        ["--nec", "0"],
        ["--simulate-gpus", "-1"],
        ["--simulate-gpus", "100000"],
    ],
)
def test_numeric_flags_must_be_finite_and_in_range(args: list[str]) -> None:
    _one_error_line(track("--headless", *args, "--", "true"))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--gpus", "0\n1"], "--gpus"),
        (["--gpus", "ü€"], "--gpus"),
        (["--gpus", "nan"], "--gpus"),
        (["--gpus", ""], "--gpus"),
        (["--gpus", " , "], "--gpus"),
        (["--gpus", "0,\x1b[31m"], "--gpus"),
        (["--gpus", "99999999999999999999"], "--gpus"),
        (["--nec", "99999999999999999999"], "--n-expected-cores"),
        (["--nec", "1_0"], "--n-expected-cores"),
        (["--nec", "٣"], "--n-expected-cores"),
        (["--nec", "4\n"], "--n-expected-cores"),
        (["--oom-dumps", "99999999999999999999"], "--oom-dumps"),
        (["--simulate-gpus", "99999999999999999999"], "--simulate-gpus"),
        (["--mem-limit", ""], "--mem-limit"),
        (["--mem-limit", "nan"], "--mem-limit"),
        (["--interval", "1_0"], "--interval"),
        (["--interval", "١"], "--interval"),
        (["--gpu-poll", "nan"], "--gpu-poll"),
        (["--oom-window", "1\n"], "--oom-window"),
        (["--store", ""], "--store"),
        (["--gru", "ü€"], "--gpu-ram-unit"),
        (["--ru", ""], "--ram-unit"),
        (["--tu", "\n"], "--time-unit"),
        (["--attach", "1_0"], "--attach"),
        (["--prometheus-textfile", "x.prom", "--prometheus-top", "99999999999999999999"], "--prometheus-top"),
    ],
)
def test_junk_flag_values_are_one_line_naming_the_flag(args: list[str], named: str) -> None:
    """Empty strings, control characters, other scripts' digits, `1_000`, NaN and absurdly large integers: each
    used to be accepted silently by some flag (`--gpus` with a newline, `ü€` or `nan`, `--nec 1e20`,
    `--mem-limit ''`: exit 0). Now one line naming the flag, exit 2, before anything starts."""
    proc = track("--headless", "--no-save", *args, *([] if args[0] == "--attach" else ["--", "true"]))
    _one_error_line(proc)
    assert named in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "--store", "", "list"],
        ["sessions", "list", "--store", ""],
        ["sessions", "export", "x", "-o", ""],
        ["advise", "--store", ""],
        ["advise", "--headroom", "1_0"],
        ["advise", "--last", "٣"],
    ],
)
def test_junk_values_of_the_other_commands_are_one_line(argv: list[str]) -> None:
    """`sessions --store ''` listed the default store (an empty name silently meant "not given")."""
    _one_error_line(track(*argv))


def test_the_gpu_list_forms_cuda_takes_are_accepted() -> None:
    from gputop_tracker.core.model import validate

    good = "0, 1,,GPU-8f3c1a2b-1111-2222-3333-444455556666,8f3c,MIG-GPU-8f3c1a2b-1111-2222-3333-444455556666/1/0,-1"
    assert validate.gpu_list("--gpus", good) == good.replace(" ", "").replace(",,", ",")
    assert (
        validate.gpu_list("--gpus", "MIG-9a2b3c4d-aaaa-bbbb-cccc-ddddeeeeffff")
        == "MIG-9a2b3c4d-aaaa-bbbb-cccc-ddddeeeeffff"
    )


def test_attach_to_an_ancestor_does_not_count_gputop_track(tmp_path: Path) -> None:
    """Attached to the shell it runs in, the front end (a descendant of that shell) is not counted. The shell
    runs it in the foreground (a `&` job of a script has SIGINT ignored, which the tool now keeps ignored); it
    is interrupted once it samples (its sampler is forked with the relayed signals blocked), not after a fixed
    sleep that a busy machine outran."""
    out = tmp_path / "att.json"
    code_file = tmp_path / "code"
    script = f"{PY} -m gputop_tracker --headless -f json -o {out} --interval 0.1 --attach $$; echo $? > {code_file}"
    shell = subprocess.Popen(
        ["bash", "-c", script],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    with killed_if_running(shell):
        deadline = time.monotonic() + 60
        front_end = sampler = None
        while sampler is None and time.monotonic() < deadline and shell.poll() is None:
            front_end = next(iter(psutil.Process(shell.pid).children()), None)
            sampler = next(iter(front_end.children()), None) if front_end is not None else None
            time.sleep(0.02)
        assert front_end is not None and sampler is not None, "the front end never started its sampler"
        time.sleep(0.5)  # a few samples of the shell
        front_end.send_signal(signal.SIGINT)
        _, err = shell.communicate(timeout=60)
    assert code_file.read_text().strip() == "130", err
    pids = {p["pid"] for p in json.loads(out.read_text())["processes"]}
    assert front_end.pid not in pids, pids
    names = {p["name"] for p in json.loads(out.read_text())["processes"]}
    assert names <= {"bash"}, names  # the shell; not the front end's python


def test_output_through_a_symlink_keeps_the_link_and_the_mode(tmp_path: Path) -> None:
    target, link = symlinked_file(tmp_path, "target.json", "old")
    proc = track("--headless", "-f", "json", "-o", str(link), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["exit_code"] == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_new_output_file_gets_umask_permissions(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    proc = subprocess.run(
        ["sh", "-c", f'umask 022; exec "$0" -m gputop_tracker --headless -f json -o {out} -- true', PY],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def _read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as f:
            into.append(f.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def test_output_to_a_fifo_is_written_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _read_fifo(fifo, got)
    proc = track("--headless", "-f", "json", "-o", str(fifo), "--", "true")
    reader.join(10)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0])["exit_code"] == 0


def _finished_session(store: Path) -> bool:
    for f in store.glob("*.json"):
        try:
            return json.loads(f.read_text())["meta"]["status"] != "running"
        except (OSError, ValueError, KeyError):
            return False
    return False


def test_output_to_a_fifo_nobody_reads_gives_way_to_ctrl_c(tmp_path: Path, store: Path) -> None:
    """`-o FIFO` with no reader waits for one, as `>` does; but a Ctrl-C did nothing (the signal thread took it
    while the main thread sat in open()): only SIGKILL ended it. Now the report goes to stderr, exit code the
    command's."""
    fifo = tmp_path / "nobody.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [PY, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(fifo), "--", "sh", "-c", "exit 3"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    with killed_if_running(proc):
        deadline = time.monotonic() + 30
        while not _finished_session(store) and time.monotonic() < deadline:
            time.sleep(0.05)
        # the run is over and saved: at once, before the front end may have read the summary (it counted then as
        # a Ctrl-C of the run's, and the report's open of the FIFO waited on for a reader, under load)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    first, report = err.split("\n", 1)
    assert first == f"gputop-track: error: cannot write {fifo}: interrupted while waiting for a reader of the FIFO; " \
        "report follows"  # fmt: skip
    assert json.loads(report[: report.rindex("}") + 1])["exit_code"] == 3


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_json_report_to_stdout_by_name_stays_valid_json(tmp_path: Path, name: str) -> None:
    """`-o -` wrote a file named `-`; `-o /dev/stdout` wrote the JSON into the pipe the command's own output
    went to. Both are stdout now, as without -o: the report alone there, the command's output on stderr."""
    proc = subprocess.run(
        [PY, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", name, "--", "echo", "from-the-command"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 0
    assert "from-the-command" in proc.stderr
    assert not (tmp_path / "-").exists()


def test_text_report_to_the_file_stdout_is_keeps_the_command_output(tmp_path: Path) -> None:
    """`gputop-track -o /dev/stdout -- cmd > log`: the report replaced log, and the command's output in it was
    lost. The report now follows that output in the file, as `2>&1` would have put it."""
    log = tmp_path / "log.txt"
    with open(log, "w") as out:
        proc = subprocess.run(
            [PY, "-m", "gputop_tracker", "--headless", "-o", "/dev/stdout", "--", "echo", "from-the-command"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert text.startswith("from-the-command\n") and "gputop-track report" in text


def test_sessions_output_dash_is_stdout(tmp_path: Path, store: Path) -> None:
    assert track("--headless", "--", "true").returncode == 0
    (session,) = store.glob("*.json")
    proc = track("sessions", "export", session.stem, "-o", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["meta"]["id"] == session.stem and not (tmp_path / "-").exists()


def test_sessions_export_and_events_to_a_fifo_and_symlink(tmp_path: Path, store: Path) -> None:
    assert track("--headless", "--", "true").returncode == 0
    (session,) = store.glob("*.json")
    sid = session.stem
    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _read_fifo(fifo, got)
    proc = track("sessions", "export", sid, "-o", str(fifo))
    reader.join(10)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and json.loads(got[0])["meta"]["id"] == sid
    target = tmp_path / "events.json"
    target.write_text("")
    link = tmp_path / "events-link.json"
    link.symlink_to(target)
    proc = track("sessions", "events", sid, "-f", "json", "-o", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and isinstance(json.loads(target.read_text()), list)


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/sys/kernel/notes").exists(), reason="root and sysfs needed")
def test_output_where_no_file_can_be_created_is_refused_before_start(tmp_path: Path) -> None:
    """As root `os.access` says yes to /sys: `-o /sys/kernel/notes` ran the command and failed only at the end.
    Now a file is created (and at once removed) where the report will be renamed into place, before start."""
    ran = tmp_path / "ran"
    proc = track("--headless", "--no-save", "-f", "json", "-o", "/sys/kernel/notes", "--", "touch", str(ran))
    assert proc.returncode == 2 and not ran.exists(), proc.stderr
    assert proc.stderr.startswith("gputop-track: error: cannot write /sys/kernel/notes: no file can be created")


def test_the_output_check_leaves_no_file_behind(tmp_path: Path) -> None:
    store_mod.check_output(str(tmp_path / "new.json"))
    (tmp_path / "old.json").write_text("kept")
    store_mod.check_output(str(tmp_path / "old.json"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]


def test_write_output_unit(tmp_path: Path) -> None:
    dev = Path("/dev/null")
    store_mod.write_output(dev, b"x")  # a device: written, not replaced (we could not replace it anyway)
    assert stat.S_ISCHR(os.stat(dev).st_mode)
    regular = tmp_path / "r"
    regular.write_bytes(b"old")
    regular.chmod(0o604)
    store_mod.write_output(regular, b"new")
    assert regular.read_bytes() == b"new" and stat.S_IMODE(regular.stat().st_mode) == 0o604
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "made")
    store_mod.write_output(dangling, b"made")
    assert dangling.is_symlink() and (tmp_path / "made").read_bytes() == b"made"


def test_broken_pipe_on_stdout_keeps_exit_code_and_session(store: Path) -> None:
    """A reader gone before the report (`| true`): as `ls | true`, nothing said; the command's exit code, the
    session saved."""
    script = '"$0" -m gputop_tracker --headless -f json -- sh -c "sleep 0.5; exit 3" | true; exit ${PIPESTATUS[0]}'
    proc = subprocess.run(["bash", "-c", script, PY], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr == ""
    assert len(list(store.glob("*.json"))) == 1


def test_full_disk_on_stdout_keeps_exit_code(store: Path) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [PY, "-m", "gputop_tracker", "--headless", "-f", "json", "--", "sh", "-c", "exit 5"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 5, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert len(list(store.glob("*.json"))) == 1


def test_sessions_broken_pipe_is_one_line(store: Path) -> None:
    for _ in range(2):
        assert track("--headless", "--", "true").returncode == 0
    script = '"$0" -m gputop_tracker sessions list > /dev/full'
    proc = subprocess.run(["bash", "-c", script, PY], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("gputop-track: error:")


def test_sessions_store_before_or_after_the_action(tmp_path: Path) -> None:
    other = tmp_path / "other-store"
    assert track("--headless", "--store", str(other), "--", "true").returncode == 0
    (session,) = other.glob("*.json")
    for args in (["sessions", "--store", str(other), "list"], ["sessions", "list", "--store", str(other)]):
        proc = track(*args)
        assert proc.returncode == 0, proc.stderr
        assert session.stem in proc.stdout
    proc = track("sessions", "show", session.stem[:16], "--store", str(other))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("bad_id", ["*", "[", "../x", "/etc/passwd", ".hidden", ""])
def test_session_ids_are_plain_prefixes(store: Path, bad_id: str) -> None:
    assert track("--headless", "--", "true").returncode == 0
    for action in ("show", "export", "events", "delete"):
        _one_error_line(track("sessions", action, bad_id))
    assert len(list(store.glob("*.json"))) == 1


def test_unsaved_session_says_so(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    out = tmp_path / "r.json"
    proc = track("--headless", "-f", "json", "-o", str(out), "--store", str(not_a_dir), "--", "sh", "-c", "exit 4")
    assert proc.returncode == 4
    assert json.loads(out.read_text())["exit_code"] == 4  # the report is still written
    assert "session NOT saved" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


class _FakeHandle:
    """The sampler's handle, as the relay sees it: a pid (a live child of the test) and what was sent."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.sent: list[int] = []

    def signal(self, sig: int) -> None:
        self.sent.append(sig)

    def unrelayed(self) -> list[int]:
        return []  # the sampler passed on all it was sent


@pytest.fixture
def sampler_pid() -> Iterator[int]:
    """A live child standing in for the sampler (the relay checks that it has not exited)."""
    child = subprocess.Popen([PY, "-c", "import time; time.sleep(120)"])
    yield child.pid
    child.kill()
    child.wait()


def test_signal_relay_stops_once_the_sampler_is_reaped(sampler_pid: int) -> None:
    handle = _FakeHandle(sampler_pid)
    relay = SignalRelay(handle, attach=False)  # type: ignore[arg-type]
    relay.forward(signal.SIGTERM, 0)
    relay.forward(signal.SIGINT, SI_KERNEL)  # Ctrl-C on the terminal: the command has it already
    assert handle.sent == [signal.SIGTERM]
    relay.reaped.set()
    relay.forward(signal.SIGTERM, 0)
    assert handle.sent == [signal.SIGTERM]
    assert relay.interrupted == [signal.SIGTERM, signal.SIGINT, signal.SIGTERM]


def test_signals_between_the_samplers_death_and_the_takeover_reach_the_command(sampler_pid: int) -> None:
    """A SIGTERM that came after the dead sampler was reaped, before the front end took the command over, was
    dropped: the command never got it and gputop-track went on waiting for it untracked (`timeout` overran)."""
    handle = _FakeHandle(sampler_pid)
    relay = SignalRelay(handle, attach=False)  # type: ignore[arg-type]
    command = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        relay.reaped.set()  # the sampler died and was reaped; the takeover has not begun
        relay.forward(signal.SIGTERM, 0)
        assert handle.sent == [] and command.poll() is None  # nobody to send it to yet: held
        relay.retarget(command.pid)
        assert command.wait(30) == -signal.SIGTERM
        relay.forward(signal.SIGINT, 0)  # from now on straight to the command (gone: no error)
        assert relay.held == [] and handle.sent == []
    finally:
        if command.poll() is None:
            command.kill()


def test_a_signal_to_a_sampler_dead_but_not_reaped_yet_is_held_for_the_command() -> None:
    """The sampler died (a zombie: the front end has not reaped it yet) when SLURM's SIGTERM came: kill()
    on a zombie succeeds and the signal went nowhere; the takeover then had nothing to pass on."""
    zombie = subprocess.Popen([PY, "-c", "pass"])
    deadline = time.monotonic() + 30
    while os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    handle = _FakeHandle(zombie.pid)
    relay = SignalRelay(handle, attach=False)  # type: ignore[arg-type]
    command = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        relay.forward(signal.SIGTERM, 0)
        assert handle.sent == [] and relay.held == [signal.SIGTERM]
        relay.retarget(command.pid)
        assert command.wait(30) == -signal.SIGTERM
    finally:
        zombie.wait()
        if command.poll() is None:
            command.kill()


def test_the_takeover_passes_signals_on_before_it_rewrites_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session is marked interrupted only once signals go to the command: a test (or a user) that sees
    "interrupted" and sends SIGTERM must reach it."""
    from gputop_tracker.core.model.config import EngineConfig
    from gputop_tracker.core.sampling import orphans

    order: list[str] = []
    monkeypatch.setattr(orphans, "mark_interrupted", lambda *a: order.append("marked") or True)
    monkeypatch.setattr(orphans, "is_our_child", lambda pid: True)  # a child of the test, not of a sampler
    command = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])

    def retarget(pid: int) -> None:
        order.append("retarget")
        os.kill(pid, signal.SIGTERM)

    try:
        takeover = orphans.Takeover(EngineConfig(argv=["x"], mode="launch"), -9, command.pid, "sid", str(tmp_path))
        assert takeover.run(lambda _text: None, retarget) == 128 + signal.SIGTERM
    finally:
        if command.poll() is None:
            command.kill()
    assert order == ["retarget", "marked", "marked"]


def test_main_usage_names_every_sessions_action() -> None:
    """`gputop-track --help` listed `sessions {list,show,export,events,job,delete}`: compare and plot missing."""
    import re

    from gputop_tracker.cli.entry import USAGE
    from gputop_tracker.cli.sessions import build_sessions_parser

    sub = next(a for a in build_sessions_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    listed = re.search(r"sessions \{([^}]*)\}", USAGE)
    assert listed is not None, USAGE
    assert set(listed.group(1).split(",")) == set(sub.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", ["-o", "--plot"])
def test_an_output_name_ending_in_a_slash_is_refused(tmp_path: Path, flag: str) -> None:
    """`--plot run.png/` wrote run.png (Path() drops the slash) where a shell's `> run.png/` refuses."""
    name = str(tmp_path / "run.png") + "/"
    proc = subprocess.run(
        [PY, "-m", "gputop_tracker", "--headless", "--store", str(tmp_path / "store"), flag, name, "--", "true"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    _one_error_line(proc)
    assert "cannot end in /" in proc.stderr
    assert not (tmp_path / "run.png").exists()


@pytest.mark.parametrize(
    ("first", "second"), [("-o", "--plot"), ("-o", "--prometheus-textfile"), ("--plot", "--prometheus-textfile")]
)
def test_two_outputs_naming_one_file_are_refused(tmp_path: Path, first: str, second: str) -> None:
    """`-o run.png --plot run.png`: the picture overwrote the report just written (a textfile would be
    removed at the end, or overwrite the picture)."""
    name = str(tmp_path / "run.png")
    proc = subprocess.run(
        [PY, "-m", "gputop_tracker", "--headless", "--store", str(tmp_path / "store"), first, name,
         second, name, "--", "true"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    _one_error_line(proc)
    assert "name the same file" in proc.stderr
    assert not (tmp_path / "run.png").exists()


def _a_kernel_thread() -> int | None:
    for pid in (2, *sorted(int(d) for d in os.listdir("/proc") if d.isdigit())[:200]):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if int(f.read().rsplit(b")", 1)[1].split()[6]) & 0x00200000:
                    return pid
        except (OSError, IndexError, ValueError):
            continue
    return None


@pytest.mark.skipif(_a_kernel_thread() is None, reason="no kernel thread visible here (a PID namespace)")
def test_attach_to_a_kernel_thread_is_refused() -> None:
    """kthreadd (PID 2) has no memory and its descendants are kernel workers: tracking it (until Ctrl-C) would
    report 0 B labelled exact for every kworker. One error line instead."""
    pid = _a_kernel_thread()
    proc = track("--headless", "--attach", str(pid), timeout=30)
    _one_error_line(proc)
    assert "kernel thread" in proc.stderr


def test_json_of_a_command_line_that_is_not_utf8_is_valid_unicode(tmp_path: Path) -> None:
    """An argument of bytes that are not UTF-8 (a file name from another locale): the JSON report, `sessions
    list -f json` and `sessions export` hold U+FFFD, never a lone surrogate (\\udcff) that strict readers reject
    and that a Python script cannot print. The text report still shows the bytes ($'\\xff\\xfe')."""
    store = tmp_path / "store"
    out = tmp_path / "r.json"
    odd = os.fsdecode(b"caf\xe9-\xff\xfe")
    env = {"GPUTOP_TRACKER_STORE": str(store)}
    proc = track("--headless", "-f", "json", "-o", str(out), "--", "true", odd, env=env)
    assert proc.returncode == 0, proc.stderr
    listed = track("sessions", "list", "-f", "json", env=env)
    sid = json.loads(listed.stdout)[0]["id"]
    exported = tmp_path / "s.json"
    assert track("sessions", "export", sid, "-o", str(exported), env=env).returncode == 0
    for text in (out.read_text(), listed.stdout, exported.read_text()):
        assert "\\udc" not in text
        doc = json.loads(text)
        json.dumps(doc, ensure_ascii=False).encode("utf-8")  # no lone surrogate anywhere
    assert json.loads(out.read_text())["command"] == ["true", "caf\ufffd-\ufffd\ufffd"]
    shown = track("sessions", "show", sid, env=env)
    assert "$'caf\\xe9-\\xff\\xfe'" in shown.stdout + shown.stderr


def test_a_reader_that_goes_away_mid_report_is_a_quiet_end_with_the_commands_exit_code(tmp_path: Path) -> None:
    """`-f json | head -c 100` with a report larger than the pipe: the kernel cuts the write short rather than
    failing it, and Python's text layer used to drop the rest silently; then a line on stderr said the report was
    not written. A reader that took what it wanted is normal (`ls | head`): nothing on stderr, the exit code still
    the command's, the session saved."""
    big = "x" * 100_000  # the command line is in the report: > 200 kB of JSON, more than a pipe holds
    proc = subprocess.Popen(
        [PY, "-m", "gputop_tracker", "--headless", "-f", "json", "--", "sh", "-c", "exit 3", big, big],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "GPUTOP_TRACKER_STORE": str(tmp_path / "store")},
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100).startswith(b"{")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 3, err
    assert err == ""
    assert len(list((tmp_path / "store").glob("*.json"))) == 1


def test_the_text_report_counts_in_words_that_agree() -> None:
    """'1 samples every 0.5 s, 1 processes seen'."""
    from gputop_tracker.core.report.render import _count

    assert _count(1, "sample") == "1 sample" and _count(0, "sample") == "0 samples"
    assert _count(1, "process", "processes") == "1 process" and _count(40, "process", "processes") == "40 processes"


def test_an_output_directory_removed_during_the_run_is_not_made_again(tmp_path: Path) -> None:
    """`-o DIR/r.json` with DIR removed while the job ran: the report came back in a fresh DIR (made by the
    store's writer), where a shell's `>` fails. Now: one line saying so, the report on the terminal."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "r.json"
    script = f"import shutil; shutil.rmtree({str(out_dir)!r})"
    proc = subprocess.run(
        [PY, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(out), "--store", str(tmp_path / "s"),
         "--", PY, "-c", script],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0 and not out_dir.exists()
    first, _, rest = proc.stderr.partition("\n")
    assert f"cannot write {out}" in first and "report follows" in first
    assert json.loads(rest)["exit_code"] == 0  # nothing measured is lost


def test_the_relay_ledger_counts_what_a_forked_sampler_passed_on() -> None:
    """The front end's list of signals sent to the sampler, less what the sampler (another process, sharing the
    ledger's memory since the fork) counted as passed on: what the command never got, oldest first."""
    from gputop_tracker.core.sampling.channel import RELAYABLE, STOP_SIGNAL
    from gputop_tracker.core.sampling.relayed import RelayLedger

    ledger = RelayLedger()
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGTERM, STOP_SIGNAL, signal.SIGINT):
        ledger.sending(sig)
    pid = os.fork()
    if pid == 0:  # the sampler passed on one SIGTERM and the SIGUSR1, then died
        ledger.relayed(signal.SIGTERM)
        ledger.relayed(signal.SIGUSR1)
        os._exit(0)
    os.waitpid(pid, 0)
    # the second SIGTERM and the SIGINT never reached the command; STOP_SIGNAL was the sampler's own
    assert ledger.unrelayed(RELAYABLE) == [signal.SIGTERM, signal.SIGINT]
    assert ledger.unrelayed(RELAYABLE) == []  # each passed on once


@pytest.mark.parametrize(
    "action", [["sessions", "list"], ["sessions", "job", "5"], ["advise"], ["sessions", "show", "x"]]
)
def test_a_store_that_is_a_file_is_one_line_and_exit_2(tmp_path: Path, action: list[str]) -> None:
    """`advise --store FILE` ended in a traceback; `sessions list` and `sessions job` said `Not a directory`
    with exit 1, where `sessions show` said it as bad input."""
    not_a_dir = tmp_path / "store.txt"
    not_a_dir.write_text("")
    proc = track(*action, "--store", str(not_a_dir))
    _one_error_line(proc)
    assert proc.stderr == f"gputop-track: error: the store {not_a_dir} is not a directory\n"
