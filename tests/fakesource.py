"""A deterministic data source for tests, snapshots and screenshots: the same interface as the sampler.

Samples are built as `models.Sample` objects directly (a small training job: a main process, a data
loader pool and a compiler child, with two clearly simulated GPUs); nothing depends on a clock, so the
same script always draws the same screen.
"""

from __future__ import annotations

import math
import queue
import signal
from collections.abc import Iterator

from gputop_tracker.core.model.models import (
    ComputeTime,
    CPUTime,
    CPUUtilization,
    Event,
    GpuSample,
    GpuSummary,
    GPUUtilization,
    HostSample,
    LiveBlock,
    LiveBlocks,
    MaxGPURAM,
    MaxRAM,
    Percentages,
    ProcessSample,
    ProcessSummary,
    ResourceUsage,
    RSSValues,
    Sample,
    TreeSample,
)
from gputop_tracker.core.sampling.channel import (
    STOP_SIGNAL,
    BlocksMessage,
    EventMessage,
    Message,
    Progress,
    SampleMessage,
    Started,
    Summary,
)
from gputop_tracker.core.summary.efficiency import with_job

MB = 1_000_000
GIB = 1024**3
MAIN_PID = 4242
SESSION_ID = "20250301-120000-demo-4242-beef"
COMMAND = ["python3", "train.py", "--epochs", "3"]
START_TIME = 1_740_830_400.0  # fixed: no clock anywhere

# pid, ppid, name, base rss (MB), threads
TREE = [
    (MAIN_PID, 1000, "python3", 1800, 24),
    (4250, MAIN_PID, "pt_data_worker", 420, 4),
    (4251, MAIN_PID, "pt_data_worker", 410, 4),
    (4252, MAIN_PID, "pt_data_worker", 430, 4),
    (4253, MAIN_PID, "pt_data_worker", 415, 4),
    (4260, MAIN_PID, "sh", 3, 1),
    (4261, 4260, "nvcc", 95, 2),
    (4262, 4261, "cicc", 310, 1),
]


def gpu_uuid(g: int) -> str:
    return f"GPU-51a1a7ed-0000-4000-8000-{g:012d}"


def _held_on_gpu(i: int, g: int) -> int:
    """Bytes the job holds on GPU g at sample i: it grows for 8 samples, then stays."""
    return int((6 + 4 * g) * GIB * min(1.0, i / 8))


def _fake_process(
    i: int, k: int, row: tuple[int, int, str, int, int], *, n_gpus: int, interval: float
) -> ProcessSample:
    """Process `row` (the k-th of the tree) at sample i."""
    pid, ppid, name, base, threads = row
    wave = 1.0 + 0.15 * math.sin(i / 3.0 + k)
    rss = int(base * MB * wave * min(1.0, 0.4 + i / 10))
    private = int(rss * (0.55 if pid != MAIN_PID else 0.8))
    cpu = round(abs(95 * math.sin(i / 4.0 + k * 0.7)) if pid != 4260 else 0.0, 1)
    if pid == MAIN_PID:
        cpu = round(160 + 30 * math.sin(i / 5.0), 1)
    gpu_mem = {gpu_uuid(g): _held_on_gpu(i, g) for g in range(n_gpus)}
    return ProcessSample(
        pid=pid,
        ppid=ppid,
        name=name,
        cmdline=COMMAND if pid == MAIN_PID else [name],
        role="main" if pid == MAIN_PID else "descendant",
        rss=rss,
        private=private,
        shared=rss - private,
        pss=int(private + (rss - private) * 0.3),
        peak_rss=int(base * MB * 1.15),
        cpu_seconds=round(cpu / 100 * interval * (i + 1), 2),
        cpu_percent=cpu,
        threads=threads,
        gpu_memory=gpu_mem if pid == MAIN_PID else {},
        gpu_sm_percent=round(sum(45 + 40 * math.sin(i / 7.0 + g) for g in range(n_gpus)), 1)
        if pid == MAIN_PID and n_gpus
        else None,
    )


