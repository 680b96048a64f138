"""gputop-tracker's probe, the exit half: what a tracked Python process sends as it exits (see sitecustomize.py
beside it, which loads this file only then: start-up compiles only the small half).

Standard library only, any Python 3.8+; never imports a framework, never prints, never resets a statistic.
"""

import os
import sys

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
    import resource  # a small C module

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _stat():
    """(cminflt + cmajflt: the faults of every child it reaped, when it started in clock ticks since boot), from one
    read of /proc/self/stat (fields 10, 12 and 22)."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[8]) + int(fields[10]), int(fields[19])


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


def _uncaught_oom():
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
    exit_msg["ga"] = _allocators()
    oom = _uncaught_oom()
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
