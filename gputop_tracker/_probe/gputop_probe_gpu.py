"""gputop-tracker's probe, the GPU half: loaded by the probe (sitecustomize.py beside it) only where the program itself
imported a GPU framework. At exit it reads the peaks of the allocators of PyTorch, JAX and CuPy (`allocators`) and
the state of an uncaught JAX or CuPy out-of-memory error (`uncaught_oom`). Once the program imported torch.cuda it
hooks PyTorch's out-of-memory observer (`torch._C._cuda_attach_out_of_memory_observer`,
called by the caching allocator before it raises the error, caught by the program or not, with the allocator
unlocked) and sends the allocator's state at that moment through the session's FIFO as one line (`"k": "o"`).
The state of every segment, when there are more than the line holds, goes to a file of its own (0600, in the
FIFO's directory, which only this user can enter; at most FILE_CAP bytes); with --gpu-history, the allocator's
history (torch.cuda.memory._snapshot(), the file memory_viz opens) too.

The observer never raises, never prints and changes nothing: it reads the allocator's statistics (never resets
one) and returns; the error then reaches the program exactly as before. Standard library only, Python 3.8+.
"""

import os
import sys
import time

INLINE = 12  # segments in the line itself (the most free space first)
MAX_RECORDS = 100  # records a process sends (a program that catches OOMs in a loop); the rest are counted
MAX_SNAPSHOTS = 3  # history snapshots a process writes
FILE_CAP = 1 << 20  # bytes of one state file
LINE_CAP = 3800  # a line stays under PIPE_BUF (4096): one atomic write
_POOL = {"small": "s", "large": "l"}


def find_spec(name, path, target, finder, probe):
    """torch.cuda's spec as the import system finds it past the probe's `finder` (their spec, their errors), its
    loader wrapped to hook the observer once the module has run; `probe`: the probe's namespace."""
    try:
        finders = sys.meta_path[sys.meta_path.index(finder) + 1 :]
    except ValueError:
        return None
    for other in finders:
        find = getattr(other, "find_spec", None)
        spec = find(name, path, target) if find is not None else None
        if spec is not None:
            break
    else:
        return None
    if getattr(spec.loader, "exec_module", None) is not None:
        spec.loader = Loader(spec.loader, spec, probe["_unfind"], lambda cuda: torch_cuda(cuda, probe))
    return spec


def torch_cuda(cuda, probe):
    """The program imported torch.cuda: PyTorch's out-of-memory observer reports through the FIFO (once per
    process: forks inherit it); `probe`: the probe's namespace (its FIFO, read at each error: "" once a `Tracker`
    stopped)."""
    hooked = probe["_hooked"]
    if hooked or not probe["_FIFO"]:
        return
    hooked.append(True)
    try:
        attach(cuda, lambda: probe["_FIFO"], probe["_HISTORY"], probe)
    except Exception:
        pass


class Loader(object):
    """torch.cuda's own loader, which runs the module as always, then hooks the observer."""

    def __init__(self, real, spec, unfind, hook):
        self.real, self.spec, self.unfind, self.hook = real, spec, unfind, hook

    def __getattr__(self, name):
        return getattr(self.real, name)

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.unfind()
        self.spec.loader = self.real  # the module knows only its own loader from here on
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.real
        self.real.exec_module(module)  # its errors are the program's, unchanged
        self.hook(module)


def attach(cuda, fifo, history, helpers):
    """Hook the observer (and, with --gpu-history "ENTRIES,MAX_BYTES", the history from CUDA's start)."""
    hook = getattr(sys.modules.get("torch._C"), "_cuda_attach_out_of_memory_observer", None)
    if hook is None:
        return  # a PyTorch without CUDA, or too old for the hook
    state = _State(cuda, fifo, helpers, history)
    hook(state.observer)
    if state.entries > 0 and hasattr(cuda, "_lazy_call"):
        cuda._lazy_call(state.start_history)  # at CUDA's initialisation (now, when it was already)


