"""core.filewatch: the live view's output reader wakes on the command's writes, not on a clock."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from gputop_tracker.core.sampling import filewatch
from gputop_tracker.core.sampling.filewatch import FileWatch


@pytest.fixture
def unlinked_file() -> Iterator[tuple[int, int]]:
    """(write fd, read fd) of a file already unlinked, as the live view's --no-save output file."""
    fd, name = tempfile.mkstemp()
    os.close(fd)
    w = os.open(name, os.O_WRONLY | os.O_APPEND)
    r = os.open(name, os.O_RDONLY)
    os.unlink(name)
    yield w, r
    os.close(w)
    os.close(r)


def test_a_write_wakes_the_wait_long_before_its_timeout(unlinked_file: tuple[int, int]) -> None:
    w, r = unlinked_file
    watch = FileWatch(r)
    assert watch.notified  # Linux: inotify on /proc/self/fd/N, even for an unlinked file
    timer = threading.Timer(0.2, os.write, (w, b"progress 10%\n"))
    timer.start()
    t0 = time.monotonic()
    assert watch.wait(30.0) == []
    assert time.monotonic() - t0 < 15.0  # woken by the write, not by the 30 s timeout
    assert os.read(r, 100) == b"progress 10%\n"
    watch.close()


def test_no_write_waits_out_the_timeout_and_events_already_read_do_not_wake_again(
    unlinked_file: tuple[int, int],
) -> None:
    w, r = unlinked_file
    watch = FileWatch(r)
    os.write(w, b"a")
    watch.wait(5.0)  # the pending event is drained
    t0 = time.monotonic()
    assert watch.wait(0.3) == []
    assert time.monotonic() - t0 >= 0.25
    watch.close()


def test_another_readable_descriptor_is_returned(unlinked_file: tuple[int, int]) -> None:
    _, r = unlinked_file
    watch = FileWatch(r)
    wake_r, wake_w = os.pipe()
    os.write(wake_w, b"x")
    assert watch.wait(30.0, wake_r) == [wake_r]
    watch.close()
    os.close(wake_r)
    os.close(wake_w)


def test_without_inotify_it_polls(unlinked_file: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filewatch, "_inotify_watch", lambda path: None)
    _, r = unlinked_file
    watch = FileWatch(r, poll=0.2)
    assert not watch.notified
    t0 = time.monotonic()
    assert watch.wait(None) == []  # no timeout asked: the poll period bounds it
    assert 0.15 <= time.monotonic() - t0 < 10.0
    watch.close()


def test_dev_null_is_polled_not_watched() -> None:
    """Attach mode reads /dev/null: watching it would wake the reader on every write to /dev/null anywhere."""
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        watch = FileWatch(fd, poll=0.2)
        assert not watch.notified
        watch.close()
    finally:
        os.close(fd)
