"""gputop-tracker's probe: a tracked Python process tells the tracker its own peaks as it exits.

gputop-track puts this file's directory first on the launched command's PYTHONPATH, so every Python process of
the tree imports it at start-up as `sitecustomize`. It then takes its directory off `sys.path`, imports the
sitecustomize it shadows (the user's own, or the interpreter's) exactly as `site` would have (usercustomize is
imported by `site` itself afterwards, as always), and at exit - a normal exit, `sys.exit`, an uncaught exception,
or `os._exit` (how multiprocessing children leave: fork, forkserver, pool workers) - sends one line through the
session's FIFO (GPUTOP_TRACKER_BLOCKS): its VmHWM and the peaks of GPU allocators the program itself imported
(gputop_probe_report.py beside it, loaded only at exit).
Should the program import `torch.cuda` itself, a finder on sys.meta_path that answers for that one name only
(`_TorchCuda`) lets the import run as always and then loads gputop_probe_oom.py beside it, which hooks PyTorch's
out-of-memory observer: the allocator's state at each CUDA out-of-memory error goes through the same FIFO.
It reads `os.waitpid`'s children through `os.wait4` (same result to the caller) to list the children it reaped
with their ru_maxrss, so the tracker knows whether any process of the tree went unseen.

Rules: standard library only, any Python 3.8+; never imports a framework, never prints, never resets a
statistic; every failure is silent. A process killed by a signal sends nothing.

In a Python started with -S, `site` never runs: nothing here runs at start-up, and the directory stays on
`sys.path` (PYTHONPATH is read without `site`) until the program itself imports `sitecustomize`; then this file
takes its directory off and gives the program what it would get without us (the one it shadows, or ImportError),
with no hooks. gputop-track leaves PYTHONPATH alone where the command itself is such a Python (`core.blocks.probe`).
"""

import os
import sys
from time import time as _now

_DIR = os.path.dirname(os.path.abspath(__file__))
_FIFO = os.environ.get("GPUTOP_TRACKER_BLOCKS") or ""
_MAX_REAPS = 4096  # children listed per process; past that the list is incomplete (and said so)
_sent = [0]  # the pid that sent its exit report (a forked child inherits the parent's list)
_reaps = {}  # type: dict[int, tuple[int, float]]  # child pid -> (ru_maxrss in bytes, when) of the children it reaped
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


def _child_faults():
    """cminflt + cmajflt of this process: the faults of every child it reaped (as the kernel adds them)."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[8]) + int(fields[10])


_HALF = os.path.join(_DIR, "gputop_probe_report.py")  # the exit half, loaded only at exit
_OOM_HALF = os.path.join(_DIR, "gputop_probe_oom.py")  # loaded only once the program imported torch.cuda
_HISTORY = os.environ.get("GPUTOP_TRACKER_GPU_HISTORY") or ""  # --gpu-history: "ENTRIES,MAX_BYTES"


def _half_code(path=_HALF):
    """A half's code: from its cached bytecode where there is one (the import system's own loader, always
    loaded), else compiled now."""
    name = os.path.basename(path)[:-3]
    ext = sys.modules.get("_frozen_importlib_external")
    if ext is not None:
        try:
            return ext.SourceFileLoader(name, path).get_code(name)
        except Exception:
            pass
    with open(path, "rb") as f:
        return compile(f.read(), path, "exec")


def _fifo():
    return _FIFO


def _torch_cuda(cuda):
    """The program imported torch.cuda: PyTorch's out-of-memory observer reports through the FIFO (once)."""
    if _hooked or not _FIFO:
        return
    _hooked.append(True)
    try:
        half = {"__name__": "gputop_probe_oom", "__file__": _OOM_HALF}  # type: dict
        exec(_half_code(_OOM_HALF), half)
        half["attach"](cuda, _fifo, _HISTORY, _half_code(_HALF))
    except Exception:
        pass


class _Loader(object):
    """torch.cuda's own loader, which runs the module as always, then hooks the observer."""

    def __init__(self, real, spec):
        self.real, self.spec = real, spec

    def __getattr__(self, name):
        return getattr(self.real, name)

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        _unfind()
        self.spec.loader = self.real  # the module knows only its own loader from here on
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.real
        self.real.exec_module(module)  # its errors are the program's, unchanged
        _torch_cuda(module)


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
            spec.loader = _Loader(spec.loader, spec)
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
            half = {"__name__": "gputop_probe_report", "__file__": _HALF}  # type: dict
            exec(_half_code(_HALF), half)
            half["report"](pid, how, _FIFO, _reaps, _tally, _cf0[0])
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
        _cf0[0] = _child_faults()
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


def _as_if_absent():
    """Imported by the program itself in a Python started with -S (`site` never ran, so nothing of ours ran at
    start-up): no hooks; the sitecustomize we shadow, or ImportError, exactly as without us."""
    sys.modules.pop("sitecustomize", None)
    import sitecustomize  # noqa: F401  (the next one on sys.path: ours is off it)


if __name__ == "sitecustomize":
    _unpath()
    if getattr(sys.flags, "no_site", 0) and sys.version_info >= (3, 8):
        _as_if_absent()
    else:
        if _FIFO and sys.version_info >= (3, 8):  # older ones only chain (this file still parses in 2.7)
            try:
                install()
            except Exception:
                pass
        _chain()