def _fake_gpu(i: int, g: int) -> GpuSample:
    """Simulated GPU g at sample i."""
    util = round(50 + 45 * math.sin(i / 7.0 + g), 1)
    held = _held_on_gpu(i, g)
    return GpuSample(
        index=g,
        uuid=gpu_uuid(g),
        name="Simulated GPU",
        memory_total=80 * GIB,
        memory_used=held + 512 * 1024**2,
        utilization_gpu=util,
        utilization_memory=round(util * 0.6, 1),
        temperature_c=round(40 + util / 4, 1),
        power_w=round(90 + 3 * util, 1),
        power_limit_w=700.0,
        tree_memory=held,
        simulated=True,
    )


def _tree_totals(procs: list[ProcessSample]) -> TreeSample:
    """The tree's figures of one sample, from its processes (the first is the main process)."""
    pss = sum(p.pss for p in procs)
    private = sum(p.private for p in procs)
    main = procs[0] if procs else None
    return TreeSample(
        main_rss=main.rss if main else 0,
        main_private=main.private if main else 0,
        main_shared=main.shared if main else 0,
        descendants_total=sum(p.pss for p in procs[1:]),
        descendants_private=sum(p.private for p in procs[1:]),
        combined_total=pss,
        combined_private=private,
        combined_shared=pss - private,
        cpu_percent=round(sum(p.cpu_percent for p in procs), 1),
        main_cpu_percent=main.cpu_percent if main else 0.0,
        cpu_seconds=round(sum(p.cpu_seconds for p in procs), 2),
        threads=sum(p.threads for p in procs),
        gpu_memory=sum(sum(p.gpu_memory.values()) for p in procs),
        n_processes=len(procs),
    )


def make_sample(
    i: int, *, n_gpus: int = 2, interval: float = 1.0, tree: list[tuple[int, int, str, int, int]] | None = None
) -> Sample:
    """The i-th sample of the demo job (i >= 0)."""
    rows = tree if tree is not None else TREE
    procs = [_fake_process(i, k, row, n_gpus=n_gpus, interval=interval) for k, row in enumerate(rows)]
    return Sample(
        time=START_TIME + i * interval,
        elapsed=round(i * interval, 3),
        processes=procs,
        gpus=[_fake_gpu(i, g) for g in range(n_gpus)],
        host=HostSample(
            memory_total=64_000 * MB, memory_used=21_500 * MB + i * 40 * MB, cpu_percent=38.5, cpu_count=16
        ),
        tree=_tree_totals(procs),
    )


def _gpu_summaries(samples: list[Sample]) -> list[GpuSummary]:
    """Each GPU of the last sample over the whole run."""
    summaries = []
    for g in samples[-1].gpus:
        readings = [x for s in samples for x in s.gpus if x.index == g.index]
        summaries.append(
            GpuSummary(
                index=g.index,
                uuid=g.uuid,
                name=g.name,
                memory_total=g.memory_total,
                peak_memory_used=max((x.memory_used or 0) for x in readings),
                tree_peak_memory=max(x.tree_memory for x in readings),
                mean_utilization=sum((x.utilization_gpu or 0) for x in readings) / len(samples),
                max_utilization=max((x.utilization_gpu or 0) for x in readings),
                simulated=True,
            )
        )
    return summaries


def _process_summaries(samples: list[Sample]) -> list[ProcessSummary]:
    """Each process of the last sample with its peaks over the run."""
    last = samples[-1]
    summaries = []
    for p in last.processes:
        seen = [x for s in samples for x in s.processes if x.pid == p.pid]
        summaries.append(
            ProcessSummary(
                pid=p.pid,
                ppid=p.ppid,
                name=p.name,
                role=p.role,
                first_seen=START_TIME,
                last_seen=last.time,
                peak_rss=p.peak_rss,
                peak_rss_source="VmHWM",
                peak_private=max(x.private for x in seen),
                peak_pss=max(x.pss for x in seen),
                peak_threads=p.threads,
                cpu_seconds=p.cpu_seconds,
                max_cpu_percent=max(x.cpu_percent for x in seen),
                peak_gpu_memory=max(sum(x.gpu_memory.values()) for x in seen),
            )
        )
    return summaries


