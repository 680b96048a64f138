"""The probe comes from bytecode kept in its own __pycache__: written by gputop-track before it launches, or by the
probe in the first process of another Python version (also under PYTHONDONTWRITEBYTECODE: the directory is ours),
loaded after, rewritten when stale, never left broken, and never a reason for a process not to report."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop_tracker.core.blocks import probe as probe_module
from gputop_tracker.core.blocks.probe import PROBE_DIR

PY = sys.executable
CODE = "x = bytearray(24 << 20)"  # a 24 MiB peak the report must show


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    """A copy of the probe with no bytecode at all (a fresh install, or another Python version than the tool's)."""
    d = tmp_path / "probe"
    shutil.copytree(PROBE_DIR, d, ignore=shutil.ignore_patterns("__pycache__"))
    return d


def _run(probe: Path, tmp_path: Path, umask: int = 0o022) -> dict:
    """One probed Python under PYTHONDONTWRITEBYTECODE; its exit line, read from a FIFO of ours."""
    box = tmp_path / "fifo"
    box.mkdir(mode=0o700, exist_ok=True)
    fifo = box / "blocks"
    if not fifo.exists():
        os.mkfifo(fifo)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        env = {**os.environ, "PYTHONPATH": str(probe), "GPUTOP_TRACKER_BLOCKS": str(fifo)}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        p = subprocess.run([PY, "-c", CODE], env=env, capture_output=True, text=True, timeout=60, umask=umask)
        assert p.returncode == 0 and not p.stderr, p.stderr
        data = b""
        while True:
            try:
                chunk = os.read(rfd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(rfd)
    lines = [json.loads(line) for line in data.decode().splitlines()]
    exits = [m for m in lines if m.get("k") == "x"]
    assert len(exits) == 1, lines
    return exits[0]


def _cache(probe: Path, name: str = "sitecustomize") -> Path:
    return probe / "__pycache__" / f"{name}.{sys.implementation.cache_tag}.pyc"


def _header_matches(probe: Path) -> bool:
    st = (probe / "sitecustomize.py").stat()
    head = _cache(probe).read_bytes()[:16]
    want = (
        importlib.util.MAGIC_NUMBER
        + b"\0\0\0\0"
        + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    )
    return head == want


DOC = b"gputop-tracker's probe: "  # the start of the probe's docstring, which the bytecode it keeps leaves out


def test_the_probe_is_compiled_once_then_loaded(probe: Path, tmp_path: Path) -> None:
    first = _run(probe, tmp_path)
    assert first["hwm"] >= 24 << 20
    assert first["ms"] >= first["hwm"]  # ru_maxrss, from `resource` loaded off its file: spans every image
    cache = _cache(probe)
    assert cache.is_file() and _header_matches(probe)  # written although the process may write no bytecode
    assert DOC in (probe / "sitecustomize.py").read_bytes() and DOC not in cache.read_bytes()  # a third less to load
    before = cache.stat()
    second = _run(probe, tmp_path)
    assert second["hwm"] >= 24 << 20
    after = cache.stat()
    # loaded, not compiled again: a compile writes a new file renamed over the old one (a new inode)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not [p for p in cache.parent.iterdir() if p.name.endswith(".tmp")]
    # where the interpreter writes bytecode itself, the probe reads nothing of its own cache at start-up
    os.unlink(cache)
    env = {**os.environ, "PYTHONPATH": str(probe), "GPUTOP_TRACKER_BLOCKS": str(tmp_path / "none" / "blocks")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    p = subprocess.run([PY, "-c", "pass"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stderr and _header_matches(probe)  # the import system's own


def test_a_stale_cache_is_compiled_again_and_a_broken_one_never_kept(probe: Path, tmp_path: Path) -> None:
    _run(probe, tmp_path)
    cache, source = _cache(probe), probe / "sitecustomize.py"
    st = source.stat()
    os.utime(source, (st.st_atime, st.st_mtime + 10))  # the source changed (an upgrade in place)
    old = cache.stat().st_ino
    assert _run(probe, tmp_path)["hwm"] >= 24 << 20
    assert cache.stat().st_ino != old and _header_matches(probe)
    good = cache.read_bytes()
    # the right header, broken code (a torn copy, a full disk): gputop-track rewrites it before it launches
    cache.write_bytes(good[:16] + b"\xff" * 64)
    probe_module._compiled(str(probe))
    assert _header_matches(probe) and len(cache.read_bytes()) > 1000
    assert _run(probe, tmp_path)["hwm"] >= 24 << 20
    # and one it cannot write whole is removed, never left for the import system to fail on at every start
    cache.write_bytes(good[:16] + b"\xff" * 64)
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
    code += f"from gputop_tracker.core.blocks import probe\nprobe._compiled({str(probe)!r})"
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, preexec_fn=_limited_file_size)
    assert p.returncode == 0, p.stderr
    assert not cache.exists()


def test_no_cache_where_none_can_be_written_and_the_report_still_comes(probe: Path, tmp_path: Path) -> None:
    (probe / "__pycache__").write_text("not a directory")
    assert _run(probe, tmp_path)["hwm"] >= 24 << 20
    assert (probe / "__pycache__").read_text() == "not a directory"
    assert sorted(p.name for p in probe.iterdir()) == sorted(
        ["__pycache__", *(p.name for p in Path(PROBE_DIR).glob("*.py"))]
    )


def test_the_cache_is_never_writable_by_others_whatever_the_umask(probe: Path, tmp_path: Path) -> None:
    _run(probe, tmp_path, umask=0)
    for p in (probe / "__pycache__", _cache(probe)):
        assert stat.S_IMODE(p.stat().st_mode) & 0o022 == 0, (p, oct(p.stat().st_mode))


def _limited_file_size() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))  # Python ignores SIGXFSZ: writes past it fail


def test_a_short_write_leaves_no_broken_bytecode(probe: Path, tmp_path: Path) -> None:
    """A full disk, a quota or a file-size limit cuts the bytecode's write short: nothing is renamed into place
    (a cut-off stub bytecode with a valid header made every later Python print "Error in sitecustomize")."""
    env = {**os.environ, "PYTHONPATH": str(probe), "PYTHONDONTWRITEBYTECODE": "1", "GPUTOP_TRACKER_BLOCKS": "/nowhere"}
    p = subprocess.run(
        [PY, "-c", "pass"], env=env, capture_output=True, text=True, timeout=60, preexec_fn=_limited_file_size
    )
    assert p.returncode == 0 and not p.stderr, p.stderr
    cache = probe / "__pycache__"
    assert not cache.is_dir() or not list(cache.iterdir())  # nothing whole was written, so nothing is there
    assert _run(probe, tmp_path)["hwm"] >= 24 << 20  # the next process: no error, its report, the cache written
    assert _cache(probe).is_file() and _cache(probe, "sitecustomize").is_file()


def test_import_torch_cuda_works_when_the_gpu_half_cannot_load(probe: Path, tmp_path: Path) -> None:
    """The package changed under a running job (its GPU half renamed or gone): the program's own import of
    torch.cuda goes on as without the probe, never an error from us."""
    fake = tmp_path / "fake"
    (fake / "torch" / "cuda").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("")
    (fake / "torch" / "cuda" / "__init__.py").write_text("x = 1\n")
    gpu = probe / "gputop_probe_gpu.py"
    code = f"import os, torch\nos.rename({str(gpu)!r}, {str(gpu)!r} + '.gone')\nimport torch.cuda\nprint(torch.cuda.x)"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(probe), str(fake)]),
        "GPUTOP_TRACKER_BLOCKS": str(tmp_path / "nowhere" / "blocks"),
    }
    p = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "1" and not p.stderr, p.stderr


