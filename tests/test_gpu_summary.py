"""SummaryBuilder's GPU figures, fed by the pure-Python FakeGpuBackend (no library, no processes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gputop_tracker.core.gpu import FakeGpuBackend, GpuReading, SimulatedGpuBackend, resolve_gpu_selection
from gputop_tracker.core.model.models import ResourceUsage, Sample
from gputop_tracker.core.model.units import Units
from gputop_tracker.core.proc.procfs import Reading
from gputop_tracker.core.report.render import to_text
from gputop_tracker.core.summary.builder import SummaryBuilder

MiB = 1024**2
MAIN, CHILD, STRANGER = 100, 101, 999


def reading(pid: int, ppid: int) -> Reading:
    r = Reading()
    r.handle = SimpleNamespace(pid=pid, ppid=ppid, name=f"p{pid}", cmdline=[f"p{pid}"])  # type: ignore[assignment]
    r.rss = r.private = r.pss = r.hwm = 10 * MiB
    r.threads = 1
    return r


def builder(**kw: object) -> SummaryBuilder:
    return SummaryBuilder(main_pid=MAIN, command=["x"], mode="launch", interval=1.0, start_time=0.0, **kw)  # type: ignore[arg-type]


def script(steps: list[list[GpuReading]]) -> FakeGpuBackend:
    it = iter(steps)
    return FakeGpuBackend(lambda _pids: next(it))


def g(index: int, **kw: object) -> GpuReading:
    base: dict[str, object] = {"uuid": f"GPU-{index}", "name": "Fake", "memory_total": 80 * 1024**3}
    return GpuReading(index=index, **{**base, **kw})  # type: ignore[arg-type]


def run(b: SummaryBuilder, backend: FakeGpuBackend, n: int) -> list[Sample]:
    procs = [reading(MAIN, 1), reading(CHILD, MAIN)]
    samples = []
    for t in range(n):
        gpus = backend.read([MAIN, CHILD])
        s = b.add(float(t), procs, gpus, (16 * 1024**3, 8 * 1024**3, 0.1), want_sample=True)
        assert s is not None
        samples.append(Sample.model_validate(s))
    return samples


def test_tree_memory_split_main_descendants_and_per_gpu() -> None:
    steps = [
        [g(0, memory_used=100 * MiB, processes={MAIN: 10 * MiB}), g(1, memory_used=0)],
        [
            g(0, memory_used=2000 * MiB, processes={MAIN: 1000 * MiB, STRANGER: 500 * MiB}),
            g(1, memory_used=3500 * MiB, processes={CHILD: 3000 * MiB}),
        ],
        [g(0, memory_used=900 * MiB, processes={MAIN: 400 * MiB}), g(1, memory_used=0, processes={})],
    ]
    b = builder()
    samples = run(b, script(steps), 3)
    u = ResourceUsage.model_validate(b.summary())
    assert u.max_gpu_ram.main == 1000 * MiB
    assert u.max_gpu_ram.descendants == 3000 * MiB
    assert u.max_gpu_ram.combined == 4000 * MiB
    assert u.max_gpu_ram.system == 5500 * MiB
    assert [x.tree_peak_memory for x in u.gpus] == [1000 * MiB, 3000 * MiB]
    assert [x.peak_memory_used for x in u.gpus] == [2000 * MiB, 3500 * MiB]
    assert samples[1].tree.gpu_memory == 4000 * MiB
    assert samples[1].gpus[0].tree_memory == 1000 * MiB  # the stranger's 500 MiB is not the tree's
    peaks = {p.pid: p.peak_gpu_memory for p in u.processes}
    assert peaks == {MAIN: 1000 * MiB, CHILD: 3000 * MiB}


def test_utilization_counts_only_selected_gpus_and_mean_max() -> None:
    steps = [[g(0, utilization_gpu=90.0), g(1, utilization_gpu=u)] for u in (10.0, 30.0, 50.0)]
    b = builder(gpu_uuids={"GPU-1"}, gpu_selection_reason="CUDA_VISIBLE_DEVICES=GPU-1")
    run(b, script(steps), 3)
    u = ResourceUsage.model_validate(b.summary())
    assert u.gpu_utilization.n_expected_gpus == 1
    assert u.gpu_utilization.gpu_percentages.max_sum_percent == 50.0
    assert u.gpu_utilization.gpu_percentages.mean_sum_percent == pytest.approx(30.0)
    g0, g1 = u.gpus
    assert (g0.counted, g1.counted) == (False, True)
    assert (g0.mean_utilization, g0.max_utilization) == (90.0, 90.0)  # still reported per GPU
    assert (g1.mean_utilization, g1.max_utilization) == (pytest.approx(30.0), 50.0)
    assert "GPUs counted for utilization: 1 (CUDA_VISIBLE_DEVICES=GPU-1)" in u.notes


def test_energy_power_temperature_and_tree_sm_peak() -> None:
    steps = [
        [g(0, energy_mj=1_000_000, power_w=100.0, temperature_c=40.0, process_sm_util={MAIN: 20.0, STRANGER: 99.0})],
        [g(0, energy_mj=1_250_000, power_w=300.0, temperature_c=70.0, process_sm_util={CHILD: 65.0})],
        [g(0, energy_mj=1_900_000, power_w=200.0, temperature_c=55.0)],
    ]
    b = builder()
    samples = run(b, script(steps), 3)
    u = ResourceUsage.model_validate(b.summary())
    x = u.gpus[0]
    assert x.energy_j == pytest.approx(900.0)
    assert u.gpu_energy_j == pytest.approx(900.0)
    assert u.gpu_energy_wh == pytest.approx(0.25)
    assert (x.mean_power_w, x.max_power_w) == (pytest.approx(200.0), 300.0)
    assert x.max_temperature_c == 70.0
    assert x.tree_peak_sm_utilization == 65.0  # the stranger's 99% is not the tree's
    assert samples[1].gpus[0].energy_j == pytest.approx(250.0)
    assert samples[0].gpus[0].tree_sm_util == 20.0


def test_energy_of_a_gpu_read_once_is_unknown_not_zero() -> None:
    """GPU 1 is lost after the first energy reading (the counter is read at most every 5 s): one reading measures
    nothing, so its energy is absent, not 0 J, and the total says it leaves GPU 1 out."""
    steps = [
        [g(0, energy_mj=1_000_000, power_w=100.0), g(1, energy_mj=7_000_000, power_w=400.0)],
        [g(0, power_w=100.0), g(1, lost=True)],
        [g(0, power_w=100.0), g(1, lost=True)],
    ]
    b = builder()
    run(b, script(steps), 3)
    b.final_gpu_energy({0: 1_300_000})  # the lost GPU gives no reading at the end
    u = ResourceUsage.model_validate(b.summary())
    assert u.gpus[0].energy_j == pytest.approx(300.0)
    assert u.gpus[1].energy_j is None
    assert u.gpu_energy_j == pytest.approx(300.0)
    assert any(n.startswith("gpu_energy_j leaves out GPU 1 ") and "lower bound" in n for n in u.notes), u.notes
    assert "300.0 J = 0.0833 Wh (lower bound: no reading of GPU 1, first to last reading)" in to_text(u, Units())


def test_an_energy_counter_that_goes_back_was_reset_never_a_negative_energy() -> None:
    """The counter counts since the driver loaded: a GPU reset mid-run starts it again from 0. The energy before
    the reset is kept and the new count added."""
    steps = [[g(0, energy_mj=9_000_000)], [g(0, energy_mj=9_400_000)], [g(0, energy_mj=100_000)]]
    b = builder()
    run(b, script(steps), 3)
    b.final_gpu_energy({0: 300_000})
    u = ResourceUsage.model_validate(b.summary())
    assert u.gpus[0].energy_j == pytest.approx(400.0 + 300.0)  # 400 J before, 300 J counted since the reset
    assert u.gpu_energy_j == pytest.approx(700.0)


def test_a_counted_gpu_without_utilization_is_noted() -> None:
    """CUDA_VISIBLE_DEVICES=MIG-…: the counted device is a MIG instance, whose utilization NVML does not give; the
    sums say 0%, and the notes say that is no measurement."""
    steps = [[g(0, utilization_gpu=80.0), g(1, mig_parent=0, uuid="MIG-a")]] * 2
    b = builder()
    b.select_gpus({"MIG-a"}, "CUDA_VISIBLE_DEVICES=MIG-a")
    run(b, script(steps), 2)
    u = ResourceUsage.model_validate(b.summary())
    assert u.gpu_utilization.gpu_percentages.max_sum_percent == 0.0
    assert any(n.startswith("GPU utilization: NVML gives none for counted GPU 1 (") for n in u.notes), u.notes
    b = builder()
    run(b, script([[g(0, utilization_gpu=80.0), g(1, lost=True)]] * 2), 2)  # a lost GPU has a note of its own
    assert not any(n.startswith("GPU utilization:") for n in ResourceUsage.model_validate(b.summary()).notes)


def test_gpm_metrics_absent_not_zero_where_unsupported() -> None:
    steps = [
        [g(0, sm_activity=40.0, sm_occupancy=10.0, tensor_activity=5.0, dram_bandwidth=30.0), g(1)],
        [g(0, sm_activity=60.0, sm_occupancy=30.0, tensor_activity=15.0, dram_bandwidth=50.0), g(1)],
    ]
    b = builder()
    run(b, script(steps), 2)
    u = ResourceUsage.model_validate(b.summary())
    g0, g1 = u.gpus
    assert (g0.mean_sm_activity, g0.max_sm_activity) == (50.0, 60.0)
    assert (g0.mean_sm_occupancy, g0.max_sm_occupancy) == (20.0, 30.0)
    assert (g0.mean_tensor_activity, g0.max_dram_bandwidth) == (10.0, 50.0)
    for name in ("mean_sm_activity", "max_sm_occupancy", "mean_tensor_activity", "max_dram_bandwidth"):
        assert getattr(g1, name) is None
    assert (g1.energy_j is None and u.gpu_energy_j is not None) or u.gpu_energy_j is None
    text = to_text(u, Units())
    assert "GPM: SM activity mean 50.0% max 60.0%" in text


def test_lost_gpu_and_unattributed_memory_notes() -> None:
    steps = [
        [g(0, memory_used=100, unattributed_memory=700 * MiB), g(1, memory_used=5, processes={MAIN: 5})],
        [g(0, memory_used=100, unattributed_memory=200 * MiB), g(1, lost=True)],
    ]
    b = builder()
    b.gpu_problems = {"GPU 1 (GPU-1) fell off the bus (NVML: GPU is lost)"}
    run(b, script(steps), 2)
    u = ResourceUsage.model_validate(b.summary())
    assert u.gpus[1].lost and not u.gpus[0].lost
    assert u.gpus[1].tree_peak_memory == 5
    assert u.gpus[0].peak_unattributed_memory == 700 * MiB
    assert u.max_gpu_ram.combined == 5  # unattributed memory is never silently the tree's
    assert any("was lost during the run" in n for n in u.notes)
    assert any("could not be mapped into this PID namespace" in n for n in u.notes)
    assert "GPU 1 (GPU-1) fell off the bus (NVML: GPU is lost)" in u.notes
    text = to_text(u, Units())
    assert "LOST" in text and "unattributed" in text


def test_mig_devices_counted_only_when_chosen() -> None:
    steps = [
        [
            g(0, memory_used=700 * MiB),
            g(1, uuid="MIG-a", memory_used=600 * MiB, mig_parent=0, gpu_instance_id=1, compute_instance_id=0,
              processes={MAIN: 500 * MiB}),
        ]
    ]  # fmt: skip
    b = builder()
    run(b, script(steps), 1)
    u = ResourceUsage.model_validate(b.summary())
    assert u.gpu_utilization.n_expected_gpus == 1  # the physical GPU, not its MIG slice too
    assert u.max_gpu_ram.system == 700 * MiB  # a MIG device's memory is its parent's
    assert u.max_gpu_ram.main == 500 * MiB
    mig = u.gpus[1]
    assert (mig.mig_parent, mig.gpu_instance_id, mig.compute_instance_id, mig.counted) == (0, 1, 0, False)
    assert "MIG on GPU 0" in to_text(u, Units())
    chosen, _ = resolve_gpu_selection(steps[0], "MIG-a")
    b2 = builder(gpu_uuids=chosen, gpu_selection_reason="--gpus")
    run(b2, script(steps), 1)
    u2 = ResourceUsage.model_validate(b2.summary())
    assert [x.counted for x in u2.gpus] == [False, True]


def test_old_session_without_new_gpu_fields_still_loads() -> None:
    old = {"gpus": [{"index": 0, "uuid": "GPU-0", "name": "A100", "tree_peak_memory": 5}], "gpu_note": None}
    u = ResourceUsage.model_validate(old)
    assert u.gpus[0].energy_j is None and u.gpus[0].mean_sm_activity is None and u.gpu_energy_j is None


def test_simulated_backend_is_labelled() -> None:
    t = [0.0]
    sim = SimulatedGpuBackend(2, clock=lambda: t[0])
    t[0] = 30.0
    readings = sim.read([MAIN])
    assert sim.simulated and sim.note is not None and "SIMULATED" in sim.note
    assert [r.name for r in readings] == ["Simulated GPU", "Simulated GPU"]
    b = builder(simulated_gpus=True, gpu_note=sim.note)
    b.add(0.0, [reading(MAIN, 1)], readings, (1, 1, 0.0))
    u = ResourceUsage.model_validate(b.summary())
    assert all(x.simulated for x in u.gpus)
    assert "SIMULATED" in to_text(u, Units())


def test_samples_carry_each_process_sm_percent_summed_over_gpus() -> None:
    backend = script(
        [
            [g(0, process_sm_util={MAIN: 20.0}), g(1, uuid="GPU-1", process_sm_util={MAIN: 30.0, CHILD: 5.0})],
            [g(0), g(1, uuid="GPU-1")],
        ]
    )
    first, second = run(builder(), backend, 2)
    by_pid = {p.pid: p.gpu_sm_percent for p in first.processes}
    assert by_pid == {MAIN: 50.0, CHILD: 5.0}
    assert all(p.gpu_sm_percent is None for p in second.processes)  # not reported: unknown, not 0


def test_simulated_energy_is_the_power_integrated_and_only_grows() -> None:
    """A real energy counter only grows: the simulated one integrates its power curve (it multiplied the power of
    the moment by the time since start, which fell with the power and read 1.1 GJ after 8 minutes in a report)."""
    from gputop_tracker.core.gpu import SimulatedGpuBackend

    now = [0.0]
    backend = SimulatedGpuBackend(2, clock=lambda: now[0])
    seen, powers = [], []
    for second in range(1, 481):
        now[0] = float(second)
        reading = backend.read([1])[0]
        seen.append(reading.energy_mj)
        powers.append(reading.power_w)
    assert seen == sorted(seen)
    mean_power = sum(powers) / len(powers)  # 90 + 3 × util, util about 50 % on average
    assert seen[-1] / 1000 == pytest.approx(mean_power * 480, rel=0.05)
