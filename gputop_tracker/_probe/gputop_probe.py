"""gputop-tracker's probe, its body: loaded by sitecustomize.py beside it (the stub Python imports at start-up) into
the stub's own namespace, from bytecode the stub keeps in __pycache__. At start-up it hooks the exits of the process
and its forks; at exit - a normal exit, `sys.exit`, an uncaught exception, or `os._exit` (how multiprocessing
children leave: fork, forkserver, pool workers) - it sends the process's line through the session's FIFO
(GPUTOP_TRACKER_BLOCKS): its VmHWM, its ru_maxrss, the children it reaped with theirs, and the peaks of GPU
allocators the program itself imported (read by the GPU half, gputop_probe_gpu.py, loaded only where the
program imported torch, jax or cupy).
Should the program import `torch.cuda` itself, a finder on sys.meta_path that answers for that one name only
(`_TorchCuda`) lets the import run as always and then loads gputop_probe_gpu.py beside it, which hooks PyTorch's
out-of-memory observer: the allocator's state at each CUDA out-of-memory error goes through the same FIFO.
It reads `os.waitpid`'s children through `os.wait4` (same result to the caller) to list the children it reaped
with their ru_maxrss, so the tracker knows whether any process of the tree went unseen.

Rules: standard library only, any Python 3.8+; never imports a framework, never prints, never resets a
statistic; every failure is silent. A process killed by a signal sends nothing.
"""

import os
import sys
from time import time as _now

_DIR = os.path.dirname(os.path.abspath(__file__))  # the stub's: the same directory

_FIFO = os.environ.get("GPUTOP_TRACKER_BLOCKS") or ""
_MAX_REAPS = 4096  # children listed per process; past that the list is incomplete (and said so)
_sent = [0]  # the pid that sent its exit report (a forked child inherits the parent's list)
_reaps = {}  # type: dict[int, tuple[int, float]]  # child pid -> (ru_maxrss in bytes, when) of the children it reaped
_cf0 = [0]  # child faults when the probe started: children reaped before this image (a pyenv shim's helpers)
_tally = [0, False]  # sum of faults (minflt + majflt) of those reaps, and whether the list overflowed
_real_exit = os._exit
_installed = []  # type: list[bool]  # True once the hooks are in (once per interpreter)


_HISTORY = os.environ.get("GPUTOP_TRACKER_GPU_HISTORY") or ""  # --gpu-history: "ENTRIES,MAX_BYTES"


def _fifo():
    return _FIFO


def _torch_cuda(cuda):
    """The program imported torch.cuda: PyTorch's out-of-memory observer reports through the FIFO (once)."""
    if _hooked or not _FIFO:
        return
    _hooked.append(True)
    try:
        half = _gpu_half()  # torch is in sys.modules: never None here
        half["attach"](cuda, _fifo, _HISTORY, globals())  # type: ignore[index]
    except Exception:
        pass


class _TorchCuda(object):
    """On sys.meta_path until torch.cuda is imported: any other name costs one comparison."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch.cuda":
            return None
        try:
            finders = sys.meta_path[sys.meta_path.index(self) + 1 :]
        except ValueError:
            return None
        for finder in finders:  # as the import system would go on: their spec, their errors
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if getattr(spec.loader, "exec_module", None) is not None:
            try:
                half = _gpu_half()  # torch is in sys.modules (torch.cuda is imported from it)
                if half is not None:
                    spec.loader = half["Loader"](spec.loader, spec, _unfind, _torch_cuda)
            except Exception:
                pass  # the GPU half cannot load (the package changed under a running job): the import as always
        return spec


_finder = _TorchCuda()
_hooked = []  # type: list[bool]  # True once the observer is hooked (once per process: forks inherit it)


def _find_torch():
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None:
        _torch_cuda(cuda)  # a Tracker started after the program imported torch
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
            report(pid, how, _FIFO, _reaps, _tally, _cf0[0])
        finally:
            if _signal.SIGPIPE not in old:
                _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
    except BaseException:
        pass


def _at_exit():
    _report("exit")


def _exit(status):
    _report("_exit")
    _real_exit(status)


def _note(pid, status, ru):
    if pid <= 0 or not (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
        return  # nothing reaped (WNOHANG), or a stop/continue report
    _tally[0] += ru.ru_minflt + ru.ru_majflt
    if len(_reaps) < _MAX_REAPS:
        _reaps[pid] = (ru.ru_maxrss * 1024, _now())
    else:
        _tally[1] = True


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
        setattr(os, name, f)


def _forked():
    _cf0[0] = 0
    _reaps.clear()
    _tally[:] = [0, False]


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
        _cf0[0] = _stat()[0]  # the faults of children reaped before us
        atexit.register(_at_exit)
        if hasattr(os, "wait4"):
            _wrap_waits()
        os.register_at_fork(after_in_child=_forked)
    _find_torch()


def uninstall():
    """A `Tracker` stopped: os._exit is the interpreter's again, and nothing is sent any more (the waits stay
    wrapped: the program may hold them; they return what the interpreter's would)."""
    global _FIFO
    _FIFO = ""
    _unfind()
    if os._exit is _exit:
        os._exit = _real_exit


# -- the exit report --

_CHUNK = 60  # reaps per message (a message stays under PIPE_BUF: one atomic write)


def report(pid, how, fifo, reaps, tally, cf0):
    """The exit report of `pid`: its reap list (in chunks), then its own line."""
    _send(_messages(pid, how, reaps, tally, cf0), fifo)


