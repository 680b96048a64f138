"""GpuSelection: the job's own CUDA_VISIBLE_DEVICES, read from each tracked process once (and after an exec)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gputop_tracker.core.gpu import GpuReading, resolve_gpu_selection
from gputop_tracker.core.gpu import selection as gpuselect
from gputop_tracker.core.gpu.selection import GpuSelection
from gputop_tracker.core.proc.procfs import Reading


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


def test_the_first_on_a_gpu_without_the_variable_sees_every_gpu(
    environ: dict[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU-only helper started with CUDA_VISIBLE_DEVICES="" (to keep it off the GPUs) moves the choice to none;
    then main, which never set the variable, is the first on a GPU: it sees every GPU, and every GPU counts."""
    readable = {1: True, 5: False}
    monkeypatch.setattr(gpuselect, "environ_readable", lambda pid: readable[pid], raising=False)
    sel = GpuSelection(None, {}, "ours")
    environ[2] = ""
    sel.observe([reading(1, "train"), reading(2, "tokenizer")], gpu())
    assert sel.spec == ""
    assert sel.observe([reading(1, "train"), reading(2, "tokenizer")], gpu(1))
    assert sel.spec is None and sel.settled
    assert sel.reason == "every GPU: process 1 (train), the first on a GPU, has no CUDA_VISIBLE_DEVICES"
    # an environment we cannot read says nothing: the choice stays
    other = GpuSelection(None, {}, "ours")
    environ[6] = "0"
    other.observe([reading(6, "y"), reading(5, "x")], gpu(5))
    assert other.spec == "0"


def test_gpus_flag_is_fixed(environ: dict[int, str]) -> None:
    environ[1] = "1"
    sel = GpuSelection("0", {}, "ours")
    assert sel.observe([reading(1, "x")], gpu(1))
    assert sel.spec == "0" and sel.reason == "--gpus"
    assert not sel.observe([reading(1, "y")], gpu(1))


# ------------------------------------------------------------------ AMD: ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES


def amd_gpus(n: int = 3) -> list[GpuReading]:
    return [
        GpuReading(index=i, uuid=f"aaaa-{i}", name="AMD", vendor="amd", alt_ids=(f"GPU-{i:016x}",)) for i in range(n)
    ]


