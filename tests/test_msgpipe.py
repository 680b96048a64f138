"""MessagePipe over a real, tiny pipe: never blocks, drops only droppable kinds, keeps whole lines."""

from __future__ import annotations

import fcntl
import json
import os

from gputop_tracker.core.sampling.msgpipe import MessagePipe, RequestReader

F_SETPIPE_SZ = 1031


def _read_all(fd: int) -> list[dict[str, object]]:
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines()]


def test_full_pipe_drops_samples_and_queues_the_rest() -> None:
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    pipe = MessagePipe(w)
    try:
        for i in range(200):  # far more than a page: the pipe fills, nothing blocks
            pipe.send("sample", {"i": i, "pad": "x" * 100})
        pipe.send("event", {"event": {"type": "oom", "message": "y" * 3000}})  # more than the room left
        assert pipe.dropped > 0 and pipe.pending
        got = _read_all(r)
        pipe.flush()
        got += _read_all(r)
        assert not pipe.pending
        kinds = [m["kind"] for m in got]
        assert kinds[-1] == "event", "a queued event follows once the pipe drains"
        assert kinds.count("sample") + pipe.dropped == 200
    finally:
        os.close(r)
        os.close(w)


def test_reader_gone_closes_the_pipe() -> None:
    r, w = os.pipe()
    os.close(r)
    pipe = MessagePipe(w)
    pipe.send("event", {"event": {}})  # EPIPE: the front end is gone, tracking goes on
    assert not pipe.open and not pipe.pending
    os.close(w)


def test_requests_split_across_reads() -> None:
    r, w = os.pipe()
    reader = RequestReader(r)
    os.write(w, b'{"cmd": "oom", "pid": 5}\n{"cmd": "o')
    assert reader.read() == [{"cmd": "oom", "pid": 5}]
    os.write(w, b'om"}\nnot json\n[1]\n')
    assert reader.read() == [{"cmd": "oom"}]
    os.close(w)
    assert reader.read() == [] and reader.fd == -1
    os.close(r)
