"""gputop-tracker's probe, the stub Python imports at start-up: gputop-track puts this directory first on the
launched command's PYTHONPATH, so every Python process of the tree imports this file as `sitecustomize`. It takes
its directory off `sys.path`, loads the probe's body (gputop_probe.py beside it) into this module, which hooks the
exits, and imports the sitecustomize it shadows (the user's own, or the interpreter's) exactly as `site` would.

The body comes from its bytecode in __pycache__ (the import system's own format), which this stub writes there when
it is missing, also under PYTHONDONTWRITEBYTECODE (the directory is ours), and this file's own bytecode too where the
import system found none: a Python version other than the tool's compiles both once, in its first process.

In a Python started with -S, `site` never runs: nothing here runs at start-up, and the directory stays on
`sys.path` (PYTHONPATH is read without `site`) until the program itself imports `sitecustomize`; then this file
takes its directory off and gives the program what it would get without us (the one it shadows, or ImportError),
with no hooks. gputop-track leaves PYTHONPATH alone where the command itself is such a Python (`core.blocks.probe`).
Standard library only; parses in any Python (an old one only chains); every failure is silent.
"""

import os
import sys

_DIR = os.path.dirname(os.path.abspath(__file__))


def _code(name, optimize=2):
    """The code of `name`.py beside this file: its cached bytecode where that is current, else compiled now and
    cached for the next process (without docstrings: a third less to load; the probe reads none)."""
    import marshal

    path, cached, head = _where(name)
    if head is not None:
        try:
            with open(cached, "rb") as f:
                data = f.read()
            if data[:16] == head:
                return marshal.loads(data[16:])
        except (OSError, ValueError, EOFError, TypeError):
            pass
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True, optimize=optimize)
    if head is not None:
        _keep(cached, head + marshal.dumps(code))
    return code


def _where(name):
    """`name`.py's path, its bytecode's path in our __pycache__, and the header that bytecode must start with to be
    current (the import system's: magic, flags 0, the source's mtime and size), or None where nothing is cached."""
    path = os.path.join(_DIR, name + ".py")
    st = os.stat(path)
    magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", None)
    tag = sys.implementation.cache_tag
    head = magic + b"\0\0\0\0" + _le32(int(st.st_mtime)) + _le32(st.st_size) if magic and tag else None
    return path, _cached(name), head


def _cached(name):
    return os.path.join(_DIR, "__pycache__", "%s.%s.pyc" % (name, sys.implementation.cache_tag))


def _cache_self():
    """This file's own bytecode, where the import system looks for it in our directory and found none, or an
    older one (a Python that writes none, of another version than the tool's): compiled once more now, so that no
    later start compiles (a process's first compile costs some 3 ms)."""
    here = globals().get("__cached__")
    if not sys.implementation.cache_tag or here != _cached("sitecustomize"):
        return  # no caching, or the import system looks elsewhere (PYTHONPYCACHEPREFIX): not ours to write
    _, _, head = _where("sitecustomize")
    try:
        with open(here, "rb") as f:
            if f.read(16) == head:
                return  # current: the import system loaded it
    except OSError:
        pass
    _code("sitecustomize")


def _le32(n):
    return (n & 0xFFFFFFFF).to_bytes(4, "little")


def _keep(cached, data):
    """Bytecode into our __pycache__ (a new file renamed over the old: a reader sees one whole or the other)."""
    tmp = "%s.%d.tmp" % (cached, os.getpid())
    try:
        try:
            os.mkdir(os.path.dirname(cached), 0o755)
        except FileExistsError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            done = 0
            while done < len(data):  # a short write (a full disk, a quota, a file-size limit): never renamed
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
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _DIR]
    if getattr(sys.flags, "no_site", 0) and sys.version_info >= (3, 8):
        # imported by the program itself in a Python started with -S: no hooks, what it would get without us
        sys.modules.pop("sitecustomize", None)
        import sitecustomize  # noqa: F401  (the next one on sys.path: ours is off it)
    else:
        if os.environ.get("GPUTOP_TRACKER_BLOCKS") and sys.version_info >= (3, 8):
            try:
                _cache_self()
                exec(_code("gputop_probe"), globals())
                install()  # type: ignore[name-defined]  # noqa: F821  (the body's)
            except Exception:
                pass
        _chain()
else:  # loaded by a `Tracker` into its own process (core.blocks.probe.InProcess)
    exec(_code("gputop_probe"), globals())
