"""gputop-tracker's probe: a tracked Python process tells the tracker its own peaks as it exits.

gputop-track puts this file's directory first on the launched command's PYTHONPATH, so every Python process of
the tree imports it at start-up as `sitecustomize`. It then takes its directory off `sys.path`, imports the
sitecustomize it shadows (the user's own, or the interpreter's) exactly as `site` would have (usercustomize is
imported by `site` itself afterwards, as always), and at exit - a normal exit, `sys.exit`, an uncaught exception,
or `os._exit` (how multiprocessing children leave: fork, forkserver, pool workers) - sends one line through the
session's FIFO (GPUTOP_TRACKER_BLOCKS): its VmHWM and the peaks of GPU allocators the program itself imported.
It reads `os.waitpid`'s children through `os.wait4` (same result to the caller) to list the children it reaped
with their ru_maxrss, so the tracker knows whether any process of the tree went unseen.

Rules: standard library only, any Python 3.8+; never imports a framework, never prints, never resets a
statistic; every failure is silent. A process killed by a signal sends nothing.
"""

import os
import sys

_DIR = os.path.dirname(os.path.abspath(__file__))
_FIFO = os.environ.get("GPUTOP_TRACKER_BLOCKS") or ""
_MAX_REAPS = 4096  # children listed per process; past that the list is incomplete (and said so)
_CHUNK = 100  # reaps per message (a message stays under PIPE_BUF: one atomic write)
_sent = [0]  # the pid that sent its exit report (a forked child inherits the parent's list)
_reaps = {}  # type: dict[int, int]  # child pid -> ru_maxrss (bytes) of the children this process reaped
_cf0 = [0]  # child faults when the probe started: children reaped before this image (a pyenv shim's helpers)
_tally = [0, False]  # sum of faults (minflt + majflt) of those reaps, and whether the list overflowed
_real_exit = os._exit
_installed = []  # type: list[bool]  # True once the hooks are in (once per interpreter)


def _unpath():
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _DIR]


def _chain():
    """Import the sitecustomize this one shadows, as `site` would; none: this module stays under the name."""
    ours = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the next one on sys.path: ours is off it)
    except ImportError as e:
        if getattr(e, "name", None) != "sitecustomize":
            raise  # an error inside the user's: `site` reports it, as it would have
        sys.modules["sitecustomize"] = ours  # type: ignore[assignment]


def _status_hwm():
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _hwm():
    """VmHWM now, and the largest one code blocks cleared (they reset it to measure themselves)."""
    hwm = _status_hwm()
    blocks = sys.modules.get("gputop_tracker.api.blocks")
    cleared = getattr(blocks, "_reset_peak", None)
    if cleared and isinstance(cleared[0], int):
        hwm = max(hwm, cleared[0])
    return hwm


def _child_faults():
    """cminflt + cmajflt of this process: the faults of every child it reaped (as the kernel adds them)."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[8]) + int(fields[10])


def _torch():
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return []
    out = []
    for i in range(cuda.device_count()):
        alloc, reserved = int(cuda.max_memory_allocated(i)), int(cuda.max_memory_reserved(i))
        if alloc or reserved:
            out.append(["torch", "cuda:%d" % i, alloc, reserved, "peak"])
    return out


def _jax():
    bridge = sys.modules.get("jax._src.xla_bridge")
    backends = getattr(bridge, "_backends", None)  # filled only once the program used a device
    out = []
    for backend in list((backends or {}).values()):
        for d in backend.local_devices():
            stats = d.memory_stats() or {}
            peak = stats.get("peak_bytes_in_use")
            if peak is not None:
                reserved = stats.get("peak_bytes_reserved", stats.get("bytes_reserved"))
                out.append(["jax", "%s:%d" % (d.platform, d.id), int(peak), reserved, "peak"])
    return out


def _cupy():
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return []
    pool = cupy.get_default_memory_pool()  # it keeps no peak: its size at exit, a lower bound of the peak
    used, total = int(pool.used_bytes()), int(pool.total_bytes())
    return [["cupy", "cuda", used, total, "at_exit"]] if total else []


def _allocators():
    out = []
    for read in (_torch, _jax, _cupy):
        try:
            out.extend(read())
        except Exception:
            pass
    return out[:16]


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


def _messages(pid, how):
    import time

    now = time.time()
    reaps = list(_reaps.items())
    out = [
        {"k": "r", "pid": pid, "name": "", "t": now, "reaps": reaps[i : i + _CHUNK]}
        for i in range(0, len(reaps), _CHUNK)
    ]
    exit_msg = {"k": "x", "pid": pid, "ppid": os.getppid(), "name": _comm(), "t": now, "how": how}
    exit_msg["hwm"] = _hwm()
    exit_msg["cf"] = _child_faults()
    exit_msg["rf"] = -1 if _tally[1] else _tally[0]
    exit_msg["cf0"] = _cf0[0]
    exit_msg["ga"] = _allocators()
    out.append(exit_msg)
    return [_json(m).encode() + b"\n" for m in out]


def _send(lines):
    """Each line in one write, waiting up to a second in all for room (the exit report is worth the wait)."""
    import time

    try:
        fd = os.open(_FIFO, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # no tracker reading (gone, or a program started outside it with our variables)
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


def _report(how):
    pid = os.getpid()
    if _sent[0] == pid or not _FIFO:
        return
    _sent[0] = pid
    try:
        import _signal  # the C module: `signal` builds its enums on import (a millisecond)

        old = _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGPIPE,))  # a closed FIFO: EPIPE, no signal
        try:
            _send(_messages(pid, how))
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
        _reaps[pid] = ru.ru_maxrss * 1024
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
        _exit.__qualname__, _exit.__doc__ = "_exit", _real_exit.__doc__
        os._exit = _exit
    if not _installed:
        _installed.append(True)
        _cf0[0] = _child_faults()
        atexit.register(_at_exit)
        if hasattr(os, "wait4"):
            _wrap_waits()
        os.register_at_fork(after_in_child=_forked)


def uninstall():
    """A `Tracker` stopped: os._exit is the interpreter's again, and nothing is sent any more (the waits stay
    wrapped: the program may hold them; they return what the interpreter's would)."""
    global _FIFO
    _FIFO = ""
    if os._exit is _exit:
        os._exit = _real_exit


if __name__ == "sitecustomize":
    _unpath()
    if _FIFO and sys.version_info >= (3, 8):  # older ones only chain (this file still parses in 2.7)
        try:
            install()
        except Exception:
            pass
    _chain()
