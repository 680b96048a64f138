"""A deterministic data source for tests, snapshots and screenshots: the same interface as the sampler.

The demo job (a main process, a data loader pool and a compiler child, with two clearly simulated GPUs) is
scripted as procfs-style readings; the real `SummaryBuilder` turns them into samples and running summaries,
and into the final report, as the sampler does. Nothing depends on a clock or on this machine (host name,
core count and the time of every event are pinned), so the same script always draws the same screen.
"""

from __future__ import annotations

import math
import queue
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from gputop_tracker.core.blocks.summary import BlocksPart
from gputop_tracker.core.gpu import SAMPLE_FIELDS, GpuReading
from gputop_tracker.core.model.models import Event, LiveBlock, LiveBlocks, ResourceUsage, Sample
from gputop_tracker.core.proc.procfs import Reading
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
from gputop_tracker.core.summary.builder import Outcome, SummaryBuilder

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


HOST_NAME = "gpu-node-07"  # pinned: never this machine's name or core count
CORES = 16
USER_SHARE = 0.9  # of each process's CPU time spent in user mode; the rest in the kernel
HOST_MEMORY = 64_000 * MB
HOST_CPU_PERCENT = 38.5  # the whole machine, 100 = every core busy


class Who(NamedTuple):
    """Who a reading is of (what `procfs.ProcHandle` tells the builder)."""

    pid: int
    ppid: int
    name: str
    cmdline: list[str]


def reading(
    who: Who,
    *,
    rss: int,
    private: int,
    pss: int,
    hwm: int,
    cpu_seconds: float,
    cpu_percent: float,
    threads: int,
    bound: bool = False,
) -> Reading:
    """One process as one sample read it: nothing it waited for (cutime = 0), so its user + system time is
    its own CPU time."""
    r = Reading()
    r.handle = who  # type: ignore[assignment]
    r.rss, r.private, r.pss, r.hwm = rss, private, pss, hwm
    r.shared = rss - private
    r.pss_shared = pss - private
    r.utime_stime = cpu_seconds
    r.user_total = cpu_seconds * USER_SHARE
    r.system_total = cpu_seconds - r.user_total
    r.cpu_percent = cpu_percent
    r.threads = threads
    r.bound = bound
    return r


def _cpu_percent(i: int, k: int, pid: int) -> float:
    """CPU % of the k-th process of the tree over the interval that ends at sample i."""
    if pid == MAIN_PID:
        return round(160 + 30 * math.sin(i / 5.0), 1)
    return round(abs(95 * math.sin(i / 4.0 + k * 0.7)) if pid != 4260 else 0.0, 1)


def _fake_reading(i: int, k: int, row: tuple[int, int, str, int, int], *, interval: float) -> Reading:
    """Process `row` (the k-th of the tree) at sample i."""
    pid, ppid, name, base, threads = row
    wave = 1.0 + 0.15 * math.sin(i / 3.0 + k)
    rss = int(base * MB * wave * min(1.0, 0.4 + i / 10))
    private = int(rss * (0.55 if pid != MAIN_PID else 0.8))
    cpu = _cpu_percent(i, k, pid)
    return reading(
        Who(pid, ppid, name, COMMAND if pid == MAIN_PID else [name]),
        rss=rss,
        private=private,
        pss=int(private + (rss - private) * 0.3),
        hwm=int(base * MB * 1.15),  # above every RSS the wave reaches
        cpu_seconds=round(sum(_cpu_percent(j, k, pid) for j in range(1, i + 1)) / 100 * interval, 2),  # only grows
        cpu_percent=cpu,
        threads=threads,
    )


def _fake_gpu(i: int, g: int) -> GpuReading:
    """Simulated GPU g at sample i: the main process holds the job's memory and runs its kernels."""
    util = round(50 + 45 * math.sin(i / 7.0 + g), 1)
    held = _held_on_gpu(i, g)
    return GpuReading(
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
        processes={MAIN_PID: held},
        process_sm_util={MAIN_PID: round(45 + 40 * math.sin(i / 7.0 + g), 1)},
    )


