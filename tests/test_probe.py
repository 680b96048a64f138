"""The in-process probe: each Python process of a launched job reports its own exact peak (VmHWM) and its GPU
allocators' peaks at exit, through the real CLI, compared with the VmHWM each process read itself."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import track_json

from gputop_tracker.core.blocks.probe import PROBE_DIR, SITE_FILE
from gputop_tracker.core.summary.evidence import ProcessFacts, process_figure
from gputop_tracker.core.summary.probe import Exit, ProbeStats, python_without_probe, reaps_known_of

PY = sys.executable
JOB = Path(__file__).with_name("probe_job")
LABEL = "exact (VmHWM at exit, in-process)"
# the in-process figures: VmHWM of the last image, or ru_maxrss where that covers an earlier, larger image
IN_PROCESS = (LABEL, "exact (ru_maxrss at exit, in-process: every image of the PID)")


def _job_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PYTHONPATH": f"{JOB / 'site'}{os.pathsep}{JOB / 'fakes'}",
        "USER_SITE_MARK": str(tmp_path / "mark"),
        "GPUTOP_TRACKER_NO_CGROUP": "1",  # the tree's figures from the processes alone
        "TMPDIR": str(tmp_path),  # the session's FIFO apart from other runs' sweeps of /tmp
    }


def _by_pid(report: dict) -> dict[int, dict]:
    return {p["pid"]: p for p in report["processes"]}


def test_done_means_each_peak_exact_allocator_and_user_site(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc, r = track_json(tmp_path, "--interval", "1", "--", PY, str(JOB / "main.py"), str(out), env=_job_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    rows = _by_pid(r)
    assert [f["hwm"] > n << 20 for f, n in zip(figures, (600, 300, 100), strict=True)] == [True] * 3
    for f in figures:  # the 0.2 s child, the pool worker, main
        row = rows[f["pid"]]
        assert row["peak_rss"] == pytest.approx(f["hwm"], rel=0.01), row
        assert row["peak_rss_source"] in IN_PROCESS and row["peak_rss_exact"]
        assert f["user_site"], f  # the user's sitecustomize ran there (a forked worker inherits it)
    main = figures[-1]["pid"]
    assert r["pid"] == main and r["sources"]["max_ram.main.total_rss"] in IN_PROCESS
    marks = {int(x) for x in (tmp_path / "mark").read_text().split()}
    assert {figures[0]["pid"], main} <= marks  # spawned child and main each imported it themselves
    # the stand-in's figures: main only (the forked worker has no CUDA, as with PyTorch); device 1 unused
    assert rows[main]["gpu_allocator"] == [
        {
            "framework": "torch",
            "device": "cuda:0",
            "peak_allocated": 123456789,
            "peak_reserved": 234567890,
            "at_exit": False,
            "processes": None,
        },
        {
            "framework": "torch",
            "device": "cuda:2",
            "peak_allocated": 7777777,
            "peak_reserved": 8888888,
            "at_exit": False,
            "processes": None,
        },
    ]
    assert [a["peak_allocated"] for a in r["max_gpu_ram"]["allocator"]["main"]] == [123456789, 7777777]
    assert r["max_gpu_ram"]["allocator"]["descendants"] == []
    assert set(r["probe"]["reported"]) >= {f["pid"] for f in figures} and r["probe"]["enabled"]
    # every process accounted (all Python, every reap listed): Σ of the exact peaks bounds the tree
    upper = r["max_ram"]["combined_upper_bound"]
    if upper is None:  # multiprocessing's resource tracker ended as we stopped, its report not read: said so
        tracker = next(p["pid"] for p in r["processes"] if "resource_tracker" in " ".join(p["cmdline"]))
        assert f"PID {tracker} " in r["sources"]["max_ram.combined.total_rss"], r["sources"]
        return
    # the Σ over processes that may have lived at the same time: at least any one, at most all of them together
    assert max(f["hwm"] for f in figures) <= upper <= sum(p["peak_rss_upper"] for p in r["processes"])
    assert upper >= r["max_ram"]["combined"]["total_rss"]


def test_text_report_says_probe_and_allocator(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    env = {**os.environ, **_job_env(tmp_path)}
    proc = subprocess.run(
        [
            PY,
            "-m",
            "gputop_tracker",
            "--headless",
            "--no-save",
            "--interval",
            "1",
            "--",
            PY,
            str(JOB / "main.py"),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr  # the report goes to stderr when stdout is the job's
    # main, its child, the pool worker (and multiprocessing's resource tracker, when its exit came in time)
    assert re.search(r"probe +on: [34] Python processes reported their peaks at exit", text), text
    assert "allocator       main torch cuda:0: peak allocated 123.46 MB, reserved 234.57 MB (exact)" in text


def test_exit_paths_all_report(tmp_path: Path) -> None:
    """sys.exit, an uncaught exception, os._exit of a forked child, forkserver: each sends its report; a child
    killed by a signal sends nothing and keeps a sampled label."""
    script = tmp_path / "paths.py"
    script.write_text(
        "import multiprocessing as mp, os, signal, subprocess, sys, time\n"
        "def w(): pass\n"
        "if __name__ == '__main__':\n"
        "    pids = []\n"
        "    for code in ('import sys; sys.exit(3)', 'raise ValueError(1)', 'import os,signal; os.kill(os.getpid(), 9)'):\n"
        "        p = subprocess.Popen([sys.executable, '-c', code], stderr=subprocess.DEVNULL); p.wait(); pids.append(p.pid)\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0); pids.append(pid)\n"
        "    p = mp.get_context('forkserver').Process(target=w); p.start(); p.join(); pids.append(p.pid)\n"
        f"    open({str(tmp_path / 'pids')!r}, 'w').write(' '.join(map(str, pids)))\n"
    )
    proc, r = track_json(
        tmp_path,
        "--interval",
        "1",
        "--",
        PY,
        str(script),
        env={"GPUTOP_TRACKER_NO_CGROUP": "1", "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    exit3, raised, killed, forked, forkserver = map(int, (tmp_path / "pids").read_text().split())
    reported = set(r["probe"]["reported"])
    assert {exit3, raised, forked, forkserver, r["pid"]} <= reported
    assert killed not in reported
    rows = _by_pid(r)
    assert rows.get(killed, {}).get("peak_rss_source") not in IN_PROCESS  # no sample may have seen it: no row then
    assert all(rows[p]["peak_rss_source"] in IN_PROCESS for p in (exit3, raised, forked, forkserver))


def test_isolated_and_no_site_said(tmp_path: Path) -> None:
    script = tmp_path / "iso.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "for flag in ('-I', '-S'):\n"
        "    subprocess.run([sys.executable, flag, '-c', 'import time; time.sleep(1.5)'])\n"
    )
    proc, r = track_json(tmp_path, "--interval", "0.5", "--", PY, str(script), env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    reasons = {w["reason"] for w in r["probe"]["without_probe"]}
    assert reasons == {"isolated mode (-I)", "-S (no site import)"}
    assert any("isolated mode (-I): no probe" in n for n in r["notes"])


def test_no_probe_leaves_pythonpath(tmp_path: Path) -> None:
    script = tmp_path / "env.py"
    script.write_text(
        f"import os, sys; open({str(tmp_path / 'env')!r}, 'w').write(os.environ.get('PYTHONPATH', '-'))\n"
    )
    proc, r = track_json(
        tmp_path, "--no-probe", "--", PY, str(script), env={"PYTHONPATH": "/nowhere", "TMPDIR": str(tmp_path)}
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "env").read_text() == "/nowhere"
    assert not r["probe"]["enabled"] and r["probe"]["reported"] == []
    proc, r = track_json(tmp_path, "--", PY, str(script), env={"PYTHONPATH": "/nowhere", "TMPDIR": str(tmp_path)})
    assert (tmp_path / "env").read_text() == f"{PROBE_DIR}{os.pathsep}/nowhere"
    assert r["probe"]["reported"] == [r["pid"]]


def test_probe_is_invisible_and_chains(tmp_path: Path) -> None:
    """Off sys.path, the user's sitecustomize in sys.modules, nothing printed — also without a tracker."""
    code = (
        "import sys, sitecustomize; "
        f"print(any(p.rstrip('/') == {PROBE_DIR!r} for p in sys.path), sitecustomize.__file__, sitecustomize.RAN)"
    )
    env = {**os.environ, "PYTHONPATH": f"{PROBE_DIR}{os.pathsep}{JOB / 'site'}", "GPUTOP_TRACKER_BLOCKS": "/nowhere"}
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, timeout=30)
    assert proc.stderr == ""
    assert proc.stdout.split() == ["False", str(JOB / "site" / "sitecustomize.py"), "True"]
    # no user sitecustomize: ours stays under the name (site needs a module there), nothing printed
    env["PYTHONPATH"] = PROBE_DIR
    show = "import os; print([(f.__module__, f.__name__) for f in (os._exit, os.waitpid, os.wait, os.wait4)])"
    proc = subprocess.run([PY, "-c", show], capture_output=True, text=True, env=env)
    plain = subprocess.run([PY, "-I", "-c", show], capture_output=True, text=True)  # no probe: the interpreter's own
    assert (proc.stdout, proc.stderr) == (plain.stdout, "")


