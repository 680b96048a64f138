from __future__ import annotations

import compileall
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gputop_tracker
from gputop_tracker.core.blocks.inbox import BlockInbox


def pytest_configure(config: pytest.Config) -> None:
    """The package's bytecode, written once before the tests start (by the controller, not by each xdist worker).
    Where PYTHONDONTWRITEBYTECODE is set (this project's CI shell sets it) nothing would write it, and each of the
    suite's ~800 tracked runs compiled the whole package again, front end and sampler: ~0.2 s of CPU each, a third
    of the suite's. An installed wheel has its bytecode from pip; this is for a checkout. The probe's directory is
    left out: the probe keeps its bytecode its own way (tests/test_probe_cache.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    package = Path(gputop_tracker.__file__).parent
    compileall.compile_dir(package, quiet=2, rx=re.compile(r"[/\\]_probe[/\\]"), workers=1)


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


def _all_models() -> list[type[Any]]:
    """Every pydantic model of the report, found as the subclasses of models.Model at any depth."""
    from gputop_tracker.core.model import models

    out: list[type[Any]] = []
    todo: list[type[Any]] = [models.Model]
    while todo:
        for sub in todo.pop().__subclasses__():
            out.append(sub)
            todo.append(sub)
    return out


@pytest.fixture
def strict_models() -> Iterator[None]:
    """The models with extra="forbid" for the test: a key the sampler emits but the models lack fails."""
    saved = {cls: cls.model_config.get("extra") for cls in _all_models()}
    for cls in saved:
        cls.model_config["extra"] = "forbid"
        cls.model_rebuild(force=True)
    try:
        yield
    finally:
        for cls, extra in saved.items():
            cls.model_config["extra"] = extra
            cls.model_rebuild(force=True)


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in libnvidia-ml.so.1 (tests/fakenvml), built once per test process."""
    from fakenvml.fake import build
    from helpers import build_or_skip

    return build_or_skip(build, tmp_path_factory.mktemp("fakenvml"), "the fake libnvidia-ml")
