"""A stand-in for PyTorch (tests only): `torch.cuda` with PyTorch's inspection API (the out-of-memory observer
hook, memory_stats, memory_snapshot, mem_get_info, OutOfMemoryError, the allocator history) over a small caching
allocator (`_alloc.py`), and fixed, recognisable peak figures of what the program did before."""

from . import _C, cuda  # torch._C first, as in PyTorch: the probe hooks the observer once torch.cuda ran
from ._C import OutOfMemoryError


class dtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return "torch." + self.name


uint8 = dtype("uint8", 1)
float32 = dtype("float32", 4)


class Tensor:
    """Device memory held while the tensor lives (freed into the cache when it is dropped, as in PyTorch)."""

    def __init__(self, nbytes, device):
        self.nbytes, self.device = nbytes, device
        self._block = cuda._malloc(device, nbytes)

    def __del__(self):
        block, self._block = getattr(self, "_block", None), None
        if block is not None:
            cuda._release(self.device, block)


def empty(*size, dtype=float32, device="cpu"):
    n = 1
    for s in size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size:
        n *= int(s)
    device = str(device)
    if not device.startswith("cuda"):
        raise NotImplementedError("the stand-in holds only CUDA memory")
    index = int(device.split(":")[1]) if ":" in device else 0
    return Tensor(n * dtype.itemsize, index)


def zeros(*size, dtype=float32, device="cpu"):
    return empty(*size, dtype=dtype, device=device)


__all__ = ["_C", "OutOfMemoryError", "Tensor", "cuda", "empty", "float32", "uint8", "zeros"]
