"""Stand-in `torch.cuda`. As in PyTorch, CUDA initialised in a parent is not initialised in a forked child.

The peaks start at fixed, recognisable figures (what the program did before); `allocate`/`free` move the
current figures and raise the peaks as PyTorch's caching allocator would (reserved in 2 MiB segments, kept)."""

import os

PEAK_ALLOCATED = [123_456_789, 0, 7_777_777]  # per device; device 1 never used (no line expected)
PEAK_RESERVED = [234_567_890, 0, 8_888_888]
_current = [0, 0, 0]
_reserved = [0, 0, 0]
_initialised_in = [0]
SEGMENT = 2 << 20


def init() -> None:
    _initialised_in[0] = os.getpid()


def is_initialized() -> bool:
    return _initialised_in[0] == os.getpid()


def device_count() -> int:
    return len(PEAK_ALLOCATED)


def allocate(device: int, nbytes: int) -> None:
    _current[device] += nbytes
    _reserved[device] = max(_reserved[device], -(-_current[device] // SEGMENT) * SEGMENT)
    PEAK_ALLOCATED[device] = max(PEAK_ALLOCATED[device], _current[device])
    PEAK_RESERVED[device] = max(PEAK_RESERVED[device], _reserved[device])


def free(device: int, nbytes: int) -> None:
    _current[device] -= nbytes


def max_memory_allocated(device: int) -> int:
    return PEAK_ALLOCATED[device]


def max_memory_reserved(device: int) -> int:
    return PEAK_RESERVED[device]


def memory_stats(device: int) -> dict:
    return {
        "allocated_bytes.all.current": _current[device],
        "allocated_bytes.all.peak": PEAK_ALLOCATED[device],
        "reserved_bytes.all.current": _reserved[device],
        "reserved_bytes.all.peak": PEAK_RESERVED[device],
    }