@pytest.mark.parametrize(
    ("values", "spec"),
    [
        ({}, None),
        ({"ROCR_VISIBLE_DEVICES": "1,2"}, "ROCR_VISIBLE_DEVICES=1,2"),
        (
            {"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1"},
            "ROCR_VISIBLE_DEVICES=1,2; HIP_VISIBLE_DEVICES=1",
        ),
        ({"CUDA_VISIBLE_DEVICES": "0"}, "CUDA_VISIBLE_DEVICES=0"),  # HIP honours it when HIP's own is unset
        ({"HIP_VISIBLE_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "0"}, "HIP_VISIBLE_DEVICES=2"),
    ],
)
def test_layered_spec(values: dict[str, str], spec: str | None) -> None:
    assert gpuselect.layered_spec(values) == spec


@pytest.mark.parametrize(
    ("spec", "chosen"),
    [
        ("ROCR_VISIBLE_DEVICES=1,2; HIP_VISIBLE_DEVICES=1", {"aaaa-2"}),  # HIP indexes what ROCr left
        ("ROCR_VISIBLE_DEVICES=2,0; HIP_VISIBLE_DEVICES=1", {"aaaa-0"}),  # in ROCr's order
        ("ROCR_VISIBLE_DEVICES=GPU-0000000000000001", {"aaaa-1"}),  # ROCr's GPU-<hex> UUID
        ("HIP_VISIBLE_DEVICES=0,aaaa-2", {"aaaa-0", "aaaa-2"}),
        ("ROCR_VISIBLE_DEVICES=1; HIP_VISIBLE_DEVICES=1", set()),  # index past what ROCr left: none
    ],
)
def test_layers_resolve_as_rocr_then_hip(spec: str, chosen: set[str]) -> None:
    got, problems = resolve_gpu_selection(amd_gpus(), spec)
    assert got == chosen
    assert bool(problems) == (not chosen)


def test_amd_selection_reads_rocm_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    envs = {1: {"ROCR_VISIBLE_DEVICES": "0,2", "HIP_VISIBLE_DEVICES": "1"}}
    monkeypatch.setattr(
        gpuselect, "read_variable", lambda pid, name="CUDA_VISIBLE_DEVICES": envs.get(pid, {}).get(name)
    )
    sel = GpuSelection(None, {"ROCR_VISIBLE_DEVICES": "1"}, "ours", gpuselect.variables_for("amd"))
    assert sel.spec == "ROCR_VISIBLE_DEVICES=1" and sel.reason == "ROCR_VISIBLE_DEVICES=1 (ours)"
    assert sel.observe([reading(1, "python")], gpu(1))
    assert sel.spec == "ROCR_VISIBLE_DEVICES=0,2; HIP_VISIBLE_DEVICES=1"
    assert sel.reason == "ROCR_VISIBLE_DEVICES=0,2; HIP_VISIBLE_DEVICES=1 (set by the job: process 1, python)"
    none = GpuSelection(None, {}, "ours", gpuselect.variables_for("amd"))
    assert (
        none.reason == "every GPU: no --gpus and no ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES"
    )
    assert gpuselect.variables_for("nvidia") == ("CUDA_VISIBLE_DEVICES",)


def eight_gpus() -> list[GpuReading]:
    return [GpuReading(index=i, uuid=f"GPU-{i:08x}-1111-4000-8000-{i:012d}", name="H100") for i in range(8)]


@pytest.mark.parametrize(
    ("spec", "runtime", "chosen"),
    [
        ("0,9,1", {0}, {0, 1}),  # CUDA: "only the devices whose index precedes the invalid index are visible"
        ("2,foo,1", {2}, {1, 2}),
        ("GPU-0000,3", set(), {3}),  # a short UUID that names two GPUs is no GPU for CUDA
        ("3,GPU-00000005", {3, 5}, {3, 5}),
        ("", set(), set()),
        ("-1", set(), set()),
        ("1,-1,2", {1}, {1}),
    ],
)
def test_an_invalid_entry_hides_the_rest_from_the_job_not_from_gpus_flag(
    spec: str, runtime: set[int], chosen: set[int]
) -> None:
    gpus = eight_gpus()
    got, _ = resolve_gpu_selection(gpus, spec, as_runtime=True)
    assert got == {gpus[i].uuid for i in runtime}
    got, _ = resolve_gpu_selection(gpus, spec)
    assert got == {gpus[i].uuid for i in chosen}


def test_the_note_says_what_the_invalid_entry_hid() -> None:
    _, problems = resolve_gpu_selection(eight_gpus(), "0,9,1, 2", as_runtime=True)
    assert problems == ["'9' matches no GPU: the job's GPU runtime sees no GPU from there on (1,2 not counted)"]


def test_indices_on_a_machine_with_different_models_carry_a_caveat(monkeypatch: pytest.MonkeyPatch) -> None:
    """An RTX 4090 beside a T400 for the display: CUDA's index 0 is the fastest, NVML's the first on the bus."""
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    gpus = [GpuReading(index=0, uuid="GPU-a", name="NVIDIA T400"), GpuReading(index=1, uuid="GPU-b", name="RTX 4090")]
    _, problems = resolve_gpu_selection(gpus, "0", as_runtime=True, cuda_order=True)
    assert len(problems) == 1 and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in problems[0]
    assert resolve_gpu_selection(gpus, "0")[1] == []  # a scheduler's indices are not CUDA's
    assert resolve_gpu_selection(gpus, "GPU-b", cuda_order=True)[1] == []  # a UUID is one GPU for sure
    assert resolve_gpu_selection(eight_gpus(), "0", cuda_order=True)[1] == []  # one model: both orders agree
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert resolve_gpu_selection(gpus, "0", cuda_order=True)[1] == []
