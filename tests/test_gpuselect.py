"""GpuSelection: the job's own CUDA_VISIBLE_DEVICES, read from each tracked process once (and after an exec)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gputop_tracker.core import gpuselect
from gputop_tracker.core.gpu import GpuReading
from gputop_tracker.core.gpuselect import GpuSelection
from gputop_tracker.core.procfs import Reading


def reading(pid: int, name: str) -> Reading:
    r = Reading()
    r.handle = SimpleNamespace(pid=pid, name=name)  # type: ignore[assignment]
    return r


def gpu(*pids: int) -> list[GpuReading]:
    return [GpuReading(index=0, uuid="GPU-0", name="x", processes=dict.fromkeys(pids, 1))]


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> dict[int, str]:
    env: dict[int, str] = {}
    reads: list[int] = []

    def fake(pid: int, name: str = "CUDA_VISIBLE_DEVICES") -> str | None:
        reads.append(pid)
        return env.get(pid)

    fake.reads = reads  # type: ignore[attr-defined]  # which pids were read, for the tests that count
    monkeypatch.setattr(gpuselect, "read_variable", fake)
    return env


def test_no_gpu_reads_nothing(environ: dict[int, str]) -> None:
    sel = GpuSelection(None, {}, "ours")
    assert not sel.observe([reading(1, "bash")], [])
    assert gpuselect.read_variable.reads == []  # type: ignore[attr-defined]


def test_a_shell_that_exports_then_execs(environ: dict[int, str]) -> None:
    sel = GpuSelection(None, {}, "ours")
    assert sel.observe([reading(1, "bash")], gpu())  # the first decision: every GPU
    assert sel.spec is None
    environ[1] = "1"  # after `export …; exec python`, the new image's environment has it
    assert sel.observe([reading(1, "python")], gpu())
    assert sel.spec == "1" and "set by the job" in sel.reason
    assert not sel.observe([reading(1, "python")], gpu())  # read once per image


def test_the_first_process_on_a_gpu_settles_it(environ: dict[int, str]) -> None:
    sel = GpuSelection(None, {"CUDA_VISIBLE_DEVICES": "0"}, "ours")
    environ.update({2: "1", 3: "2"})
    sel.observe([reading(1, "main")], gpu())
    sel.observe([reading(2, "a"), reading(3, "b")], gpu(3))
    assert sel.spec == "2" and sel.settled
    environ[4] = "3"
    assert not sel.observe([reading(4, "late")], gpu(3))


def test_gpus_flag_is_fixed(environ: dict[int, str]) -> None:
    environ[1] = "1"
    sel = GpuSelection("0", {}, "ours")
    assert sel.observe([reading(1, "x")], gpu(1))
    assert sel.spec == "0" and sel.reason == "--gpus"
    assert not sel.observe([reading(1, "y")], gpu(1))