class _State(object):
    def __init__(self, cuda, fifo, helpers, history):
        self.cuda, self.fifo, self.h = cuda, fifo, helpers
        self.n = 0  # out-of-memory errors seen by this process
        self.snapshots = 0
        entries, _, cap = (history or "0").partition(",")
        self.entries = int(entries) if entries.isdigit() else 0
        self.history_cap = int(cap) if cap.isdigit() else 0
        self.pid = 0

    def start_history(self):
        try:
            # Python stacks only: C++ ones ("all") took 8 s to symbolise at the first snapshot on an H200
            self.cuda.memory._record_memory_history(max_entries=self.entries, stacks="python")
        except Exception:
            pass  # a failure here would surface in the program's first CUDA call: never

    def observer(self, device, alloc, device_total, device_free):
        try:
            self.record(device, alloc, device_total, device_free)
        except Exception:
            pass

    def record(self, device, alloc, device_total, device_free):
        fifo = self.fifo()
        if not fifo:
            return
        pid = os.getpid()
        if pid != self.pid:  # a forked child counts its own
            self.pid, self.n, self.snapshots = pid, 0, 0
        self.n += 1
        if self.n > MAX_RECORDS:
            return
        msg = {"k": "o", "pid": pid, "name": _comm(self.h), "t": time.time(), "fw": "torch", "n": self.n}
        msg.update(dev="cuda:%d" % device, req=alloc, dtotal=device_total, dfree=device_free)
        msg.update(_stats(self.cuda, device))
        segments = _segments(self.cuda, device)
        msg.update(_summary(segments))
        msg["uuid"] = _uuid(self.cuda, device)
        directory = os.path.dirname(fifo)
        if len(segments) > INLINE:
            msg["file"] = _write(directory, "oom-%d-%d.json" % (pid, self.n), self._segment_file(msg, segments))
        if self.entries and self.snapshots < MAX_SNAPSHOTS:
            self.snapshots += 1
            msg["hist"] = self._history_file(directory, pid)
        line = _json(msg).encode()
        if len(line) > LINE_CAP:
            msg["segs"] = msg["segs"][:2]
            line = _json(msg).encode()
        _send(self.h, line, fifo)

    def _segment_file(self, msg, segments):
        out = ['{"pid":%d,"n":%d,"segments":[' % (msg["pid"], msg["n"])]
        size = len(out[0])
        kept = 0
        for s in segments:
            row = _json(s)
            size += len(row) + 1
            if size > FILE_CAP - 64:
                break
            out.append(("," if kept else "") + row)
            kept += 1
        out.append('],"kept":%d,"total":%d}' % (kept, len(segments)))
        return "".join(out).encode()

    def _history_file(self, directory, pid):
        import pickle

        snap = self.cuda.memory._snapshot()
        name = "oom-%d-%d.pickle" % (pid, self.n)
        fd = _create(directory, name)
        if fd < 0:
            return None
        capped = _Capped(fd, self.history_cap or FILE_CAP)
        try:
            pickle.Pickler(capped, protocol=4).dump(snap)
        except _TooBig:
            capped.close()
            _unlink(directory, name)
            return "!over %d bytes" % capped.cap
        capped.close()
        return name


def _stats(cuda, device):
    s = cuda.memory_stats(device)
    keys = (
        ("alloc", "allocated_bytes.all.current"),
        ("res", "reserved_bytes.all.current"),
        ("act", "active_bytes.all.current"),
        ("rqd", "requested_bytes.all.current"),
        ("isplit", "inactive_split_bytes.all.current"),
        ("palloc", "allocated_bytes.all.peak"),
        ("pres", "reserved_bytes.all.peak"),
        ("nseg", "segment.all.current"),
        ("ooms", "num_ooms"),
        ("retries", "num_alloc_retries"),
    )
    out = {k: s.get(name) for k, name in keys}
    try:
        free, total = cuda.mem_get_info(device)
        out["mgi"] = [int(free), int(total)]
    except Exception:
        pass
    return out


def _segments(cuda, device):
    """Each segment of `device`: [total, free (not allocated), its largest free block, pool, blocks]."""
    out = []
    for s in cuda.memory_snapshot():
        if s.get("device", device) != device:
            continue
        total = int(s.get("total_size") or 0)
        largest = 0
        blocks = s.get("blocks") or ()
        for b in blocks:
            if b.get("state") == "inactive" and b.get("size", 0) > largest:
                largest = int(b["size"])
        pool = _POOL.get(s.get("segment_type"), "?")
        out.append([total, total - int(s.get("allocated_size") or 0), largest, pool, len(blocks)])
    out.sort(key=_most_free)
    return out


def _most_free(row):
    return -row[1], -row[0]


def _summary(segments):
    largest = max([r[2] for r in segments] or [0])
    return {
        "largest": largest,
        "nsnap": len(segments),
        "nsmall": sum(1 for r in segments if r[3] == "s"),
        "segs": [r[:4] for r in segments[:INLINE]],
    }


def _uuid(cuda, device):
    try:
        return str(cuda.get_device_properties(device).uuid)[:80]
    except Exception:
        return None


class _TooBig(Exception):
    pass


class _Capped(object):
    """A write end that refuses to grow past `cap` bytes."""

    def __init__(self, fd, cap):
        self.fd, self.cap, self.size = fd, cap, 0

    def write(self, data):
        self.size += len(data)
        if self.size > self.cap:
            raise _TooBig()
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        return len(data)

    def close(self):
        os.close(self.fd)


