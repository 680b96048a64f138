from . import memory, runtime

__all__ = ["memory", "runtime"]
