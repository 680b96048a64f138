"""gputop-tracker's probe: gputop-track puts this directory first on the launched command's PYTHONPATH, so every
Python process of the tree imports this file as `sitecustomize` at start-up. It takes its directory off `sys.path`,
hooks the exits of the process and its forks, and imports the sitecustomize it shadows (the user's own, or the
interpreter's) exactly as `site` would. At exit - a normal exit, `sys.exit`, an uncaught exception, or `os._exit`
(how multiprocessing children leave: fork, forkserver, pool workers) - it sends the process's line through the
session's FIFO (GPUTOP_TRACKER_BLOCKS): its VmHWM, its ru_maxrss, the children it reaped with theirs, and the peaks
of GPU allocators the program itself imported (read by the GPU half, gputop_probe_gpu.py beside it, loaded only
where the program imported torch, jax or cupy).
Should the program import `torch.cuda` itself, a finder on sys.meta_path that answers for that one name only
(`_finder`) lets the import run as always and then loads the GPU half, which hooks PyTorch's out-of-memory
observer: the allocator's state at each CUDA out-of-memory error goes through the same FIFO.
It reads `os.waitpid`'s children through `os.wait4` (same result to the caller) to list the children it reaped
with their ru_maxrss, so the tracker knows whether any process of the tree went unseen.

One file, loaded by the import system from its bytecode, which gputop-track writes before it launches (without
docstrings, as this text: a third less to load); a Python of another version writes its own in its first
process, also under PYTHONDONTWRITEBYTECODE (the directory is ours), through the bytecode writer beside it
(gputop_probe_cache.py). The files beside it are loaded only when needed, by the import system's own loader.
Everything here runs in every Python process of the tracked tree, and each function, comprehension and object
counts (loaded, run, torn down at exit; bench/bench_probe.py): /proc is read with os.read (no file objects), once
per file; `resource` (for ru_maxrss) is loaded off its file at exit only; the exit line is written as JSON here.

In a Python started with -S, `site` never runs: nothing here runs at start-up, and the directory stays on
`sys.path` (PYTHONPATH is read without `site`) until the program itself imports `sitecustomize`; then this file
takes its directory off and gives the program what it would get without us (the one it shadows, or ImportError),
with no hooks. gputop-track leaves PYTHONPATH alone where the command itself is such a Python (`core.blocks.probe`).
A `Tracker` loads this file into its own process under another name (`core.blocks.probe.InProcess`): then nothing
runs at import, and it calls `install`.

Rules: standard library only; parses in any Python (an old one only chains), hooks in 3.8+; never imports a
framework, never prints, never resets a statistic; every failure is silent. A process killed by a signal sends
nothing.
"""

import os
import sys
from time import time as _now

_DIR = os.path.dirname(os.path.abspath(__file__))
_FIFO = os.environ.get("GPUTOP_TRACKER_BLOCKS") or ""
_HISTORY = os.environ.get("GPUTOP_TRACKER_GPU_HISTORY") or ""  # --gpu-history: "ENTRIES,MAX_BYTES"
_MAX_REAPS = 4096  # entries of `_reaps` (the children listed, and its counters); past that the list is incomplete
_CHUNK = 60  # reaps per message (a message stays under PIPE_BUF: one atomic write)
_sent = [0]  # the pid that sent its exit report (a forked child inherits the parent's list)
# What this process knows of the children it reaped, in one dict, so that a fork clears it with one built-in call
# (no function of ours is held by the interpreter through its teardown): child pid -> (ru_maxrss in bytes, when);
# and, under keys no pid has, the sum of their faults (minflt + majflt), whether the list overflowed, and the
# children's faults when the probe started (children reaped before this image: a pyenv shim's helpers).
_reaps = {}  # type: dict
_FAULTS, _OVER, _CF0 = 0, -1, -2
_hooks = []  # type: list[tuple[str, object, object]]  # (name, ours, the interpreter's) of the waits we wrap
_real_exit = os._exit
_installed = []  # type: list[bool]  # True once the hooks are in (once per interpreter)
_hooked = []  # type: list[bool]  # True once the observer is hooked (once per process: forks inherit it)
_gpu = []  # type: list[dict]  # the GPU half's namespace, once loaded


def _find_spec(name, path=None, target=None):
    """`_finder`'s: on sys.meta_path until torch.cuda is imported, where any other name costs one comparison; for
    torch.cuda, the GPU half finds it as the import system would, and wraps its loader."""
    if name != "torch.cuda":
        return None
    try:
        return _gpu_half()["find_spec"](name, path, target, _finder, globals())  # type: ignore[index]
    except Exception:
        return None  # the GPU half cannot load (the package changed under a running job): the import as always


