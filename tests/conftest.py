from __future__ import annotations

from pathlib import Path

import pytest


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