def _status_hwm():
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _cleared():
    """The largest VmHWM code blocks cleared in this process (they reset it to measure themselves), or 0."""
    blocks = sys.modules.get("gputop_tracker.api.blocks")
    cleared = getattr(blocks, "_reset_peak", None)
    return cleared[0] if cleared and isinstance(cleared[0], int) else 0


def _maxrss():
    """ru_maxrss of this PID (bytes): its peak over every image it ran, exec or not (VmHWM is the last image's),
    and whatever it inherited from its parent before an exec."""
    return _resource().getrusage(0).ru_maxrss * 1024  # 0: RUSAGE_SELF


def _resource():
    """The `resource` C module, loaded from its file in lib-dynload without the import system's search of every
    sys.path entry (half its cost); the program's own import of it is not changed (not put in sys.modules)."""
    loaded = sys.modules.get("resource")
    if loaded is not None:
        return loaded
    try:
        import _imp

        for d in sys.path:
            if d.endswith("lib-dynload"):
                for suffix in _imp.extension_suffixes():
                    path = os.path.join(d, "resource" + suffix)
                    if os.path.isfile(path):
                        spec = sys.modules["_frozen_importlib"].ModuleSpec("resource", None, origin=path)
                        module = _imp.create_dynamic(spec)
                        _imp.exec_dynamic(module)
                        return module
    except Exception:
        pass
    import resource  # a small C module

    return resource


def _stat():
    """(cminflt + cmajflt: the faults of every child it reaped, when it started in clock ticks since boot), from one
    read of /proc/self/stat (fields 10, 12 and 22)."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[8]) + int(fields[10]), int(fields[19])


def _comm():
    try:
        with open("/proc/self/comm", "rb") as f:
            return f.read().strip().decode("utf-8", "replace")[:64]
    except OSError:
        return ""


def _json(v):
    """JSON of ints, floats, strings, None and lists (json itself costs a millisecond to import at exit)."""
    if isinstance(v, str):
        return '"' + "".join(c if c >= " " and c not in '"\\' else "\\u%04x" % ord(c) for c in v) + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_json(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(_json(k) + ":" + _json(x) for k, x in v.items()) + "}"
    if v is None or isinstance(v, bool):
        return "null" if v is None else "true" if v else "false"
    return repr(v) if isinstance(v, (int, float)) else "null"


_gpu = []  # type: list[dict]  # the GPU half's namespace, once loaded


def _gpu_half():
    """The GPU half's functions where the program imported a GPU framework (else None: nothing more loaded)."""
    if _gpu:
        return _gpu[0]
    if not any(name in sys.modules for name in ("torch", "jax", "cupy")):
        return None
    half = {"__name__": "gputop_probe_gpu", "__file__": os.path.join(_DIR, "gputop_probe_gpu.py")}  # type: dict
    exec(_code("gputop_probe_gpu"), half)  # type: ignore[name-defined]  # noqa: F821  (the stub's loader)
    _gpu.append(half)
    return half


def _messages(pid, how, reaps, tally, cf0):
    import time

    now = time.time()
    reaps = [[child, maxrss, round(t, 3)] for child, (maxrss, t) in reaps.items()]
    out = [
        {"k": "r", "pid": pid, "name": "", "t": now, "reaps": reaps[i : i + _CHUNK]}
        for i in range(0, len(reaps), _CHUNK)
    ]
    exit_msg = {"k": "x", "pid": pid, "ppid": os.getppid(), "name": _comm(), "t": now, "how": how}
    cleared = _cleared()
    exit_msg["hwm"] = max(_status_hwm(), cleared)
    try:
        exit_msg["ms"] = _maxrss()
    except Exception:
        pass
    child_faults, exit_msg["st"] = _stat()
    if cleared:
        exit_msg["ms"] = max(exit_msg.get("ms", 0), cleared)
    exit_msg["cf"] = child_faults
    exit_msg["rf"] = -1 if tally[1] else tally[0]
    exit_msg["cf0"] = cf0
    gpu = _gpu_half()
    exit_msg["ga"] = gpu["allocators"]() if gpu else []
    oom = gpu["uncaught_oom"]() if gpu else None
    if oom is not None and oom.get("req") is not None:
        oom.update(k="o", pid=pid, name=exit_msg["name"], t=now, n=1, when="exit")
        out.append(oom)
    out.append(exit_msg)
    return [_json(m).encode() + b"\n" for m in out]


def open_ours(path):
    """A non-blocking write end of the FIFO `path` only where it is surely the tracker's: a FIFO owned by this
    user, named directly (no link), in a directory (no link) that this user owns and no one else can enter; else -1
    and nothing is opened. The path came from the environment: after the run its directory is gone, and another
    user may have made one of that name holding a link to a file of theirs, or of root's. A regular file or a
    device is never opened (opening a device can act on it). Also used by code blocks (`gputop_tracker.api.blocks`).
    """
    import stat

    head, name = os.path.split(path)
    if not head or not name or not os.path.isabs(head):
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
        if not stat.S_ISFIFO(st.st_mode) or st.st_uid != uid:
            return -1
        fd = os.open(name, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dfd)
    except OSError:
        return -1
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)  # what was opened, not what was looked at (it may have been replaced between)
        if stat.S_ISFIFO(st.st_mode) and st.st_uid == uid:
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