# the finder: a module object holding `find_spec` (a class would be built at every start, for this one method)
_finder = type(sys)("gputop_probe_torch_cuda")
_finder.find_spec = _find_spec  # type: ignore[attr-defined]


def _find_torch():
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None:  # a Tracker started after the program imported torch: the observer hooked now
        try:
            _gpu_half()["torch_cuda"](cuda, globals())  # type: ignore[index]
        except Exception:
            pass
    elif not _hooked and _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def _unfind():
    try:
        sys.meta_path.remove(_finder)
    except ValueError:
        pass


def _report(how):
    pid = os.getpid()
    if _sent[0] == pid or not _FIFO:
        return
    _sent[0] = pid
    try:
        import _signal  # the C module: `signal` builds its enums on import (a millisecond)

        old = _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGPIPE,))  # a closed FIFO: EPIPE, no signal
        try:
            report(pid, how, _FIFO, _reaps)
        finally:
            if _signal.SIGPIPE not in old:
                _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
    except BaseException:
        pass


def _at_exit():
    """The exit report. Then the interpreter's own waits back in `os` (where they are still ours) and the finder
    off sys.meta_path, so that little of ours lives on through the interpreter's teardown, which walks all it holds
    in each of its last collections (a third of the probe's cost, else). `os._exit` stays ours: a child that an
    exit function run after this one forks, and that leaves by it, still reports."""
    _report("exit")
    try:
        for name, ours, real in _hooks:
            if getattr(os, name, None) is ours:
                setattr(os, name, real)
        _unfind()
    except BaseException:
        pass


def _exit(status):
    _report("_exit")
    _real_exit(status)


