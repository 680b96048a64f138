from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop_tracker.core.blocks.inbox import BlockInbox


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test writes sessions to its own store, never to the real home."""
    store = tmp_path / "store"
    monkeypatch.setenv("GPUTOP_TRACKER_STORE", str(store))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("GPUTOP_TRACKER_SIMULATE_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return store


@pytest.fixture
def store(_isolated_store: Path) -> Path:
    return _isolated_store


@pytest.fixture
def utc() -> Iterator[None]:
    """TZ=UTC for the test (local times drawn on screen and in snapshots), the zone restored after it."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.fixture
def inbox() -> Iterator[BlockInbox]:
    """A blocks FIFO read by the test itself; this process's blocks report to it meanwhile."""
    from gputop_tracker.api import blocks

    box = BlockInbox.create()
    assert box is not None
    saved = blocks._sink
    blocks._activate(box.path)
    try:
        yield box
    finally:
        blocks._sink = saved
        box.close()


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in libnvidia-ml.so.1 (tests/fakenvml), built once per test process."""
    from fakenvml.fake import build

    lib = build(tmp_path_factory.mktemp("fakenvml"))
    if lib is None:
        pytest.skip("no C compiler (gcc/cc): the fake libnvidia-ml cannot be built")
    return lib
