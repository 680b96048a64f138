"""gputop-tracker's probe, its bytecode writer: loaded by the probe (sitecustomize.py beside it) only where the
interpreter writes no bytecode (PYTHONDONTWRITEBYTECODE, -B) and found none of the probe's own for its version in
our __pycache__: it compiles the probe once and keeps it there, so that no later start of that Python compiles.
The directory is ours, so it is written also where the program's own bytecode is not.

Standard library only, Python 3.8+; every failure is silent (the process goes on; the next one tries again).
"""

import os
import sys


def cache_self(probe):
    """The probe's own bytecode (`probe`: its namespace), where the import system looks for it in our directory
    and found none, or one not current (another Python version than the tool's; a source changed in place); a
    current one (pip's, with docstrings) is left as it is."""
    here = probe.get("__cached__")
    path = probe["__file__"]
    tag = sys.implementation.cache_tag
    if not tag or here != os.path.join(os.path.dirname(path), "__pycache__", "sitecustomize.%s.pyc" % tag):
        return  # no caching, or the import system looks elsewhere (PYTHONPYCACHEPREFIX, -O): not ours to write
    head = header(path)
    try:
        with open(here, "rb") as f:
            if f.read(16) == head:
                return  # current
    except OSError:
        pass
    keep(path, here, head)


def header(path):
    """The header a current timestamp bytecode of `path` starts with, as the import system checks it: magic,
    flags 0, the source's mtime and size (also gputop-track's check of what it wrote, `core.blocks.probe`)."""
    st = os.stat(path)
    stamp = (int(st.st_mtime) & 0xFFFFFFFF) | (st.st_size & 0xFFFFFFFF) << 32
    return sys.modules["_frozen_importlib_external"].MAGIC_NUMBER + b"\0\0\0\0" + stamp.to_bytes(8, "little")


def keep(path, cached, head):
    """`path` compiled (without docstrings: the probe reads none) into `cached`, after `head` (the import
    system's header: magic, flags 0, the source's mtime and size)."""
    import marshal

    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True, optimize=2)
    except (OSError, SyntaxError, ValueError):
        return
    _write(cached, head + marshal.dumps(code))


def _write(cached, data):
    """Into our __pycache__, never writable by others whatever the umask: a new file renamed over the old, so a
    reader sees one whole or the other, and a short write (a full disk, a quota, a file-size limit) is never
    renamed into place."""
    tmp = "%s.%d.tmp" % (cached, os.getpid())
    try:
        try:
            os.mkdir(os.path.dirname(cached), 0o755)
        except FileExistsError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            done = 0
            while done < len(data):
                n = os.write(fd, data[done:])
                if n <= 0:
                    raise OSError("short write")
                done += n
        finally:
            os.close(fd)
        os.replace(tmp, cached)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
