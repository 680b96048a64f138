"""Stand-in `torch._C`: the out-of-memory error and the allocator's observer hook (tests only)."""

_oom_observers = []


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same class), raised by the allocator."""


OutOfMemoryError.__module__ = "torch"


def _cuda_attach_out_of_memory_observer(observer):
    """As in PyTorch: works before CUDA is initialised; each observer is called with (device, alloc,
    device_total, device_free) at every out-of-memory error, before the error is raised."""
    _oom_observers.append(observer)
