"""The stand-in's CUDA caching allocator (tests only): PyTorch's rules, small enough to follow by hand.

A request is rounded up to 512 bytes. Requests up to 1 MiB come from the small pool (2 MiB segments), larger ones
from the large pool (segments of the request rounded up to 2 MiB). A free block of the pool that fits is used
first (best fit), split when the rest is worth keeping; else a new segment is taken from the device (cudaMalloc);
when the device has no room, every segment with nothing allocated in it is given back (a retry) and the device is
asked again; when it still has no room: an out-of-memory error, after the observers were called with
(device, request, device total, device free), as PyTorch's allocator does. Freed blocks stay reserved (the cache)
and merge with free neighbours of their segment.

The device: FAKE_TORCH_GPU_TOTAL bytes (default 80 GiB); the process's CUDA context takes FAKE_TORCH_CONTEXT bytes
(default 512 MiB) outside the allocator; other processes on the GPU take FAKE_TORCH_OTHERS bytes (the error's text
names FAKE_TORCH_OTHER_PID as theirs). With
FAKE_TORCH_NVML_MEMFILE set (the stand-in NVML's `memfile`), the process's figure as NVML would give it (its
segments + its context) is written there at every change, "{rank}" in the name replaced by $RANK.
"""

import os
import sys
import time
import traceback

GiB = 1 << 30
MiB = 1 << 20
SMALL = 1 << 20  # requests up to this size: small pool
SMALL_SEGMENT = 2 * MiB
ROUND = 2 * MiB  # large segments are a multiple of this
MIN_SPLIT = {"small": 512, "large": MiB}  # the rest of a split block is kept when at least this big


def _env(name, default):
    return int(os.environ.get(name) or default)


class Block:
    def __init__(self, address, size, state="inactive", requested=0):
        self.address, self.size, self.state, self.requested = address, size, state, requested


class Segment:
    def __init__(self, device, address, size, pool):
        self.device, self.address, self.size, self.pool = device, address, size, pool
        self.blocks = [Block(address, size)]

    def allocated(self):
        return sum(b.size for b in self.blocks if b.state == "active_allocated")

    def requested(self):
        return sum(b.requested for b in self.blocks if b.state == "active_allocated")


class History:
    """torch.cuda.memory._record_memory_history's trace (per device), while enabled."""

    def __init__(self):
        self.enabled = None
        self.stacks = "all"
        self.max_entries = sys.maxsize
        self.traces = {}

    def record(self, device, action, addr, size):
        if self.enabled is None:
            return
        frames = []
        if self.stacks in ("python", "all"):
            frames = [{"filename": f.filename, "line": f.lineno, "name": f.name} for f in traceback.extract_stack()]
        trace = self.traces.setdefault(device, [])
        trace.append(
            {
                "action": action,
                "addr": addr,
                "compile_context": "N/A",
                "frames": frames[-8:],
                "size": size,
                "stream": 0,
                "time_us": int(time.time() * 1e6),
                "user_metadata": "",
            }
        )
        del trace[: max(0, len(trace) - self.max_entries)]