def make_summary(
    samples: list[Sample],
    *,
    exit_code: int | None = 0,
    exit_signal: int | None = None,
    status: str = "exited",
    store: str = "/tmp/gputop-demo",
) -> ResourceUsage:
    """A final report consistent with `samples` (what the sampler would send when the job ends)."""
    last = samples[-1]
    wall = max(last.elapsed, 1e-9)
    peak = max(max(s.tree.combined_total for s in samples), max(p.peak_rss for s in samples for p in s.processes))
    cpu_sum = sum(s.tree.cpu_percent for s in samples) / len(samples)
    gpu_sum = [sum(g.utilization_gpu or 0 for g in s.gpus) for s in samples if s.gpus]
    gpus = _gpu_summaries(samples)
    return ResourceUsage(
        max_ram=MaxRAM(
            system_capacity=last.host.memory_total,
            system=max(s.host.memory_used for s in samples),
            main=RSSValues(
                total_rss=max(s.tree.main_rss for s in samples), private_rss=max(s.tree.main_private for s in samples)
            ),
            combined=RSSValues(total_rss=peak, private_rss=max(s.tree.combined_private for s in samples)),
            combined_sampled=max(s.tree.combined_total for s in samples),
        ),
        max_gpu_ram=MaxGPURAM(
            combined=max(s.tree.gpu_memory for s in samples), main=max(s.tree.gpu_memory for s in samples)
        ),
        cpu_utilization=CPUUtilization(
            system_core_count=16,
            n_expected_cores=16,
            combined=Percentages(max_sum_percent=max(s.tree.cpu_percent for s in samples), mean_sum_percent=cpu_sum),
            combined_n_threads=max(s.tree.threads for s in samples),
        ),
        gpu_utilization=GPUUtilization(
            system_gpu_count=len(gpus),
            n_expected_gpus=len(gpus),
            gpu_percentages=Percentages(
                max_sum_percent=max(gpu_sum, default=0.0),
                mean_sum_percent=sum(gpu_sum) / len(gpu_sum) if gpu_sum else 0.0,
            ),
        ),
        cpu_time=CPUTime(
            total=last.tree.cpu_seconds,
            user=last.tree.cpu_seconds * 0.9,
            system=last.tree.cpu_seconds * 0.1,
            mean_percent=100 * last.tree.cpu_seconds / wall,
            source="exact",
        ),
        peak_threads=max(s.tree.threads for s in samples),
        gpus=gpus,
        processes=_process_summaries(samples),
        compute_time=ComputeTime(time=wall),
        session_id=SESSION_ID,
        session_path=f"{store}/{SESSION_ID}.json",
        command=COMMAND,
        pid=MAIN_PID,
        exit_code=exit_code,
        exit_signal=exit_signal,
        status=status,
        start_time=START_TIME,
        end_time=last.time,
        interval=1.0,
        n_samples=len(samples),
        n_processes=len(last.processes),
    )


def fake_job(**requested: object) -> dict[str, object]:
    """A SLURM job's context (the `slurm` object) for the demo: job 4242 on gpu-node-07 with a request
    (16 GiB, 8 CPUs, both GPUs, 2 h unless `requested` says otherwise)."""
    asked = {
        "mem_bytes": 16 * GIB,
        "cpus": 8,
        "gpus": 2,
        "time_limit_s": 7200,
        "gpu_ids": ["0", "1"],
        "gpu_uuids": [gpu_uuid(0), gpu_uuid(1)],
        "cgroup_mem_bytes": None,
    }
    asked.update(requested)
    return {
        "job_id": "4242",
        "array_job_id": None,
        "array_task_id": None,
        "step_id": "batch",
        "node": "gpu-node-07",
        "node_id": 0,
        "local_id": 0,
        "num_nodes": 1,
        "requested": asked,
    }


