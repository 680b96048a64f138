"""Stand-in `torch.cuda`. As in PyTorch, CUDA initialised in a parent is not initialised in a forked child.

The peaks start at fixed, recognisable figures (what the program did before); `allocate`/`free` move the
current figures and raise the peaks as PyTorch's caching allocator would (reserved in 2 MiB segments, kept).
Tensors (`torch.empty(..., device="cuda")`) go through the stand-in caching allocator (`torch._alloc`), whose
figures PyTorch's own inspection API gives: memory_stats, memory_snapshot, mem_get_info, the out-of-memory
observers (`torch._C._cuda_attach_out_of_memory_observer`), OutOfMemoryError, and `memory`'s history.
"""

import os

from torch import _C, _alloc
from torch._C import OutOfMemoryError

from . import memory

PEAK_ALLOCATED = [123_456_789, 0, 7_777_777]  # per device; device 1 never used (no line expected)
PEAK_RESERVED = [234_567_890, 0, 8_888_888]
_current = [0, 0, 0]
_reserved = [0, 0, 0]
_initialised_in = [0]
_queued_calls = []  # what runs at initialisation (`_lazy_call`), as in PyTorch
_devices = {}
SEGMENT = 2 << 20


def init() -> None:
    if is_initialized():
        return
    _initialised_in[0] = os.getpid()
    calls, _queued_calls[:] = list(_queued_calls), []
    for fn, _stack in calls:
        fn()
    for d in _devices.values():
        _alloc._write_memfile(d)


def _lazy_init() -> None:
    init()


def _lazy_call(fn, **kwargs) -> None:
    """As PyTorch's: `fn` now when CUDA is initialised, else at initialisation."""
    if is_initialized():
        fn()
    else:
        _queued_calls.append((fn, None))


def is_initialized() -> bool:
    return _initialised_in[0] == os.getpid()


def is_available() -> bool:
    return True


def device_count() -> int:
    return len(PEAK_ALLOCATED)


def synchronize(device=None) -> None:
    return None


def current_device() -> int:
    return 0


def _index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    text = str(device)
    return int(text.split(":")[1]) if ":" in text else 0


def _device(index: int):
    if index not in _devices:
        _devices[index] = _alloc.Device(index)
    return _devices[index]


def _track(index: int) -> None:
    d = _device(index)
    PEAK_ALLOCATED[index] = max(PEAK_ALLOCATED[index], _current[index] + d.allocated())
    PEAK_RESERVED[index] = max(PEAK_RESERVED[index], _reserved[index] + d.reserved())


def _malloc(index: int, nbytes: int):
    _lazy_init()
    block = _device(index).malloc(nbytes, memory._history, _C._oom_observers, OutOfMemoryError)
    _track(index)
    return block


def _release(index: int, block) -> None:
    _device(index).release(block, memory._history)


def empty_cache() -> None:
    for d in _devices.values():
        d.empty_cache(memory._history)


def allocate(device: int, nbytes: int) -> None:
    _current[device] += nbytes
    _reserved[device] = max(_reserved[device], -(-_current[device] // SEGMENT) * SEGMENT)
    PEAK_ALLOCATED[device] = max(PEAK_ALLOCATED[device], _current[device])
    PEAK_RESERVED[device] = max(PEAK_RESERVED[device], _reserved[device])


def free(device: int, nbytes: int) -> None:
    _current[device] -= nbytes


def max_memory_allocated(device=None) -> int:
    return PEAK_ALLOCATED[_index(device)]


def max_memory_reserved(device=None) -> int:
    return PEAK_RESERVED[_index(device)]


def memory_allocated(device=None) -> int:
    i = _index(device)
    return _current[i] + _device(i).allocated()


def memory_reserved(device=None) -> int:
    i = _index(device)
    return _reserved[i] + _device(i).reserved()


def memory_stats(device=None) -> dict:
    """PyTorch's keys (the "all" pools) for the current figures, their peaks and the allocator's counters."""
    i = _index(device)
    d = _device(i)
    now = d.current()
    out = {
        "allocated_bytes.all.current": _current[i] + now["allocated"],
        "allocated_bytes.all.peak": PEAK_ALLOCATED[i],
        "reserved_bytes.all.current": _reserved[i] + now["reserved"],
        "reserved_bytes.all.peak": PEAK_RESERVED[i],
        "active_bytes.all.current": _current[i] + now["active"],
        "active_bytes.all.peak": max(PEAK_ALLOCATED[i], d.peak["active"]),
        "requested_bytes.all.current": _current[i] + now["requested"],
        "requested_bytes.all.peak": d.peak["requested"],
        "inactive_split_bytes.all.current": now["inactive_split_bytes"],
        "inactive_split_bytes.all.peak": now["inactive_split_bytes"],
        "segment.all.current": now["segment"],
        "segment.all.peak": d.peak["segment"],
        "allocation.all.current": sum(1 for s in d.segments for b in s.blocks if b.state == "active_allocated"),
        "max_split_size": -1,
    }
    out.update(d.stats)
    return out


def memory_snapshot() -> list:
    out = []
    for i in sorted(_devices):
        out.extend(_devices[i].snapshot())
    return out


def mem_get_info(device=None) -> tuple:
    _lazy_init()
    d = _device(_index(device))
    return d.free(), d.total


class _Props:
    def __init__(self, index: int) -> None:
        d = _device(index)
        self.name = "Stand-in H100 80GB HBM3"
        self.total_memory = d.total
        # PyTorch's uuid prints without NVML's "GPU-" prefix
        self.uuid = os.environ.get("FAKE_TORCH_UUID", "00000000-0000-4000-8000-000000000000")


def get_device_properties(device=None) -> _Props:
    return _Props(_index(device))


__all__ = ["OutOfMemoryError", "mem_get_info", "memory", "memory_snapshot", "memory_stats"]
