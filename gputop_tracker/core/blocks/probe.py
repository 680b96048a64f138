"""The in-process probe's place in the environment of the tracked program (the exit reports it sends are read
by `core.summary.probe`).

Launched commands get the probe's directory (`gputop_tracker/_probe`: sitecustomize.py, and the files it loads only
when needed) first on PYTHONPATH; a `Tracker` of its own process also installs the probe's exit hooks in it
(`InProcess`).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from gputop_tracker.core.summary.probe import python_without_probe

PROBE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "_probe")
SITE_FILE = os.path.join(PROBE_DIR, "sitecustomize.py")
# loaded by the probe only when needed: the program imported a GPU framework; the interpreter writes no bytecode
HALVES = ("gputop_probe_gpu.py", "gputop_probe_cache.py")
HISTORY_ENV = "GPUTOP_TRACKER_GPU_HISTORY"  # --gpu-history: "ENTRIES,MAX_BYTES" (the dump budget)


def history_setting(cfg: Any) -> str:
    """The probe's --gpu-history setting: how many entries PyTorch keeps, and the most bytes a snapshot may take
    (the OOM dump budget, --oom-dump-mb, which it is counted in)."""
    return f"{int(cfg.gpu_history)},{int(cfg.oom_dump_mb * 1e6)}"


def probe_environment(env: dict[str, str]) -> str | None:
    """Put the probe first on PYTHONPATH in `env` (the user's entries kept after it, ours once); the reason
    when it cannot be (None when done)."""
    if not os.path.isfile(SITE_FILE):
        return f"the probe's file is missing ({PROBE_DIR})"
    where = probe_dir()
    if ":" in where:
        return f"the probe's directory has a ':' in its name ({where}), which PYTHONPATH cannot hold"
    _compiled(where)
    old = env.get("PYTHONPATH", "")
    # an empty entry means the current directory: kept, as every other entry of the user's
    rest = [p for p in old.split(os.pathsep) if not _ours(p)] if old else []
    env["PYTHONPATH"] = os.pathsep.join([where, *rest])
    return None


COPIES = "probe"  # the private copies' directory, in the user's cache directory


def probe_dir() -> str:
    """The directory launched Pythons load the probe from: the package's own where this user can keep bytecode in
    it, else a private copy in this user's cache directory (one per content of the probe's files), so that a Python
    of another version than the tool's compiles the probe once, not at every start (in a read-only install, such as
    a cluster's shared software tree: 7-10 ms a Python process). The package's own where no copy can be made."""
    from gputop_tracker._probe.sitecustomize import can_keep_bytecode

    if can_keep_bytecode(PROBE_DIR):
        return PROBE_DIR
    try:
        return _private_copy()
    except OSError:
        return PROBE_DIR


KEEP_COPIES_S = 30 * 86400  # a copy no run used for this long goes, when a new one is made


def _private_copy() -> str:
    """The copy of the probe's files for their content (made now where missing), in a directory of this user's
    that no other user can change, nor any directory above it: its real path, OSError where there is none such.
    Every Python of the job looks this path up again at its start: a directory another user could rename or
    replace on the way would let them run their code in all of them."""
    import hashlib
    import shutil
    import tempfile

    from gputop_tracker.core.model.paths import cache_dir

    names = ("sitecustomize.py", *HALVES)
    sources = {}
    for name in names:
        with open(os.path.join(PROBE_DIR, name), "rb") as f:
            sources[name] = f.read()
    digest = hashlib.sha256(b"\0".join(sources[n] for n in names)).hexdigest()[:16]
    base = _made(str(cache_dir() / COPIES))
    target = os.path.join(base, digest)
    if not os.path.isdir(target):
        tmp = tempfile.mkdtemp(prefix=".new-", dir=base)  # 0700: whole before it gets its name
        try:
            for name, data in sources.items():
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(data)
            os.rename(tmp, target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.isdir(target):  # another run made it meanwhile: theirs is as good
                raise
        _prune(base, digest)
    _safe(target)
    for name in names:
        with open(os.path.join(target, name), "rb") as f:
            if f.read() != sources[name]:
                raise OSError(f"{target}: not the probe's files")
    os.utime(target)  # in use: kept by the next prune
    return target


def _made(path: str) -> str:
    """`path` made where missing, each directory made here private (0700); its real path, once every directory on
    it is one no other user can change (`_safe`)."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.lexists(p) and p != os.path.dirname(p):
        missing.append(p)
        p = os.path.dirname(p)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    real = os.path.realpath(path)
    _safe(real)
    return real


def _safe(path: str) -> None:
    """OSError unless `path` and every directory above it is one no other user can change: a directory (no link),
    owned by this user or root, and writable by no one else unless sticky (as /tmp: no one else can move or replace
    what is this user's in it)."""
    import stat

    uid = os.geteuid()
    p = path
    while True:
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (uid, 0):
            raise OSError(f"{p}: not a directory of this user's or root's")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise OSError(f"{p}: others can write it")
        if p == os.path.dirname(p):
            return
        p = os.path.dirname(p)


def _prune(base: str, keep: str) -> None:
    """Copies of earlier versions of the probe that no run used for KEEP_COPIES_S: removed (a job still running
    with one would only find no probe there: nothing else can be put in their place)."""
    import shutil
    import time

    old = time.time() - KEEP_COPIES_S
    for name in os.listdir(base):
        path = os.path.join(base, name)
        try:
            if name != keep and os.lstat(path).st_mtime < old:
                shutil.rmtree(path)
        except OSError:
            pass