SHOW_PATH = "import sys; print(sys.path)"


@pytest.mark.parametrize("how", ["argv", "shebang"])
def test_a_command_started_with_dash_S_keeps_its_own_sys_path(tmp_path: Path, how: str) -> None:
    """`python -S` never imports `sitecustomize` but reads PYTHONPATH: the probe's directory stayed on its
    sys.path[1]. Where the command itself is such a Python (its argv, or its `#!` line), PYTHONPATH is left alone:
    its sys.path is the one it has without the tool, and the report says why the probe is off."""
    if how == "argv":
        argv = [PY, "-S", "-c", SHOW_PATH]
    else:
        script = tmp_path / "nosite.py"
        script.write_text(f"#!{PY} -S\n{SHOW_PATH}\n")
        script.chmod(0o755)
        argv = [str(script)]
    env = {"TMPDIR": str(tmp_path), "PYTHONPATH": "/nowhere"}
    plain = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env}, timeout=30)
    proc, r = track_json(tmp_path, "--", *argv, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == plain.stdout and "/nowhere" in plain.stdout
    assert "-S" in r["probe"]["note"] and not r["probe"]["enabled"]


NESTED_CHECK = """
import os, posix, sys
try:
    import sitecustomize
    got = sitecustomize.__file__
except ImportError as e:
    got = "ImportError " + str(e.name)
print(got, [p for p in sys.path if 'gputop' in p], os._exit is posix._exit)
"""


def test_a_nested_python_with_dash_S_that_imports_sitecustomize_gets_what_it_would_without_us(tmp_path: Path) -> None:
    """A Python further down the tree started with -S (not visible before it starts): a later `import
    sitecustomize` loaded the probe (installed its hooks, left it as `sitecustomize`). Now the probe steps aside
    then: off sys.path, no hooks, and the program gets ImportError (or its own sitecustomize) as without us."""
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-S', '-c', {NESTED_CHECK!r}])"
    plain = subprocess.run([PY, "-S", "-c", NESTED_CHECK], capture_output=True, text=True, timeout=30)
    proc, _r = track_json(tmp_path, "--", PY, "-c", parent, env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert plain.stdout.endswith(" [] True\n"), plain.stdout
    assert proc.stdout == plain.stdout, proc.stderr


@pytest.mark.parametrize("name", ["sitecustomize.py", "gputop_probe_cache.py", "gputop_probe_gpu.py"])
def test_probe_files_are_python38_and_standalone(name: str) -> None:
    source = (Path(SITE_FILE).parent / name).read_text()
    ast.parse(source, feature_version=(3, 8))  # no match, no `X | Y` at runtime, no parenthesised with
    assert source.isascii()  # a Python 2 in the tree parses it too (and only chains)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    # `stat`: os imports it at start-up, so it is always loaded already; `resource`: a small C module, at exit;
    # `pickle`: only in the out-of-memory half (loaded once the program imported torch, which loaded pickle
    # already), for --gpu-history's snapshot
    # `marshal`: built in, the bytecode writer's; `_imp`: built in, loads `resource` directly
    allowed = {
        "os",
        "stat",
        "sys",
        "time",
        "select",
        "resource",
        "_signal",
        "atexit",
        "sitecustomize",
        "marshal",
        "_imp",
    }
    assert imported <= allowed | ({"pickle"} if name == "gputop_probe_gpu.py" else set()), imported
    halves = ["gputop_probe_cache.py", "gputop_probe_gpu.py", "sitecustomize.py"]
    assert sorted(p.name for p in Path(SITE_FILE).parent.glob("*.py")) == halves


# ---------------------------------------------------------------------------- pure rules (synthetic reports)


class _P:
    def __init__(self, pid: int, *, reaped: bool = False, waited: bool = False, wfc: bool | None = None) -> None:
        self.pid, self.name, self.reaped, self.waited = pid, "p", reaped, waited
        self.waited_for_children, self.rusage_maxrss, self.exit_reported = wfc, 5 << 20 if reaped else None, False


class _B:
    def __init__(self, procs: dict[int, _P], probe: ProbeStats) -> None:
        self.procs, self.probe, self.main_pid, self.mode, self.spawner_hwm = procs, probe, 1, "launch", 0


def _exit(pid: int, cf: int = 0, rf: int = 0, cf0: int = 0) -> Exit:
    return Exit(pid, 1, "python3", 0.0, "exit", 10 << 20, cf, rf, cf0)


def _why(procs: dict[int, _P], exits: list[Exit], reaps: dict[int, tuple[int, int]]) -> str:
    probe = ProbeStats(True)
    probe.exits = {e.pid: e for e in exits}
    probe.reaped_by = reaps
    return reaps_known_of(_B(procs, probe))


def test_the_tree_is_complete_only_when_every_reap_is_listed() -> None:
    main, child = _P(1, reaped=True, wfc=True), _P(2)
    # main reaped child 2 (listed) and the faults agree; the child reported too: nobody is missing
    assert _why({1: main, 2: child}, [_exit(1, 40, 40), _exit(2)], {2: (1, 30 << 20)}) == ""
    # one reap the probe did not see (the kernel's child faults are higher): someone may be missing
    assert "PID 1 " in _why({1: main, 2: child}, [_exit(1, 41, 40), _exit(2)], {2: (1, 30 << 20)})
    # children reaped before the probe started (a launcher such as a pyenv shim): unknown
    assert "PID 1 " in _why({1: main, 2: child}, [_exit(1, 50, 40, cf0=10), _exit(2)], {2: (1, 30 << 20)})
    # a listed child that did not report (not Python): whether it reaped children of its own is unknown
    assert "PID 2 " in _why({1: main}, [_exit(1, 40, 40)], {2: (1, 30 << 20)})


def test_python_without_probe_reads_interpreter_options() -> None:
    assert python_without_probe("python3", ["python3", "-I", "x.py"]) == "isolated mode (-I)"
    assert python_without_probe("python3.11", ["python3", "-sE", "x.py"]) == "-E (PYTHONPATH ignored)"
    assert python_without_probe("python3", ["python3", "-X", "dev", "-S"]) == "-S (no site import)"
    assert python_without_probe("python3", ["python3", "x.py", "-I"]) is None
    assert python_without_probe("python3", ["python3", "-c", "-I"]) is None
    assert python_without_probe("bash", ["bash", "-I"]) is None


def test_block_allocator_exact_when_the_peak_rose_else_a_bracket(tmp_path: Path) -> None:
    proc, r = track_json(tmp_path, "--", PY, str(JOB / "blocks_main.py"), env=_job_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "300000000" in proc.stderr.splitlines()  # the program's own peak statistic, never reset
    blocks = {b["name"]: b for b in r["blocks"]}
    grow, other = blocks["grow"]["gpu_allocator"]
    # cuda:2 was not touched in the block: nothing seen at its boundaries, at most its earlier peak
    assert (other["device"], other["peak_allocated"], other["peak_allocated_max"]) == ("cuda:2", 0, 7777777)
    assert (grow["peak_allocated"], grow["peak_allocated_max"], grow["exact"]) == (300_000_000, 300_000_000, True)
    assert grow["peak_reserved"] == grow["peak_reserved_max"] == 144 * 2**21  # 300 MB in 2 MiB segments
    within = blocks["within"]["gpu_allocator"][0]
    # the truth (250 MB) lies in the bracket: at least its end (170 MB), at most the peak so far (300 MB)
    assert (within["peak_allocated"], within["peak_allocated_max"], within["exact"]) == (
        170_000_000,
        300_000_000,
        False,
    )
    assert blocks["within"]["sources"]["gpu_allocator"].startswith("bracket")


def _other_pythons() -> list[Path]:
    """Other interpreters installed beside this one (a pyenv-style tree of versions), if any."""
    here = Path(sys.base_prefix).resolve()
    found = sorted(p for p in here.parent.glob("*/bin/python") if p.resolve().parent.parent != here)
    return found[:10]


def test_other_python_versions_report_or_chain(tmp_path: Path) -> None:
    """Every installed Python 3.8+ in the tree reports its exact peak; older ones (the file parses even in 2.7)
    only chain to the user's sitecustomize, silently."""
    others = _other_pythons()
    if not others:
        pytest.skip("no other Python version installed here")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['MARK'], 'a').write('%d\\n' % os.getpid())\n"
    )
    script = tmp_path / "versions.py"
    script.write_text(
        "import json, subprocess, sys\n"
        "out = []\n"
        "for exe in sys.argv[2:]:\n"
        "    p = subprocess.Popen([exe, '-c', 'import sys; b = bytearray(30 << 20); sys.stdout.write(str(sys.version_info[:2]))'],\n"
        "                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
        "    o, e = p.communicate()\n"
        "    out.append([p.pid, o.decode(), e.decode()])\n"
        "json.dump(out, open(sys.argv[1], 'w'))\n"
    )
    env = {"PYTHONPATH": str(tmp_path / "site"), "MARK": str(tmp_path / "mark"), "GPUTOP_TRACKER_NO_CGROUP": "1"}
    env["TMPDIR"] = str(tmp_path)
    res = tmp_path / "res.json"
    proc, r = track_json(tmp_path, "--", PY, str(script), str(res), *map(str, others), env=env)
    assert proc.returncode == 0, proc.stderr
    marks = {int(x) for x in (tmp_path / "mark").read_text().split()}
    reported = set(r["probe"]["reported"])
    rows = _by_pid(r)
    for pid, version, err in json.loads(res.read_text()):
        assert err == "", (version, err)  # nothing printed, under any version
        assert pid in marks, version  # the user's sitecustomize ran
        if tuple(int(x) for x in version.strip("()").split(",")) >= (3, 8):
            assert pid in reported and rows[pid]["peak_rss_source"] in IN_PROCESS, version
        else:
            assert pid not in reported, version


def test_a_larger_earlier_image_is_the_peak_and_vmhwm_alone_is_no_ceiling() -> None:
    """VmHWM is per image: a process that exec'd from a larger image of its own has ru_maxrss above it."""
    hwm = 10 << 20
    fig = process_figure(ProcessFacts(read=9 << 20, probe_hwm=hwm, probe_maxrss=hwm, floor=4 << 20))
    assert (
        fig.exact and fig.value == hwm and fig.label == "exact (ru_maxrss at exit, in-process: every image of the PID)"
    )
    # an earlier image held 50 MiB (above all its parent held): that is the peak, exact
    fig = process_figure(ProcessFacts(read=9 << 20, probe_hwm=hwm, probe_maxrss=50 << 20, floor=4 << 20))
    assert fig.exact and fig.value == 50 << 20
    # ru_maxrss no more than the parent's peak (maybe inherited): the last image's VmHWM is the ceiling
    fig = process_figure(ProcessFacts(read=9 << 20, probe_hwm=hwm, probe_maxrss=40 << 20, floor=40 << 20))
    assert fig.exact and fig.value == hwm and fig.label == f"exact ({LABEL[7:-1]})"
    # ... unless a sample saw it exec: then nothing bounds its earlier image from above
    fig = process_figure(
        ProcessFacts(read=9 << 20, probe_hwm=hwm, probe_maxrss=40 << 20, floor=40 << 20, exec_seen=True)
    )
    assert not fig.exact and fig.lower == hwm and fig.upper is None


def test_tracker_probe_in_its_own_process_and_off(tmp_path: Path) -> None:
    """Tracker(): children it forks (leaving by os._exit) and Python processes it starts report; PYTHONPATH and
    os._exit are as before once it stops. Tracker(probe=False): nothing reports, nothing changes."""
    script = tmp_path / "api.py"
    script.write_text(
        "import json, multiprocessing as mp, os, subprocess, sys\n"
        "from gputop_tracker import Tracker\n"
        "def w():\n"
        "    b = bytearray(50 << 20)\n"
        "    for i in range(0, len(b), 4096): b[i] = 1\n"
        "out = {}\n"
        "for probe in (True, False):\n"
        "    before = (os.environ.get('PYTHONPATH'), os._exit)\n"
        f"    with Tracker(sleep_time=1, save=False, store={str(tmp_path)!r}, probe=probe) as t:\n"
        "        p = mp.get_context('fork').Process(target=w); p.start(); p.join()\n"
        "        c = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True)\n"
        "    u = t.resource_usage\n"
        "    out[str(probe)] = {'pids': [p.pid, int(c.stdout)], 'reported': u.probe.reported, 'on': u.probe.enabled,\n"
        "                       'same': (os.environ.get('PYTHONPATH'), os._exit) == before,\n"
        "                       'labels': {q.pid: q.peak_rss_source for q in u.processes}}\n"
        f"json.dump(out, open({str(tmp_path / 'out.json')!r}, 'w'))\n"
    )
    env = {**os.environ, "PYTHONPATH": "/nowhere", "GPUTOP_TRACKER_NO_CGROUP": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run([PY, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    on, off = out["True"], out["False"]
    assert on["on"] and set(on["pids"]) <= set(on["reported"]) and on["same"]
    assert on["labels"][str(on["pids"][0])] in IN_PROCESS  # the forked child, gone through os._exit
    assert not off["on"] and off["reported"] == [] and off["same"]


def test_sweep_leaves_a_fifo_that_is_read(tmp_path: Path) -> None:
    """A FIFO directory whose creator's pid is not visible here (a sampler in another PID namespace sharing
    /tmp) is left while someone reads the FIFO; a dead one (no reader) is removed."""
    from gputop_tracker.core.blocks.inbox import PREFIX, sweep

    live, dead = tmp_path / f"{PREFIX}999999999-aa", tmp_path / f"{PREFIX}999999998-bb"
    for d in (live, dead):
        d.mkdir()
        os.mkfifo(d / "blocks")
    reader = os.open(live / "blocks", os.O_RDONLY | os.O_NONBLOCK)
    try:
        sweep(str(tmp_path))
        assert live.exists() and not dead.exists()
    finally:
        os.close(reader)
    sweep(str(tmp_path))
    assert not live.exists()