def _host(i: int) -> tuple[int, int, float]:
    """The machine at sample i: (MemTotal, used, CPU % of the whole machine)."""
    return HOST_MEMORY, 21_500 * MB + i * 40 * MB, HOST_CPU_PERCENT


def new_builder(
    main_pid: int = MAIN_PID, *, interval: float = 1.0, clock: Callable[[], float] | None = None
) -> SummaryBuilder:
    """The sampler's summary builder, pinned to the demo: its start, host, cores and clock."""
    builder = SummaryBuilder(
        main_pid=main_pid,
        command=COMMAND,
        mode="launch",
        interval=interval,
        start_time=START_TIME,
        n_expected_cores=CORES,
        simulated_gpus=True,
        clock=clock or (lambda: START_TIME),
    )
    BlocksPart.attach(builder)
    builder.host = HOST_NAME
    builder.system_core_count = CORES
    return builder


def sample_of(
    now: float, readings: Sequence[Reading], gpus: Sequence[GpuReading], host: tuple[int, int, float], main_pid: int
) -> Sample:
    """One sample as the sampler streams it: the builder's own `add(..., want_sample=True)`."""
    out = new_builder(main_pid).add(now, readings, gpus, host, want_sample=True)
    assert out is not None
    return Sample.model_validate(out)


def make_sample(
    i: int, *, n_gpus: int = 2, interval: float = 1.0, tree: list[tuple[int, int, str, int, int]] | None = None
) -> Sample:
    """The i-th sample of the demo job (i >= 0)."""
    rows = tree if tree is not None else TREE
    readings = [_fake_reading(i, k, row, interval=interval) for k, row in enumerate(rows)]
    gpus = [_fake_gpu(i, g) for g in range(n_gpus)]
    return sample_of(START_TIME + i * interval, readings, gpus, _host(i), rows[0][0] if rows else MAIN_PID)


def readings_of(sample: Sample) -> tuple[list[Reading], list[GpuReading], tuple[int, int, float]]:
    """What the sampler read to stream `sample` (a sample pushed by a test is fed to the builder the same way).

    Each GPU's SM % goes to the processes holding memory on it: in the demo only the main process does."""
    procs = sample.processes
    readings = [
        reading(
            Who(p.pid, p.ppid, p.name, p.cmdline),
            rss=p.rss,
            private=p.private,
            pss=p.pss,
            hwm=p.peak_rss,
            cpu_seconds=p.cpu_seconds,
            cpu_percent=p.cpu_percent,
            threads=p.threads,
            bound=p.mem_bound,
        )
        for p in procs
    ]
    gpus = []
    for g in sample.gpus:
        holders = {p.pid: p.gpu_memory[g.uuid] for p in procs if g.uuid in p.gpu_memory}
        sm = {pid: g.tree_sm_util for pid in holders if g.tree_sm_util is not None}
        gpus.append(
            GpuReading(**{f: getattr(g, f) for f in SAMPLE_FIELDS}, processes=holders, process_sm_util=sm)  # type: ignore[arg-type]
        )
    host = sample.host
    return readings, gpus, (host.memory_total, host.memory_used, host.cpu_percent)


def main_pid_of(sample: Sample) -> int:
    return next((p.pid for p in sample.processes if p.role == "main"), MAIN_PID)


def recounted(sample: Sample) -> Sample:
    """`sample` after a test changed its processes: its tree figures counted again by the builder."""
    return sample_of(sample.time, *readings_of(sample), main_pid=main_pid_of(sample))