def test_a_read_only_install_loads_a_private_copy_that_keeps_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the package's probe directory cannot keep bytecode (a read-only install, such as a cluster's shared
    software tree; here its __pycache__ name is taken by a file), gputop-track puts a private copy of the probe,
    in the user's cache directory, first on PYTHONPATH: a Python of another version than the tool's then compiles
    the probe once there, not at every start. One copy per content of the probe's files; never a directory
    another user could write."""
    ro = tmp_path / "ro"
    shutil.copytree(PROBE_DIR, ro, ignore=shutil.ignore_patterns("__pycache__"))
    (ro / "__pycache__").write_text("not a directory")
    monkeypatch.setattr(probe_module, "PROBE_DIR", str(ro))
    monkeypatch.setattr(probe_module, "SITE_FILE", str(ro / "sitecustomize.py"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = {"PYTHONPATH": "/elsewhere"}
    assert probe_module.probe_environment(env) is None
    first, rest = env["PYTHONPATH"].split(os.pathsep)
    copy = Path(first)
    assert rest == "/elsewhere" and copy.parent == tmp_path / "cache" / "gputop-tracker" / "probe"
    assert stat.S_IMODE(copy.stat().st_mode) == 0o700
    assert sorted(p.name for p in copy.glob("*.py")) == sorted(p.name for p in ro.glob("*.py"))
    assert _cache(copy).is_file() and _header_matches(copy)  # this interpreter's, written before the launch
    # another version's first process (no bytecode of its own there) keeps it; every later one loads it
    _cache(copy).unlink()
    assert _run(copy, tmp_path)["hwm"] >= 24 << 20 and _header_matches(copy)
    kept = _cache(copy).stat()
    assert _run(copy, tmp_path)["hwm"] >= 24 << 20 and _cache(copy).stat().st_ino == kept.st_ino
    # the same files, the same copy; changed files (an upgrade), a new one
    again: dict[str, str] = {}
    assert probe_module.probe_environment(again) is None and again["PYTHONPATH"] == first
    (ro / "sitecustomize.py").write_text((ro / "sitecustomize.py").read_text() + "\n# changed\n")
    changed: dict[str, str] = {}
    assert probe_module.probe_environment(changed) is None
    assert changed["PYTHONPATH"] != first and Path(changed["PYTHONPATH"]).parent == copy.parent
    # our entry, whichever, comes off again, the user's stays
    probe_module.remove_probe_path(env)
    assert env["PYTHONPATH"] == "/elsewhere"
    # a copy no run used for a month goes when a new one is made; one used since stays
    stale, recent = copy.parent / ("0" * 16), copy.parent / ("1" * 16)
    for d in (stale, recent):
        d.mkdir(mode=0o700)
    month = time.time() - 31 * 86400
    os.utime(stale, (month, month))
    (ro / "sitecustomize.py").write_text((ro / "sitecustomize.py").read_text() + "\n# changed again\n")
    assert probe_module.probe_environment({}) is None
    assert not stale.exists() and recent.exists() and copy.exists()
    # a cache directory someone else can write, or any directory above it, is never used: the package's own then
    copy.parent.chmod(0o777)
    assert probe_module.probe_dir() == str(ro)
    copy.parent.chmod(0o700)
    assert probe_module.probe_dir() != str(ro)
    shared = tmp_path / "shared"  # as XDG_CACHE_HOME=/tmp/$USER that another user made first: writable by all
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared / "cache"))
    assert probe_module.probe_dir() == str(ro)
    shared.chmod(0o1777)  # sticky, as /tmp: no one else can move what is ours in it
    umask = os.umask(0)
    try:
        assert Path(probe_module.probe_dir()).parent == shared / "cache" / "gputop-tracker" / "probe"
    finally:
        os.umask(umask)
    for d in (shared / "cache", shared / "cache" / "gputop-tracker"):  # made private, whatever the umask
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_a_bytecode_writer_that_cannot_load_costs_the_report_nothing(probe: Path, tmp_path: Path) -> None:
    """The package changed under a running job (the writer gone) where a process would write the probe's
    bytecode: the hooks are in first, so its exit report still comes, and nothing is printed."""
    (probe / "gputop_probe_cache.py").unlink()
    assert _run(probe, tmp_path)["hwm"] >= 24 << 20  # _run: PYTHONDONTWRITEBYTECODE, nothing on stderr
    assert not _cache(probe).exists()