def _ours(entry: str) -> bool:
    """Whether a PYTHONPATH entry is the probe's: the package's directory, or a private copy of it."""
    path = os.path.abspath(entry)
    if path == PROBE_DIR:
        return True
    from gputop_tracker.core.model.paths import cache_dir

    copies = cache_dir() / COPIES
    return os.path.dirname(path) in (os.path.abspath(copies), os.path.realpath(copies))


NO_SITE = "-S (no site import)"  # python_without_probe's reason for -S


def command_without_site(argv: list[str]) -> str | None:
    """Why the probe stays off for this command: it is a Python started with -S (on its command line, or on its
    `#!` line), which never imports `sitecustomize` at start-up but reads PYTHONPATH, so our directory would only be
    left on its `sys.path`. None otherwise. (A Python with -S further down the tree cannot be seen before it starts:
    the probe there steps aside when the program imports `sitecustomize` itself.)"""
    for words in (argv, _shebang(argv[0]) if argv else []):
        if words and os.path.basename(words[0]) == "env":  # `#!/usr/bin/env -S python3 -S`
            words = words[1:]
            while words and (words[0].startswith("-") or "=" in words[0]):  # env's own options, NAME=VALUE
                words = words[1:]
        if words and python_without_probe(os.path.basename(words[0]), words) == NO_SITE:
            return "the command is a Python started with -S (no site import): PYTHONPATH left as it is"
    return None


def _shebang(name: str) -> list[str]:
    """The interpreter and its options from the `#!` line of the program `name` runs (empty: none)."""
    path = name if "/" in name else shutil.which(name)
    try:
        with open(path or name, "rb") as f:
            head = f.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    line = head[2:].split(b"\n", 1)[0]
    return [w.decode("utf-8", "replace") for w in line.split()]


def _compiled(directory: str = PROBE_DIR) -> None:
    """The probe's bytecode for this interpreter, kept current in its __pycache__ (an editable install, or
    PYTHONDONTWRITEBYTECODE, leaves none; a full disk may have cut one short): a tracked Python of the same version
    then loads it instead of compiling the file at each start, and none loads a broken one (the import system
    would report that error at every start). Nothing happens when the directory cannot be written."""
    import importlib.util

    for name in ("sitecustomize.py", *HALVES):
        source = os.path.join(directory, name)
        try:
            cached = importlib.util.cache_from_source(source)
            if not _current(source, cached):
                _compile(source, cached)
                if not _current(source, cached):
                    os.unlink(cached)  # cut short (a full disk, a quota): the import system compiles instead
        except (OSError, ValueError):
            pass


def _current(source: str, cached: str) -> bool:
    """Whether `cached` is the bytecode we write for `source`, which the import system loads: its header (magic,
    flags 0, the source's mtime and size), its whole code, and no docstring."""
    import marshal

    from gputop_tracker._probe.gputop_probe_cache import header

    try:
        with open(cached, "rb") as f:
            data = f.read()
        if data[:16] != header(source):
            return False
    except OSError:
        return False
    try:
        code = marshal.loads(data[16:])
    except (ValueError, EOFError, TypeError):
        return False
    # ours has no docstrings (pip writes bytecode with them: a third more to load at every start)
    return not (code.co_consts and isinstance(code.co_consts[0], str) and code.co_consts[0].startswith("gputop"))


def _compile(source: str, cached: str) -> None:
    """The bytecode the import system (the probe) or the probe (the GPU half) loads: without docstrings, a third
    less to load at every start (the probe reads none)."""
    import py_compile  # only when the cache is missing or stale: it loads traceback and textwrap (~2 ms)

    try:
        # a timestamp pyc, also where SOURCE_DATE_EPOCH is set (the probe reads only that kind)
        py_compile.compile(
            source,
            cfile=cached,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
            optimize=2,
        )
    except py_compile.PyCompileError:
        pass


def remove_probe_path(env: dict[str, str]) -> None:
    """Our entry off PYTHONPATH again (the variable as it was when it held only ours: unset)."""
    old = env.get("PYTHONPATH")
    if old is None:
        return
    rest = [p for p in old.split(os.pathsep) if not _ours(p)]
    if rest != [""] and rest:
        env["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        env.pop("PYTHONPATH", None)


class InProcess:
    """A `Tracker` of its own process: the probe's exit hooks here (so the children it forks report) and the
    probe on PYTHONPATH for the Python processes it starts, while it tracks; `off()` puts both back."""

    def __init__(self, fifo: str, history: str = "") -> None:
        import importlib.util

        self.old_path = os.environ.get("PYTHONPATH")
        self.old_history = os.environ.get(HISTORY_ENV)
        self.hooks: Any = None
        if history:  # the probe reads it as it loads, here and in the Python processes this one starts
            os.environ[HISTORY_ENV] = history
        spec = importlib.util.spec_from_file_location("gputop_tracker._probe_hooks", SITE_FILE)
        if spec is None or spec.loader is None or probe_environment(os.environ) is not None:  # type: ignore[arg-type]
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.install(fifo)
        self.hooks = module

    def off(self) -> None:
        if self.hooks is not None:
            _uninstall(self.hooks)
            self.hooks = None
        for name, old in (("PYTHONPATH", self.old_path), (HISTORY_ENV, self.old_history)):
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def _uninstall(probe: Any) -> None:
    """A `Tracker` stopped: nothing is sent any more (its FIFO is ""), the finder is off sys.meta_path, and
    os._exit is the interpreter's again; the waits stay wrapped (the program may hold them: they return what the
    interpreter's would)."""
    probe._FIFO = ""
    probe._unfind()
    if os._exit is probe._exit:
        os._exit = probe._real_exit