def _private_dir(directory):
    """A descriptor of `directory` where it is surely the session's: ours, no link, no one else can enter."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return -1
    st = os.fstat(dfd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(dfd)
        return -1
    return dfd


def _create(directory, name):
    dfd = _private_dir(directory)
    if dfd < 0:
        return -1
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(name, flags, 0o600, dir_fd=dfd)
    except OSError:
        return -1
    finally:
        os.close(dfd)


def _unlink(directory, name):
    dfd = _private_dir(directory)
    if dfd >= 0:
        try:
            os.unlink(name, dir_fd=dfd)
        except OSError:
            pass
        os.close(dfd)


def _write(directory, name, data):
    fd = _create(directory, name)
    if fd < 0:
        return None
    try:
        _Capped(fd, FILE_CAP).write(data)
    except (OSError, _TooBig):
        os.close(fd)
        _unlink(directory, name)
        return None
    os.close(fd)
    return name


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


def _bytes_after(text, word):
    """The number (digits, maybe with commas) after `word` in an error's text, or None."""
    i = text.find(word)
    if i < 0:
        return None
    digits = ""
    for c in text[i + len(word) :].lstrip()[:40]:
        if c.isdigit():
            digits += c
        elif c != "," or not digits:
            break
    return int(digits) if digits else None


def _jax_oom(text):
    bridge = sys.modules.get("jax._src.xla_bridge")
    best = None
    for backend in list((getattr(bridge, "_backends", None) or {}).values()):
        for d in backend.local_devices():
            stats = d.memory_stats() or {}
            used = stats.get("bytes_in_use")
            if used is not None and (best is None or used > best[1].get("bytes_in_use", 0)):
                best = (d, stats)
    if best is None:
        return None
    d, st = best
    return {"fw": "jax", "dev": "%s:%d" % (d.platform, d.id), "req": _bytes_after(text, "allocate"),
            "alloc": st.get("bytes_in_use"), "res": st.get("bytes_limit"), "palloc": st.get("peak_bytes_in_use"),
            "largest": st.get("largest_free_block_bytes")}  # fmt: skip


def _cupy_oom(text):
    cupy = sys.modules["cupy"]
    pool = cupy.get_default_memory_pool()
    rt = cupy.cuda.runtime
    free, total = rt.memGetInfo()
    return {"fw": "cupy", "dev": "cuda:%d" % rt.getDevice(), "req": _bytes_after(text, "allocating"),
            "alloc": int(pool.used_bytes()), "res": int(pool.total_bytes()), "dfree": int(free),
            "dtotal": int(total)}  # fmt: skip


def uncaught_oom():
    """An out-of-memory error of JAX or CuPy that ended the program (they have no hook at the moment itself, as
    PyTorch has): the allocator as it stands at exit, or None."""
    exc = getattr(sys, "last_value", None)
    if exc is None:
        return None
    text = str(exc)[:4000]
    try:
        if type(exc).__name__ == "OutOfMemoryError" and "cupy" in sys.modules:
            return _cupy_oom(text)
        if "RESOURCE_EXHAUSTED" in text and "jax" in sys.modules:
            return _jax_oom(text)
    except Exception:
        pass
    return None


def allocators():
    out = []
    for read in (_torch, _jax, _cupy):
        try:
            out.extend(read())
        except Exception:
            pass
    return out[:16]


def _send(helpers, line, fifo):
    """One line into the FIFO, SIGPIPE blocked meanwhile (a reader gone: an error, never the signal)."""
    import _signal

    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGPIPE,))
    try:
        helpers["_send"]([line + b"\n"], fifo)
    finally:
        if _signal.SIGPIPE not in old:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, old)


def exit_lines(lines, pid, name, now):
    """At the probe's exit report: an uncaught out-of-memory error's line into `lines`; the allocators' peaks (JSON)."""
    oom = uncaught_oom()
    if oom is not None and oom.get("req") is not None:
        oom.update(k="o", pid=pid, name=name, t=now, n=1, when="exit")
        lines.append(_json(oom))
    return _json(allocators())


def _json(v):
    """JSON of ints, floats, strings, None, lists and dicts (json itself costs a millisecond to import)."""
    t = type(v)
    if t is str:
        if v.isprintable() and '"' not in v and "\\" not in v:
            return '"' + v + '"'
        return '"' + "".join([c if c >= " " and c not in '"\\' else "\\u%04x" % ord(c) for c in v]) + '"'
    if t is dict:
        return "{" + ",".join([_json(str(k)) + ":" + _json(x) for k, x in v.items()]) + "}"
    if t is list or t is tuple:
        return "[" + ",".join([_json(x) for x in v]) + "]"
    if v is None or t is bool:
        return "null" if v is None else "true" if v else "false"
    if isinstance(v, int) and not isinstance(v, bool):
        return int.__repr__(v)  # an int subclass (an IntEnum, numpy's) as the number it is
    if isinstance(v, float):
        return float.__repr__(v) if v == v and v not in (float("inf"), float("-inf")) else "null"
    return "null"


def _comm(probe):
    try:
        return probe["_stat"]()[2]
    except (OSError, ValueError, IndexError):
        return ""
