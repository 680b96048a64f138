"""A stand-in for CuPy (tests only): its default memory pool and the error it raises when the device is full
(`cupy.cuda.memory.OutOfMemoryError`, whose text names the request); the figures are fixed and recognisable."""

from . import cuda

USED = 3_000_000_000
TOTAL = 3_500_000_000


class _Pool:
    def used_bytes(self):
        return USED

    def total_bytes(self):
        return TOTAL

    def free_bytes(self):
        return TOTAL - USED


_pool = _Pool()


def get_default_memory_pool():
    return _pool


def zeros(nbytes):
    """Always out of memory, as CuPy says it."""
    raise cuda.memory.OutOfMemoryError(nbytes, USED)
