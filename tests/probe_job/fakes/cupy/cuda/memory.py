class OutOfMemoryError(MemoryError):
    def __init__(self, size, total):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes).")


OutOfMemoryError.__module__ = "cupy.cuda.memory"