def with_fake_job(usage: ResourceUsage, job: dict[str, object] | None) -> ResourceUsage:
    """The report with the job's context and its efficiency, as the sampler adds them (`efficiency.with_job`)."""
    if job is None:
        return usage
    means = [g.mean_utilization or 0.0 for g in usage.gpus]
    usage.gpu_utilization.gpu_percentages.mean_hardware_percent = sum(means) / len(means) if means else 0.0
    d = with_job(usage.model_dump(), {**job, "requested": dict(job["requested"])})  # type: ignore[call-overload]
    return ResourceUsage.model_validate(d)


def make_live_blocks(i: int) -> LiveBlocks | None:
    """The demo job's code blocks as of sample i: data loaded, then epochs of steps, a checkpoint now and then."""
    if i < 1:
        return None
    t0 = START_TIME
    steps = max(0, (i - 3) * 12)
    rows = [
        LiveBlock(name="load data", calls=1, duration_total=2.87, duration_mean=2.87, peak_ram=2_140 * MB,
                  peak_private=1_610 * MB, tree_peak_ram=3_920 * MB, cpu_seconds=2.41)
        if i >= 3
        else LiveBlock(name="load data", open=1, open_since=t0 + 0.2, peak_ram=1_200 * MB, tree_peak_ram=2_300 * MB),
    ]  # fmt: skip
    if i >= 3:
        rows.append(
            LiveBlock(name="train epoch", open=1, open_since=t0 + 3.0, peak_ram=2_310 * MB, peak_private=1_900 * MB,
                      tree_peak_ram=4_480 * MB, peak_gpu_ram=10 * GIB, marks=(i - 3) // 5 + 1)
        )  # fmt: skip
    if steps:
        rows.append(
            LiveBlock(name="train step", calls=steps, open=1, open_since=START_TIME + i - 0.05,
                      duration_total=steps * 0.0831, duration_mean=0.0831, peak_ram=2_290 * MB,
                      peak_private=1_870 * MB, tree_peak_ram=4_410 * MB, peak_gpu_ram=9 * GIB,
                      cpu_seconds=steps * 0.092)
        )  # fmt: skip
    if i >= 10:
        n = 1 + (i - 10) // 6
        rows.append(
            LiveBlock(name="save checkpoint", calls=n, duration_total=n * 0.412, duration_mean=0.412,
                      peak_ram=2_350 * MB, peak_private=1_950 * MB, tree_peak_ram=4_520 * MB, cpu_seconds=n * 0.35)
        )  # fmt: skip
    marks = (i - 3) // 5 + 1 if i >= 3 else 0
    return LiveBlocks(blocks=rows, names=len(rows), marks=marks, open_runs=sum(b.open for b in rows))


OUTPUT = [
    "loading dataset from /data/imagenet (1281167 images)",
    "epoch 1/3  step   100/5004  loss 6.8123  lr 0.100  1843 img/s",
    "epoch 1/3  step   200/5004  loss 6.5210  lr 0.100  1851 img/s",
    "epoch 1/3  step   300/5004  loss 6.2964  lr 0.100  1849 img/s",
    "warning: GPU 1 is SIMULATED in this demo",
]


class FakeSource:
    """Replays scripted messages, then waits like a running job until stopped, signalled or closed.

    `finished=True` ends the script with the final summary (the command exited). Otherwise `stop()`
    ends it as a detach and `signal(SIGTERM/SIGINT/...)` as the command dying of that signal. Tests
    may `push()` more messages while the view runs.
    """

    def __init__(
        self,
        n_samples: int = 12,
        *,
        finished: bool = False,
        exit_code: int = 0,
        n_gpus: int = 2,
        store: str = "/tmp/gputop-demo",
        tree: list[tuple[int, int, str, int, int]] | None = None,
        output: list[str] | None = None,
        ignores_sigterm: bool = False,
        job: dict[str, object] | None = None,
        blocks: bool = False,
    ) -> None:
        self.job = job  # a cluster job's context (`fake_job()`): the reports carry its request and efficiency
        self.tree = tree
        self.ignores_sigterm = ignores_sigterm  # stop_tree(SIGTERM) leaves the job running
        self.tree_signals: list[int] = []
        self.n_gpus = n_gpus
        self.samples = [make_sample(i, n_gpus=n_gpus, tree=tree) for i in range(n_samples)]
        self.exit_code = exit_code
        self.store = store
        self.main_pid = (tree or TREE)[0][0]
        self.output_text = list(OUTPUT if output is None else output)
        self.signals: list[int] = []
        self.stopped = False
        self.closed = False
        self.ended = False
        self._queue: queue.Queue[Message | None] = queue.Queue()
        self._queued = 0
        self._put(Started(self.main_pid, SESSION_ID, self.store))
        for k in range(len(self.samples)):
            self._put(self._progress(k + 1))
            if blocks:  # code blocks: as the sampler sends them, before the sample
                self._put_blocks(k)
            self._put(SampleMessage(self.samples[k]))
        if finished:
            self._end(exit_code=exit_code)

    def _put_blocks(self, k: int) -> None:
        def event(kind: str, name: str) -> EventMessage:
            return EventMessage(Event(time=START_TIME + k, type=kind, message="", pid=self.main_pid, name=name))

        if k == 1:
            self._put(event("block_start", "load data"))
        if k == 3:
            self._put(event("block_end", "load data"))
            self._put(event("block_start", "train epoch"))
        if (lb := make_live_blocks(k)) is not None:
            self._put(BlocksMessage(lb))

    @property
    def n_scripted(self) -> int:
        """Messages queued so far (what a test waits for the view to have taken)."""
        return self._queued

    def _progress(self, n: int) -> Progress:
        """The running summary over the first n samples, as the sampler sends it (no per-process list)."""
        usage = make_summary(self.samples[:n], exit_code=None, status="running", store=self.store)
        usage = with_fake_job(usage, self.job)
        return Progress(usage.model_copy(update={"processes": [], "session_path": None}))

    def push(self, msg: Message, *, progress: bool = True) -> None:
        """Queue a message; a sample comes after the running summary that includes it, as from the sampler
        (`progress=False`: the sample alone)."""
        if isinstance(msg, SampleMessage):
            self.samples.append(msg.sample)
            if progress:
                self._put(self._progress(len(self.samples)))
        self._put(msg)

    def _put(self, msg: Message | None) -> None:
        if msg is not None:
            self._queued += 1
        self._queue.put(msg)

    def push_sample(self, i: int | None = None) -> Sample:
        s = make_sample(len(self.samples) if i is None else i, n_gpus=self.n_gpus, tree=self.tree)
        self.push(SampleMessage(s))
        return s

    def _end(
        self, *, exit_code: int | None, exit_signal: int | None = None, status: str = "exited", note: str = ""
    ) -> None:
        if self.ended:
            return
        self.ended = True
        summary = with_fake_job(
            make_summary(self.samples, exit_code=exit_code, exit_signal=exit_signal, status=status, store=self.store),
            self.job,
        )
        if note:
            summary.notes.append(note)
        self._put(Summary(summary))
        self._put(None)

    def messages(self) -> Iterator[Message]:
        while not self.closed:
            try:
                msg = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if msg is None:
                return
            yield msg

    def output(self) -> Iterator[str]:
        if self.output_text:
            yield "\n".join(self.output_text) + "\n"

    def signal(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == STOP_SIGNAL:
            self.stop()
        elif sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL):
            self._end(exit_code=128 + sig, exit_signal=sig, status="killed")

    def stop_tree(self, sig: int) -> bool:
        """As the sampler: the whole tree gets `sig`; it ends the job unless it ignores SIGTERM."""
        self.tree_signals.append(sig)
        if sig == signal.SIGTERM and self.ignores_sigterm:
            return True
        n = len(self.samples[-1].processes) if self.samples else 0
        names = ", then ".join(f"{signal.Signals(s).name} to {n}" for s in self.tree_signals)
        note = f"stopped from the live view: {names} processes of the tree; none survived"
        self._end(exit_code=128 + sig, exit_signal=sig, status="killed", note=note)
        return True

    def stop(self) -> None:
        self.stopped = True
        self._end(exit_code=None, status="detached")

    def close(self) -> None:
        self.closed = True
