"""A process's own exact peak RSS (VmHWM), read by itself: the sampler, and code blocks inside the tracked program.
Standard library only and nothing else: it loads in the user's processes."""


def own_peak_rss() -> int:
    """VmHWM of this process, bytes (0 when unreadable)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