def _note(pid, status, ru):
    if pid <= 0 or not (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
        return  # nothing reaped (WNOHANG), or a stop/continue report
    _reaps[_FAULTS] = _reaps.get(_FAULTS, 0) + ru.ru_minflt + ru.ru_majflt
    if len(_reaps) < _MAX_REAPS:
        _reaps[pid] = (ru.ru_maxrss * 1024, _now())
    else:
        _reaps[_OVER] = True


def _wrap_waits():
    wait4 = os.wait4
    wait3 = os.wait3

    def waitpid(pid, options):
        got, status, ru = wait4(pid, options)
        _note(got, status, ru)
        return got, status

    def wait():
        got, status, ru = wait4(-1, 0)
        _note(got, status, ru)
        return got, status

    def wait3_(options):
        got, status, ru = wait3(options)
        _note(got, status, ru)
        return got, status, ru

    def wait4_(pid, options):
        got, status, ru = wait4(pid, options)
        _note(got, status, ru)
        return got, status, ru

    for name, f, real in (
        ("waitpid", waitpid, os.waitpid),
        ("wait", wait, os.wait),
        ("wait3", wait3_, wait3),
        ("wait4", wait4_, wait4),
    ):
        f.__name__, f.__qualname__, f.__doc__ = real.__name__, real.__qualname__, real.__doc__
        f.__module__ = "posix"
        _hooks.append((name, f, real))
        setattr(os, name, f)


def install(fifo=None):
    """The exit hooks, in this process and the children it forks (also called by a `Tracker`)."""
    global _FIFO
    import atexit

    if fifo is not None:
        _FIFO = fifo
    if os._exit is not _exit:
        _exit.__qualname__, _exit.__doc__, _exit.__module__ = "_exit", _real_exit.__doc__, "posix"
        os._exit = _exit
    if not _installed:
        _installed.append(True)
        _reaps[_CF0] = _stat()[0]  # the faults of children reaped before us
        atexit.register(_at_exit)
        if hasattr(os, "wait4"):
            _wrap_waits()
        os.register_at_fork(after_in_child=_reaps.clear)  # a child starts with none reaped
    _find_torch()


# -- the exit report --


def report(pid, how, fifo, known):
    """The exit report of `pid`: the children it reaped (`known`: `_reaps`), in chunks, then its own line: its
    VmHWM, its ru_maxrss, what code blocks cleared, its children's faults, the GPU allocators' peaks. JSON written
    here (`json` costs a millisecond to import at exit): numbers, and names through `_str`."""
    now = _now()
    reaps = []
    for child, v in list(known.items()):  # a copy: another thread may reap meanwhile
        if child > 0:
            reaps.append([child, v[0], round(v[1], 3)])
    lines = []
    for i in range(0, len(reaps), _CHUNK):
        lines.append('{"k":"r","pid":%d,"name":"","t":%r,"reaps":%r}' % (pid, now, reaps[i : i + _CHUNK]))
    faults, started, name = _stat()
    status = _read("/proc/self/status")
    at = status.find(b"\nVmHWM:")
    hwm = int(status[at + 7 : status.index(b"kB", at)]) * 1024 if at >= 0 else 0
    # code blocks (gputop_tracker.api.blocks) reset VmHWM to measure themselves: the largest they cleared
    cleared = getattr(sys.modules.get("gputop_tracker.api.blocks"), "_reset_peak", None)
    cleared = cleared[0] if cleared and type(cleared[0]) is int else 0
    try:
        # ru_maxrss: the PID's peak over every image it ran, exec or not (VmHWM is the last image's), and whatever
        # it inherited from its parent before an exec
        ms = ',"ms":%d' % max(_resource().getrusage(0).ru_maxrss * 1024, cleared)  # 0: RUSAGE_SELF
    except Exception:
        ms = ',"ms":%d' % cleared if cleared else ""
    gpu = "[]"
    try:
        half = _gpu_half()
        if half:
            gpu = half["exit_lines"](lines, pid, name, now)  # its allocators' peaks; an uncaught OOM's line
    except Exception:  # the GPU half cannot load (the package changed under a running job): the rest is sent
        pass
    lines.append(
        '{"k":"x","pid":%d,"ppid":%d,"name":%s,"t":%r,"how":"%s","hwm":%d%s,"st":%d,"cf":%d,"rf":%d,"cf0":%d,"ga":%s}'
        % (
            pid,
            os.getppid(),
            _str(name),
            now,
            how,
            max(hwm, cleared),
            ms,
            started,
            faults,
            -1 if known.get(_OVER) else known.get(_FAULTS, 0),
            known.get(_CF0, 0),
            gpu,
        )
    )
    _send([(line + "\n").encode() for line in lines], fifo)


def _read(path):
    """A /proc file of this process, whole (a few hundred bytes), without a file object."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 16384)
    finally:
        os.close(fd)


def _resource():
    """The `resource` C module, loaded from its file in lib-dynload without the import system's search of every
    sys.path entry (half its cost); the program's own import of it is not changed (not put in sys.modules)."""
    loaded = sys.modules.get("resource")
    if loaded is not None:
        return loaded
    try:
        import _imp

        spec = sys.modules["_frozen_importlib"].ModuleSpec
        for d in sys.path:
            if d.endswith("lib-dynload"):
                for suffix in _imp.extension_suffixes():
                    try:
                        module = _imp.create_dynamic(spec("resource", None, origin=d + "/resource" + suffix))
                    except ImportError:
                        continue  # not this suffix
                    _imp.exec_dynamic(module)
                    return module
    except Exception:
        pass
    import resource  # a small C module

    return resource


def _stat():
    """(cminflt + cmajflt: the faults of every child it reaped, when it started in clock ticks since boot, its name),
    from one read of /proc/self/stat (fields 10, 12, 22 and 2)."""
    data = _read("/proc/self/stat")
    name, _, rest = data.partition(b" (")[2].rpartition(b")")
    fields = rest.split()
    return int(fields[8]) + int(fields[10]), int(fields[19]), name.decode("utf-8", "replace")[:64]


def _str(v):
    """A JSON string."""
    if v.isprintable() and '"' not in v and "\\" not in v:
        return '"' + v + '"'  # a name: nothing to escape (one pass in C, not one call per character)
    out = []
    for c in v:
        out.append(c if c >= " " and c not in '"\\' else "\\u%04x" % ord(c))
    return '"' + "".join(out) + '"'


def _gpu_half():
    """The GPU half's functions where the program imported a GPU framework (else None: nothing more loaded)."""
    if _gpu:
        return _gpu[0]
    loaded = sys.modules
    if "torch" not in loaded and "jax" not in loaded and "cupy" not in loaded:
        return None
    half = _cold("gputop_probe_gpu")
    _gpu.append(half)
    return half


def open_ours(path):
    """A non-blocking write end of the FIFO `path` only where it is surely the tracker's: a FIFO owned by this
    user, named directly (no link), in a directory (no link) that this user owns and no one else can enter; else -1
    and nothing is opened. The path came from the environment: after the run its directory is gone, and another
    user may have made one of that name holding a link to a file of theirs, or of root's. A regular file or a
    device is never opened (opening a device can act on it). Also used by code blocks (`gputop_tracker.api.blocks`).
    """
    head, _, name = path.rpartition("/")
    if not head.startswith("/") or not name:  # a relative path, or none: never ours
        return -1
    uid = os.geteuid()
    try:
        dfd = os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return -1
    try:
        st = os.fstat(dfd)
        if st.st_uid != uid or st.st_mode & 0o077:
            return -1
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if st.st_mode & 0o170000 != 0o010000 or st.st_uid != uid:  # S_ISFIFO
            return -1
        fd = os.open(name, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dfd)
    except OSError:
        return -1
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)  # what was opened, not what was looked at (it may have been replaced between)
        if st.st_mode & 0o170000 == 0o010000 and st.st_uid == uid:
            return fd
    except OSError:
        pass
    os.close(fd)
    return -1