class Device:
    def __init__(self, index):
        self.index = index
        self.total = _env("FAKE_TORCH_GPU_TOTAL", 80 * GiB)
        self.context = _env("FAKE_TORCH_CONTEXT", 512 * MiB)
        self.others = _env("FAKE_TORCH_OTHERS", 0)
        self.segments = []
        self.next_address = 0x7F0000000000 + index * (1 << 40)
        self.stats = {"num_ooms": 0, "num_alloc_retries": 0, "num_device_alloc": 0, "num_device_free": 0}
        self.peak = {"allocated": 0, "reserved": 0, "active": 0, "requested": 0, "segment": 0}

    # ------------------------------------------------------------------ the figures

    def reserved(self):
        return sum(s.size for s in self.segments)

    def allocated(self):
        return sum(s.allocated() for s in self.segments)

    def free(self):
        """What the device has left (cudaMemGetInfo's free): the total less every process's use."""
        return max(0, self.total - self.context - self.others - self.reserved())

    def current(self):
        inactive_split = sum(
            b.size for s in self.segments if len(s.blocks) > 1 for b in s.blocks if b.state == "inactive"
        )
        return {
            "allocated": self.allocated(),
            "reserved": self.reserved(),
            "active": self.allocated(),
            "requested": sum(s.requested() for s in self.segments),
            "segment": len(self.segments),
            "inactive_split_bytes": inactive_split,
        }

    def _moved(self):
        now = self.current()
        for k in self.peak:
            self.peak[k] = max(self.peak[k], now[k])
        _write_memfile(self)

    # ------------------------------------------------------------------ malloc / free

    def malloc(self, nbytes, history, observers, error):
        size = max(512, -(-nbytes // 512) * 512)
        pool = "small" if size <= SMALL else "large"
        block = self._from_cache(size, pool)
        if block is None:
            seg_size = SMALL_SEGMENT if pool == "small" else -(-size // ROUND) * ROUND
            if seg_size > self.free() and self._release_cached(history):
                self.stats["num_alloc_retries"] += 1
            if seg_size > self.free():
                self.stats["num_ooms"] += 1
                history.record(self.index, "oom", 0, size)
                for fn in list(observers):  # the size asked of the device (a segment's), as PyTorch passes it
                    fn(self.index, seg_size, self.total, self.free())
                raise error(_oom_text(self, size))
            seg = Segment(self.index, self.next_address, seg_size, pool)
            self.next_address += seg_size
            self.segments.append(seg)
            self.stats["num_device_alloc"] += 1
            history.record(self.index, "segment_alloc", seg.address, seg_size)
            block = self._split(seg, seg.blocks[0], size)
        block.state, block.requested = "active_allocated", nbytes
        history.record(self.index, "alloc", block.address, block.size)
        self._moved()
        return block

    def _from_cache(self, size, pool):
        fits = [
            (b.size, s, b)
            for s in self.segments
            if s.pool == pool
            for b in s.blocks
            if b.state == "inactive" and b.size >= size
        ]
        if not fits:
            return None
        _, seg, block = min(fits, key=lambda f: (f[0], f[2].address))
        return self._split(seg, block, size)

    def _split(self, seg, block, size):
        rest = block.size - size
        if rest >= MIN_SPLIT[seg.pool]:
            i = seg.blocks.index(block)
            seg.blocks.insert(i + 1, Block(block.address + size, rest))
            block.size = size
        return block

    def _release_cached(self, history):
        """Every segment with nothing allocated goes back to the device (PyTorch's retry after emptying its
        cache); True when one did."""
        empty = [s for s in self.segments if s.allocated() == 0]
        for s in empty:
            self.segments.remove(s)
            self.stats["num_device_free"] += 1
            history.record(self.index, "segment_free", s.address, s.size)
        if empty:
            self._moved()
        return bool(empty)

    def release(self, block, history):
        for seg in self.segments:
            if block in seg.blocks:
                block.state, block.requested = "inactive", 0
                history.record(self.index, "free_completed", block.address, block.size)
                _merge(seg)
                break
        self._moved()

    def empty_cache(self, history):
        self._release_cached(history)

    def snapshot(self):
        out = []
        for s in self.segments:
            out.append(
                {
                    "device": self.index,
                    "address": s.address,
                    "total_size": s.size,
                    "allocated_size": s.allocated(),
                    "active_size": s.allocated(),
                    "requested_size": s.requested(),
                    "segment_type": s.pool,
                    "segment_pool_id": (0, 0),
                    "stream": 0,
                    "is_expandable": False,
                    "frames": [],
                    "blocks": [
                        {"address": b.address, "size": b.size, "requested_size": b.requested, "state": b.state,
                         "frames": []}
                        for b in s.blocks
                    ],
                }
            )  # fmt: skip
        return out


def _merge(seg):
    out = []
    for b in seg.blocks:
        if out and out[-1].state == "inactive" and b.state == "inactive":
            out[-1].size += b.size
        else:
            out.append(b)
    seg.blocks = out


def format_size(n):
    """c10's format_size: the sizes PyTorch's out-of-memory message shows."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024.0:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576.0:.2f} MiB"
    return f"{n / 1073741824.0:.2f} GiB"


def _oom_text(dev, size):
    others = ""
    if dev.others:
        pid = int(os.environ.get("FAKE_TORCH_OTHER_PID") or os.getppid())
        others = f"Process {pid} has {format_size(dev.others)} memory in use. "
    allocated, reserved = dev.allocated(), dev.reserved()
    return (
        f"CUDA out of memory. Tried to allocate {format_size(size)}. GPU {dev.index} has a total capacity of "
        f"{format_size(dev.total)} of which {format_size(dev.free())} is free. {others}Including non-PyTorch memory, "
        f"this process has {format_size(reserved + dev.context)} memory in use. Of the allocated memory "
        f"{format_size(allocated)} is allocated by PyTorch, and {format_size(reserved - allocated)} is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-"
        "cuda-alloc-conf)"
    )


def _write_memfile(dev):
    path = os.environ.get("FAKE_TORCH_NVML_MEMFILE")
    if not path or dev.index != 0:
        return
    path = path.replace("{rank}", os.environ.get("RANK", "0"))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()} {dev.reserved() + dev.context}")
    os.replace(tmp, path)