class ScriptedRun:
    """The real `SummaryBuilder` fed as the sampler feeds it — every sample; `vanished` for the processes gone
    since the last one; at the end, each process reaped with its last reading as its rusage — with the time of
    the sample as its clock."""

    def __init__(self, main_pid: int = MAIN_PID, *, interval: float = 1.0, job: dict[str, Any] | None = None) -> None:
        self.now = START_TIME
        self.builder = new_builder(main_pid, interval=interval, clock=lambda: self.now)
        self.job = job
        self.last: list[Reading] = []

    def add(self, sample: Sample) -> None:
        readings, gpus, host = readings_of(sample)
        self.now = sample.time
        alive = {r.handle.pid for r in readings}
        if gone := [r.handle.pid for r in self.last if r.handle.pid not in alive]:
            self.builder.vanished(gone, alive=alive)
        self.last = readings
        self.builder.add(sample.time, readings, gpus, host)

    def summary(self, *, details: bool = True) -> ResourceUsage:
        job = None if self.job is None else {**self.job, "requested": dict(self.job["requested"])}
        return ResourceUsage.model_validate(self.builder.summary(details=details, job=job))

    def end(
        self,
        *,
        exit_code: int | None = 0,
        exit_signal: int | None = None,
        status: str = "exited",
        store: str = "/tmp/gputop-demo",
        note: str = "",
    ) -> ResourceUsage:
        """The final report: the job exited or was killed (its processes reaped, the main process first), or
        tracking detached from it (all still running)."""
        builder = self.builder
        if status != "detached":
            main = builder.main_pid
            for r in sorted(self.last, key=lambda r: r.handle.pid != main):
                who = r.handle
                code = -exit_signal if exit_signal else (exit_code if who.pid == main else 0)
                builder.reaped(who.pid, r.user_total, r.system_total, r.hwm, code, (who.name, who.ppid, False))
            builder.close(alive=())
        builder.finish(
            Outcome(status=status, exit_code=exit_code, exit_signal=exit_signal, notes=[note] if note else [])
        )
        builder.events.add("stop", builder.end_time, f"tracking stopped: {status}", pid=builder.main_pid)
        usage = self.summary()
        usage.session_id, usage.session_path = SESSION_ID, f"{store}/{SESSION_ID}.json"
        return usage


def make_summary(
    samples: list[Sample],
    *,
    exit_code: int | None = 0,
    exit_signal: int | None = None,
    status: str = "exited",
    store: str = "/tmp/gputop-demo",
) -> ResourceUsage:
    """The final report of `samples`, from the real builder (what the sampler sends when the job ends)."""
    run = ScriptedRun(main_pid_of(samples[0]) if samples else MAIN_PID)
    for sample in samples:
        run.add(sample)
    return run.end(exit_code=exit_code, exit_signal=exit_signal, status=status, store=store)


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
        self.samples: list[Sample] = []
        self.exit_code = exit_code
        self.store = store
        self.main_pid = (tree or TREE)[0][0]
        self.run = ScriptedRun(self.main_pid, job=job)  # the real builder, fed every sample as the sampler does
        self.output_text = list(OUTPUT if output is None else output)
        self.signals: list[int] = []
        self.stopped = False
        self.closed = False
        self.ended = False
        self._queue: queue.Queue[Message | None] = queue.Queue()
        self._queued = 0
        self._put(Started(self.main_pid, SESSION_ID, self.store))
        for k in range(n_samples):
            sample = self._add(make_sample(k, n_gpus=n_gpus, tree=tree))
            self._put(self._progress())
            if blocks:  # code blocks: as the sampler sends them, before the sample
                self._put_blocks(k)
            self._put(SampleMessage(sample))
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

    def _add(self, sample: Sample) -> Sample:
        """A sample of the run: the builder folds it in, whether a running summary follows or not."""
        self.samples.append(sample)
        self.run.add(sample)
        return sample

    def _progress(self) -> Progress:
        """The running summary so far, as the sampler sends it (no per-process list, no event list)."""
        return Progress(self.run.summary(details=False))

    def push(self, msg: Message, *, progress: bool = True) -> None:
        """Queue a message; a sample comes after the running summary that includes it, as from the sampler
        (`progress=False`: the sample alone)."""
        if isinstance(msg, SampleMessage):
            self._add(msg.sample)
            if progress:
                self._put(self._progress())
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
        summary = self.run.end(exit_code=exit_code, exit_signal=exit_signal, status=status, store=self.store, note=note)
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
        processes = f"{n} process{'es' if n != 1 else ''}"
        names = ", then ".join(f"{signal.Signals(s).name} to {processes}" for s in self.tree_signals)
        note = f"stopped from the live view: {names} of the tree; none survived"
        self._end(exit_code=128 + sig, exit_signal=sig, status="killed", note=note)
        return True

    def stop(self) -> None:
        self.stopped = True
        self._end(exit_code=None, status="detached")

    def close(self) -> None:
        self.closed = True
