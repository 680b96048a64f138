"""For programs run under the real CLI in tests: wait until the sampler has read the block messages sent so far.

Imported by the workloads (their directory, tests/, put first on sys.path): the test scripts of test_blocks and
test_gpu_watch, and tests/gpu_real_job.py on a GPU machine.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import time


def drained() -> None:
    """Until the sampler has read every block message sent so far (the FIFO is empty)."""
    fd = os.open(os.environ["GPUTOP_TRACKER_BLOCKS"], os.O_WRONLY | os.O_NONBLOCK)
    try:
        for _ in range(6000):
            if struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, bytes(4)))[0] == 0:
                return
            time.sleep(0.01)
        raise SystemExit("the sampler never read its blocks FIFO")
    finally:
        os.close(fd)


def running() -> None:
    """Returns once the sampler read a mark sent now: it serves the FIFO only from its loop, so tracking (and its
    GPU watcher) runs from then on."""
    from gputop_tracker import mark

    mark("sync")
    drained()
