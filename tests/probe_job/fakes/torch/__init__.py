"""A stand-in for PyTorch (tests only): `torch.cuda` with fixed, recognisable allocator figures."""

from . import cuda

__all__ = ["cuda"]
