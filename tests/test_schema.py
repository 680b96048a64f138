"""One schema per shape: what the sampler emits (a streamed sample, the summary) validates against the models
with extra="forbid", so a mistyped or forgotten key fails here instead of being dropped by a reader."""

from __future__ import annotations

import dataclasses
import os

from gputop_tracker.core.gpu import SAMPLE_FIELDS, FakeGpuBackend, GpuReading
from gputop_tracker.core.model import models
from gputop_tracker.core.model.gpufields import GpuFields
from gputop_tracker.core.proc.host import HostReader
from gputop_tracker.core.proc.procfs import ProcessTree
from gputop_tracker.core.summary.builder import Outcome, SummaryBuilder
from gputop_tracker.core.summary.events import FlightRecorder


def _full_gpu(index: int, pid: int) -> GpuReading:
    """A reading with every optional field set, so a field the sample forgets or misnames shows."""
    values: dict[str, object] = {}
    for f in dataclasses.fields(GpuReading):
        if f.name in ("index", "uuid", "name"):
            continue
        values[f.name] = {
            "lost": False,
            "pci_bus_id": "0000:01:00.0",
            "mig_parent": None,
            "vendor": "amd",
            "alt_ids": (),
            "window": None,  # the GPU memory watcher's reads: not a field of the sample
        }.get(f.name, 1)
    values.update(processes={pid: 10 << 20}, process_sm_util={pid: 40.0}, process_memory_util={pid: 5.0})
    values.update(process_instances={}, energy_mj=1000 * (index + 1), no_figure=frozenset({pid}))
    return GpuReading(index=index, uuid=f"GPU-{index}", name="Fake", **values)  # type: ignore[arg-type]


def test_streamed_sample_and_summary_have_exactly_the_models_fields(strict_models: None) -> None:
    me = os.getpid()
    tree = ProcessTree(me)
    host = HostReader()
    backend = FakeGpuBackend(lambda pids: [_full_gpu(0, me), _full_gpu(1, me)])
    b = SummaryBuilder(
        main_pid=me,
        command=["pytest"],
        mode="attach",
        interval=0.1,
        start_time=0.0,
        recorder=FlightRecorder(10, 0.1),
    )
    try:
        for i in range(3):
            tree.discover()
            readings = tree.read(float(i))
            sample = b.add(float(i + 1), readings, backend.read([me]), host.read(), want_sample=True)
            assert sample is not None
            models.Sample.model_validate(sample)
    finally:
        tree.close()
        host.close()
    b.finish(Outcome(status="stopped", cgroup_peak=123, cgroup_source="test"))
    usage = models.ResourceUsage.model_validate(b.summary())
    assert usage.processes and usage.gpus and usage.processes[0].peak_rss_exact in (True, False)
    models.ResourceUsage.model_validate(b.summary(details=False))


def test_gpu_sample_fields_are_listed_once() -> None:
    """gpu.SAMPLE_FIELDS (what the sampler copies from a reading) and the model agree, and every name exists."""
    reading_fields = {f.name for f in dataclasses.fields(GpuReading)}
    assert set(SAMPLE_FIELDS) <= reading_fields
    ours = {"tree_memory", "counted", "simulated", "energy_j", "tree_sm_util"}
    assert set(models.GpuSample.model_fields) == set(SAMPLE_FIELDS) | ours
    # one field list: the reading and the streamed sample both derive from it
    assert issubclass(GpuReading, GpuFields) and issubclass(models.GpuSample, GpuFields)
    assert tuple(f.name for f in dataclasses.fields(GpuFields)) == SAMPLE_FIELDS