def _send(lines, fifo):
    """Each line in one write, waiting up to a second in all for room (the exit report is worth the wait)."""
    import time

    fd = open_ours(fifo)
    if fd < 0:
        return  # no tracker reading (gone, or a program started outside it with our variables), or not ours
    deadline = time.monotonic() + 1.0
    try:
        for line in lines:
            while True:
                try:
                    os.write(fd, line)
                    break
                except BlockingIOError:
                    import select

                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    poller = select.poll()
                    poller.register(fd, select.POLLOUT)
                    poller.poll(min(left, 0.05) * 1000)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- the files beside this one, and this file's own bytecode where the import system keeps none --


def _cold(name):
    """The namespace of `name`.py beside this file (the GPU half; the bytecode writer), loaded when first needed,
    by the import system's own loader: from the bytecode kept for it (gputop-track writes it before it launches),
    else compiled (and kept, where the interpreter writes bytecode)."""
    path = os.path.join(_DIR, name + ".py")
    ns = {"__name__": name, "__file__": path}
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader(name, path)
    exec(loader.get_code(name), ns)
    return ns


def _cache_self():
    """This file's own bytecode, where the interpreter writes none (PYTHONDONTWRITEBYTECODE, -B) and the import
    system compiled this file (its docstring is here: ours has none), or found an older one: written once now by
    the bytecode writer, so that no later start compiles (a process's first compile costs some 5 ms)."""
    # -O: not ours to write; nowhere to keep it: the writer not even loaded
    if sys.flags.dont_write_bytecode and __doc__ is not None and not sys.flags.optimize and can_keep_bytecode(_DIR):
        _cold("gputop_probe_cache")["cache_self"](globals())


def can_keep_bytecode(directory):
    """Whether bytecode can be kept in `directory`'s __pycache__ (also gputop-track's test of the package's own
    directory, which else gets a private copy: `core.blocks.probe.probe_dir`)."""
    cache = os.path.join(directory, "__pycache__")
    if os.path.isdir(cache):
        return os.access(cache, os.W_OK)
    return not os.path.lexists(cache) and os.access(directory, os.W_OK)


def _chain():
    """Import the sitecustomize this one shadows, as `site` would; none: this module stays under the name."""
    ours = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the next one on sys.path: ours is off it)
    except ImportError as e:
        if getattr(e, "name", None) != "sitecustomize":
            raise  # an error inside the user's: `site` reports it, as it would have
        sys.modules["sitecustomize"] = ours  # type: ignore[assignment]


if __name__ == "sitecustomize":
    if getattr(sys.flags, "no_site", 0):  # no `site`: the entries as PYTHONPATH gave them (maybe relative)
        for _p in list(sys.path):
            if os.path.abspath(_p or ".") == _DIR:
                sys.path.remove(_p)
    while _DIR in sys.path:  # `site` made every entry absolute
        sys.path.remove(_DIR)
    if getattr(sys.flags, "no_site", 0) and sys.version_info >= (3, 8):
        # imported by the program itself in a Python started with -S: no hooks, what it would get without us
        sys.modules.pop("sitecustomize", None)
        import sitecustomize  # noqa: F401  (the next one on sys.path: ours is off it)
    else:
        if _FIFO and sys.version_info >= (3, 8):
            try:
                install()
            except Exception:
                pass
            try:
                _cache_self()  # after the hooks: its failure (the package changed under a running job) costs nothing
            except Exception:
                pass
        _chain()
