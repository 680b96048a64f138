"""Bad input, odd files and odd text, through the real CLI (real processes, real files)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import track

from gputop_tracker.cli.entry import build_parser
from gputop_tracker.cli.sessions import build_sessions_parser
from gputop_tracker.core.model.text import command_line, escape_controls

PY = sys.executable
SETPRIV = shutil.which("setpriv")


def _one_error_line(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gputop-track: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def session(store: Path) -> str:
    """One real saved session: a shell whose child sleeps (two processes, one with a sampled peak)."""
    proc = track("--headless", "--interval", "0.1", "--", "sh", "-c", "sleep 0.4; exit 0")
    assert proc.returncode == 0, proc.stderr
    (path,) = store.glob("*.json")
    return path.stem


# ---------------------------------------------------------------------------------------------- item 2


def _section(text: str, title: str) -> list[str]:
    """The lines of a report section, from the line starting with `title` to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def _cells(line: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of each cell: cells are separated by two spaces or more."""
    return [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", line)]


UNITS = [None, "bytes", "kilobytes", "megabytes", "gigabytes", "terabytes"]


@pytest.mark.parametrize("unit", UNITS)
def test_report_columns_stay_apart_in_every_unit(session: str, unit: str | None) -> None:
    args = ["--ru", unit, "--gru", unit, "--tu", "hours"] if unit else []
    proc = track("sessions", "show", session, *args)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout

    ram = _section(text, "RAM (peaks)")
    header = _cells(ram[0])
    assert [c[2] for c in header] == ["RAM (peaks)", "total", "private", "shared", "how measured"], ram[0]
    for line in ram[1:4]:  # main, descendants, combined: five cells each, figures right-aligned under the header
        cells = _cells(line)
        assert len(cells) == 5, line
        assert [c[1] for c in cells[1:4]] == [c[1] for c in header[1:4]], (ram[0], line)
        assert cells[4][0] == header[4][0], (ram[0], line)
    for line in ram[4:]:  # single figures: under "total" (then the full reasons of the short labels)
        if line.strip() == "how measured:":
            break
        cells = _cells(line)
        assert cells[1][1] == header[1][1], (ram[0], line)

    procs = _section(text, "Processes")[1:]
    header = _cells(procs[0])
    assert [c[2] for c in header] == ["pid", "name", "peak RSS", "source", "CPU s", "threads", "GPU", "exit"]
    right = {0, 2, 4, 5, 6, 7}
    for line in procs[1:]:
        cells = _cells(line)
        assert len(cells) in (7, 8), (procs[0], line)
        assert cells[5][2].isdigit(), line  # threads alone, never glued to the GPU figure
        assert re.fullmatch(r"[\d.]+ \w+", cells[6][2]), line
        for i, (start, end, _) in enumerate(cells):
            if i in right:
                assert end == header[i][1], (procs[0], line)
            else:
                assert start == header[i][0], (procs[0], line)
            if i + 1 < len(header):  # no cell reaches into the next column
                assert end + 2 <= header[i + 1][0] or i + 1 in right, (procs[0], line)


def test_escape_controls_and_command_line() -> None:
    assert escape_controls("a\nb\tc\x1b[31md\x7f\x9b\u2028") == "a\\nb\\tc\\x1b[31md\\x7f\\x9b\\u2028"
    assert command_line(["echo", "two words", "it's"]) == "echo 'two words' 'it'\"'\"'s'"
    assert command_line(["printf", "a\nb", "c'\\\x01"]) == "printf $'a\\nb' $'c\\'\\\\\\x01'"
    shown = command_line(["a\nb", "c'\\\x01", "d e"])
    script = "args() { printf '%s|' \"$@\"; }; args " + shown
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10).stdout
    assert out == "a\nb|c'\\\x01|d e|"  # what is shown can be pasted back into bash


def test_control_characters_are_escaped_wherever_a_command_is_shown(tmp_path: Path, store: Path) -> None:
    odd = tmp_path / "sl\neep\x1b"  # a process whose name (comm) holds a newline and an ESC
    odd.symlink_to(shutil.which("sleep") or "/bin/sleep")
    arg = "x\ny\tz\x1b[2J\x9b"
    proc = track("--headless", "--interval", "0.1", "--", "sh", "-c", '"$0" 0.4', str(odd), arg)
    assert proc.returncode == 0, proc.stderr
    report = proc.stderr
    assert "\x1b" not in report and "\x9b" not in report and "\t" not in report
    (command_row,) = [line for line in report.splitlines() if line.startswith("command")]
    assert "$'x\\ny\\tz\\x1b[2J\\x9b'" in command_row
    procs = _section(report, "Processes")
    assert any("sl\\neep\\x1b" in line for line in procs), procs

    listing = track("sessions", "list")
    assert listing.returncode == 0, listing.stderr
    assert "\x1b" not in listing.stdout and "\x9b" not in listing.stdout
    lines = listing.stdout.splitlines()
    assert len(lines) == 2 and "$'x\\ny\\tz\\x1b[2J\\x9b'" in lines[1], lines
    data = json.loads(track("sessions", "list", "-f", "json").stdout)
    assert data[0]["meta"]["command"][-1] == arg  # JSON keeps the real argv
    shown = track("sessions", "show", data[0]["id"])
    assert "\x1b" not in shown.stdout


# ---------------------------------------------------------------------------------------------- item 3

LONG = "x" * 120


@pytest.fixture
def long_session(store: Path) -> str:
    proc = track("--headless", "--interval", "0.1", "--", "sh", "-c", "sleep 0.5; exit 0", "train.py", LONG)
    assert proc.returncode == 0, proc.stderr
    (path,) = store.glob("*.json")
    return path.stem


def test_sessions_list_piped_shows_the_whole_command(long_session: str) -> None:
    for args in ([], ["--no-trunc"]):
        proc = track("sessions", "list", *args)
        assert proc.returncode == 0, proc.stderr
        assert f"train.py {LONG}" in proc.stdout, proc.stdout


def _on_a_terminal(*args: str, columns: int = 100) -> str:
    """Run the CLI with stdout on a real pseudo-terminal of `columns` columns; return what it printed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([PY, "-m", "gputop_tracker", *args], stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    return out.decode().replace("\r\n", "\n")


def test_sessions_list_truncates_only_on_a_terminal(long_session: str) -> None:
    out = _on_a_terminal("sessions", "list", columns=100)
    lines = out.splitlines()
    assert len(lines) == 2 and "…" in lines[1] and LONG not in out, out
    assert all(len(line) <= 100 for line in lines), lines
    out = _on_a_terminal("sessions", "list", "--no-trunc", columns=100)
    assert f"train.py {LONG}" in out


def test_sessions_list_json(long_session: str, store: Path) -> None:
    (store / "20990101-000000-junk.json").write_text("{")
    proc = track("sessions", "list", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, list) and len(data) == 2
    junk, good = data
    assert junk["id"] == "20990101-000000-junk" and junk["status"] == "unreadable" and "corrupt" in junk["error"]
    assert good["id"] == long_session and good["error"] is None and good["status"] == "finished"
    assert good["meta"]["command"][-1] == LONG and good["meta"]["exit_code"] == 0
    assert (
        isinstance(good["peak_ram_bytes"], int)  # a byte count is a whole number
        and good["peak_ram_bytes"] > 0
        and good["path"].endswith(f"{long_session}.json")
    )
    empty = track("sessions", "list", "-f", "json", "--store", str(store / "none"))
    assert empty.returncode == 0 and json.loads(empty.stdout) == []


# ---------------------------------------------------------------------------------------------- item 4


def test_fifo_and_deeply_nested_files_never_hang_or_hide_sessions(session: str, store: Path) -> None:
    os.mkfifo(store / "20990101-000000-fifo.json")
    (store / "20990102-000000-deep.json").write_text("[" * 200_000 + "]" * 200_000)  # 400 KB
    (store / "20990103-000000-deepobj.json").write_text('{"meta":' * 50_000 + "1" + "}" * 50_000)
    (store / "20990104-000000-dir.json").mkdir()
    proc = track("sessions", "list", "--store", str(store), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stderr, proc.stderr
    out = proc.stdout
    assert session in out
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "not a regular file (a FIFO)" in rows["20990101-000000-fifo"]
    assert "nested too deeply" in rows["20990102-000000-deep"]
    assert "nested too deeply" in rows["20990103-000000-deepobj"]
    assert "not a regular file (a directory)" in rows["20990104-000000-dir"]
    data = json.loads(track("sessions", "list", "-f", "json", "--store", str(store), timeout=30).stdout)
    assert {d["id"]: d["status"] for d in data}[session] == "finished"
    assert sum(d["status"] == "unreadable" for d in data) == 4
    for sid in ("20990101-000000-fifo", "20990102-000000-deep"):
        for action in ("show", "export", "events"):
            line = _one_error_line(track("sessions", action, sid, "--store", str(store), timeout=30))
            assert "unreadable" in line
    assert track("sessions", "show", session, "--store", str(store), timeout=30).returncode == 0


# ---------------------------------------------------------------------------------------------- item 5


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can write in too (pytest's tmp_path is private to us)."""
    d = Path(tempfile.mkdtemp(prefix="gputop-robust-"))
    d.chmod(0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _as_nobody() -> list[str]:
    return [SETPRIV or "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _users() -> list[str]:
    users = ["self"]
    if os.geteuid() == 0 and SETPRIV:
        users.append("nobody")  # as root a 0444 file is writable (so a shell's `>` succeeds): try a plain user too
    return users


@pytest.mark.parametrize("user", _users())
def test_read_only_output_is_refused_as_a_shell_would(user: str, shared_dir: Path) -> None:
    prefix = _as_nobody() if user == "nobody" else []
    env = {**os.environ, "GPUTOP_TRACKER_STORE": str(shared_dir / "store"), "XDG_DATA_HOME": str(shared_dir)}
    target = shared_dir / "report.txt"
    probe = shared_dir / "probe.txt"
    for f in (target, probe):
        f.write_text("keep")
        f.chmod(0o444)
    shell = subprocess.run([*prefix, "sh", "-c", f"echo new > {probe}"], capture_output=True, env=env, timeout=30)
    marker = shared_dir / "ran"
    ours = subprocess.run(
        [*prefix, PY, "-m", "gputop_tracker", "--headless", "-o", str(target), "--", "touch", str(marker)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if shell.returncode != 0:  # refused by the shell: refused by us, before the command ran
        _one_error_line(ours)
        assert "permission denied" in ours.stderr and str(target) in ours.stderr
        assert target.read_text() == "keep" and not marker.exists()
        assert stat.S_IMODE(target.stat().st_mode) == 0o444
    else:  # root: a shell overwrites it, and so do we (in place of the file, its mode kept)
        assert ours.returncode == 0, ours.stderr
        assert marker.exists() and target.read_text().startswith("gputop-track report")
    if user == "nobody" or os.geteuid() != 0:
        # the sessions' -o follows the same rule
        subprocess.run([PY, "-m", "gputop_tracker", "--headless", "--", "true"], env=env, timeout=60, check=True)
        for f in (shared_dir / "store").iterdir():
            f.chmod(0o644)
        (sid,) = (f.stem for f in (shared_dir / "store").glob("*.json"))
        for action in ("export", "events"):
            proc = subprocess.run(
                [*prefix, PY, "-m", "gputop_tracker", "sessions", action, sid, "-o", str(target)],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            assert "permission denied" in _one_error_line(proc)
            assert target.read_text() == "keep"


def test_missing_output_directory_is_refused_everywhere_alike(session: str, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "x.json"
    messages = []
    marker = tmp_path / "ran"
    runs = [
        ["--headless", "-o", str(missing), "--", "touch", str(marker)],
        ["sessions", "export", session, "-o", str(missing)],
        ["sessions", "events", session, "-o", str(missing)],
    ]
    for args in runs:
        line = _one_error_line(track(*args))
        messages.append(line)
        assert not (tmp_path / "no").exists() and not marker.exists()
    expected = f"gputop-track: error: cannot write {missing}: directory {missing.parent} does not exist"
    assert messages == [expected] * 3


def test_output_that_is_a_directory_is_refused_everywhere(session: str, tmp_path: Path) -> None:
    for args in (
        ["--headless", "-o", str(tmp_path), "--", "true"],
        ["sessions", "export", session, "-o", str(tmp_path)],
        ["sessions", "events", session, "-o", str(tmp_path)],
    ):
        assert _one_error_line(track(*args)) == f"gputop-track: error: cannot write {tmp_path}: is a directory"


def test_full_device_names_the_file_not_stdout(session: str) -> None:
    for action in ("export", "events"):
        line = _one_error_line(track("sessions", action, session, "-o", "/dev/full"), code=1)
        assert "/dev/full" in line and "stdout" not in line, line


# ---------------------------------------------------------------------------------------------- item 8


def test_empty_command_name_is_not_found_as_in_a_shell(store: Path) -> None:
    shell = subprocess.run(["sh", "-c", '""'], capture_output=True, timeout=10)
    proc = track("--headless", "--", "")
    assert proc.returncode == shell.returncode == 127, proc.stderr
    line = _one_error_line(proc, code=127)
    assert "command not found" in line


# ---------------------------------------------------------------------------------------------- item 12

HELPS = [
    [],
    ["sessions"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "export"],
    ["sessions", "events"],
    ["sessions", "delete"],
]


@pytest.mark.parametrize("columns", [None, "60", "100", "300"])
@pytest.mark.parametrize("args", HELPS, ids=lambda a: " ".join(a) or "main")
def test_help_lines_fit_in_100_columns(args: list[str], columns: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    proc = subprocess.run(
        [PY, "-m", "gputop_tracker", *args, "--help"], capture_output=True, text=True, env=env, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    long = [line for line in proc.stdout.splitlines() if len(line) > 100]
    assert not long, long


def test_main_help_says_examples_exit_codes_environment_and_outputs() -> None:
    text = build_parser().format_help()
    for needle in ("examples:", "exit codes:", "environment:", "GPUTOP_TRACKER_STORE", "CUDA_VISIBLE_DEVICES"):
        assert needle in text
    assert "127" in text and "126" in text and "128+N" in text
    assert "headless by itself" in text and "to stderr" in text and "to stdout" in text


def _actions(parser: object) -> Iterator[tuple[str, object]]:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from ((f"{name} {n}", a) for n, a in _actions(sub))
        yield parser.prog, action


def test_every_sessions_action_and_option_is_described() -> None:
    parser = build_sessions_parser()
    for where, action in _actions(parser):
        help_text = getattr(action, "help", None)
        assert help_text, f"{where}: {getattr(action, 'option_strings', None) or getattr(action, 'dest', None)}"
    show = subprocess.run([PY, "-m", "gputop_tracker", "sessions", "show", "--help"], capture_output=True, text=True)
    for option in ("--format", "--ram-unit", "--gpu-ram-unit", "--time-unit", "--store", "ID"):
        assert option in show.stdout
    assert "RAM unit" in show.stdout and "report format" in show.stdout
    for action in ("list", "show", "export", "events", "delete"):
        sub = subprocess.run([PY, "-m", "gputop_tracker", "sessions", action, "--help"], capture_output=True, text=True)
        assert sub.returncode == 0 and "usage:" in sub.stdout


def test_command_not_found_with_a_newline_and_odd_bytes_is_one_line(store: Path) -> None:
    """README: 127 with one line on stderr. A name holding a newline or bytes that are not UTF-8 is escaped
    (\\n, \\xff), not printed raw over two lines with Python's `\\udcff` stand-in."""
    proc = track("--headless", "--", os.fsdecode(b"no-such-\xff\nprog"))
    assert proc.returncode == 127, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert "command not found" in line and "\\xff" in line and "\\n" in line, line
    assert "\\udcff" not in line


def test_bidi_controls_are_escaped_like_other_controls() -> None:
    """U+202E in a block name reversed the rest of its line on the terminal ("Trojan source"): shown escaped."""
    assert escape_controls("step\u202eevil\u2066x\u200f") == "step\\u202eevil\\u2066x\\u200f"
    assert escape_controls("تدريب") == "تدريب"  # right-to-left text itself is left alone


def test_a_store_path_with_a_newline_stays_on_one_line(tmp_path: Path) -> None:
    """The saved session's path (and every line the tool says) with a newline in the store's name was printed
    over two lines."""
    store = tmp_path / "odd\nstore"
    proc = track("--headless", "--store", str(store), "--", "true")
    assert proc.returncode == 0, proc.stderr
    (saved,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("Session saved:")]
    assert "odd\\nstore" in saved
    out = tmp_path / "r\u202e.json"
    proc = track("--headless", "--store", str(store), "-f", "json", "-o", str(out), "--", "true")
    assert proc.stderr.count("\n") == 1 and "r\\u202e.json" in proc.stderr, proc.stderr
