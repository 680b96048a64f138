"""Every data shape the tool exchanges or keeps: samples, the summary (report) and saved sessions.

The sampler builds plain dicts of these shapes on its hot path (no validation cost per sample); every
reader — the front end, the store, the API — validates them here. Sizes are bytes and times seconds
inside the tool; `ResourceUsage.in_units` converts for the report. Readers ignore unknown keys so that a
newer tool's sessions still load.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gputop_tracker._version import SCHEMA_VERSION as SCHEMA_VERSION  # re-exported for readers of files
from gputop_tracker._version import __version__
from gputop_tracker.core.model.gpufields import GpuFields
from gputop_tracker.core.model.units import RAM_UNITS, TIME_UNITS


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


# --------------------------------------------------------------------------- samples (sampler -> front end)


class ProcessSample(Model):
    """One process of the tracked tree at one instant."""

    pid: int
    ppid: int
    name: str
    cmdline: list[str] = Field(default_factory=list)
    role: Literal["main", "descendant"]
    rss: int = Field(description="resident set size (statm, read every sample)")
    private: int = Field(description="USS: pages only this process holds (smaps_rollup, carried forward)")
    shared: int = Field(description="RSS - USS: resident pages another process maps too (a lower bound)")
    pss: int = Field(description="proportional set size: shared pages divided among their sharers")
    peak_rss: int = Field(description="VmHWM: the kernel's exact peak RSS of this process so far")
    cpu_seconds: float = Field(description="utime + stime of this process")
    cpu_percent: float = Field(
        description="CPU % over the last interval (at least 0.25 s; 100 = one core, never above threads x 100)"
    )
    threads: int
    gpu_memory: dict[str, int] = Field(default_factory=dict, description="GPU uuid -> bytes")
    gpu_sm_percent: float | None = Field(
        default=None,
        description="SM utilization of this process (NVML process samples), summed over GPUs; None when not reported",
    )
    mem_bound: bool = Field(
        default=False,
        description="private, shared and pss are lower bounds: carried forward from an older smaps_rollup read "
        "(statm moved since), or none read yet",
    )


class GpuSample(Model, GpuFields):
    """One GPU in a streamed sample: the reading's own fields (`GpuFields`, written once there) and the tree's."""

    tree_memory: int = Field(0, description="bytes held by the tracked tree on this GPU")
    counted: bool = True
    simulated: bool = False
    energy_j: float | None = Field(
        None,
        description="energy used from the session's first GPU reading to its last (the counter costs milliseconds "
        "of CPU a read: read at most every 5 s, so this steps)",
    )
    tree_sm_util: float | None = Field(None, description="largest per-process SM % of the tree (new samples)")


class HostSample(Model):
    memory_total: int
    memory_used: int
    cpu_percent: float = Field(description="whole machine, 100 = every core busy")
    cpu_count: int


class TreeSample(Model):
    """The tree's totals at this instant, counted as the summary counts them."""

    main_rss: int
    main_private: int
    main_shared: int
    descendants_total: int
    descendants_private: int
    combined_total: int = Field(description="Σ PSS: shared pages counted once within the tree")
    combined_private: int = Field(description="Σ USS")
    combined_shared: int = Field(description="Σ (PSS - USS): shared pages counted once within the tree")
    cpu_percent: float
    main_cpu_percent: float
    cpu_seconds: float = Field(description="exact CPU-seconds of the tree so far (live + reaped)")
    threads: int
    gpu_memory: int
    n_processes: int


class Sample(Model):
    time: float
    elapsed: float
    processes: list[ProcessSample]
    gpus: list[GpuSample] = Field(default_factory=list)
    host: HostSample
    tree: TreeSample


# --------------------------------------------------------------------------- summary (gpu-tracker's shape + more)


class RSSValues(Model):
    total_rss: float = 0.0
    private_rss: float = 0.0
    shared_rss: float = 0.0
    lower: float | None = Field(None, description="total_rss is at least this (null: no reading bounds it)")
    upper: float | None = Field(None, description="total_rss is at most this (null: nothing bounds it from above)")


class MaxRAM(Model):
    unit: str = "bytes"
    system_capacity: float = 0.0
    system: float = 0.0
    main: RSSValues = Field(default_factory=RSSValues)
    descendants: RSSValues = Field(default_factory=RSSValues)
    combined: RSSValues = Field(default_factory=RSSValues)
    peak_source: str = Field("sampled", description="where max_ram.combined.total_rss comes from")
    combined_sampled: float = Field(0.0, description="largest Σ PSS seen in one sample (a lower bound)")
    combined_upper_bound: float | None = Field(None, description="Σ of per-process exact peaks")
    cgroup_peak: float | None = Field(
        None, description="peak of the job's memory cgroup as the kernel counts it, page cache included"
    )


class GpuAllocator(Model):
    """A GPU framework's allocator figures on one device, read in the process (probe, code blocks)."""

    framework: str = Field(description="torch | jax | cupy")
    device: str = Field(description="cuda:0, gpu:1, …")
    peak_allocated: float | None = Field(None, description="most memory handed to the program at once")
    peak_reserved: float | None = Field(None, description="most memory the allocator held (its cache included)")
    at_exit: bool = Field(False, description="sizes at exit, not peaks (CuPy's pool keeps no peak): lower bounds")
    processes: int | None = Field(None, description="in max_gpu_ram.allocator: how many processes it sums")


class AllocatorPeaks(Model):
    main: list[GpuAllocator] = Field(default_factory=list)
    descendants: list[GpuAllocator] = Field(default_factory=list)
    sources: dict[str, str] = Field(default_factory=dict)


class MaxGPURAM(Model):
    unit: str = "bytes"
    system_capacity: float = 0.0
    system: float = 0.0
    main: float = 0.0
    descendants: float = 0.0
    combined: float = 0.0
    allocator: AllocatorPeaks | None = Field(
        None, description="the GPU allocators' own peaks, sent by the probe at each Python process's exit"
    )
    accounting: bool | None = Field(
        None,
        description="NVML accounting mode (exact per-process peaks kept by the driver): true when on for every "
        "NVIDIA GPU that has the mode, false when off on one at least, null when none says (no NVIDIA GPU, MIG)",
    )


class ProbeWithout(Model):
    pid: int
    name: str
    reason: str


class ProbeInfo(Model):
    """The in-process probe: on or off, which processes reported at exit, which Python ones could not."""

    enabled: bool = False
    reported: list[int] = Field(default_factory=list, description="pids whose exit report arrived")
    without_probe: list[ProbeWithout] = Field(default_factory=list, description="Python run with -I, -E or -S")
    python_unreported: list[int] = Field(
        default_factory=list, description="Python processes seen that sent nothing (killed by a signal, exec'd, …)"
    )
    note: str | None = None


class Percentages(Model):
    max_sum_percent: float = 0.0
    max_hardware_percent: float = 0.0
    mean_sum_percent: float = 0.0
    mean_hardware_percent: float = 0.0


class CPUUtilization(Model):
    system_core_count: int = 0
    n_expected_cores: int = 0
    system: Percentages = Field(default_factory=Percentages)
    main: Percentages = Field(default_factory=Percentages)
    descendants: Percentages = Field(default_factory=Percentages)
    combined: Percentages = Field(default_factory=Percentages)
    main_n_threads: int = 0
    descendants_n_threads: int = 0
    combined_n_threads: int = 0


class GPUUtilization(Model):
    system_gpu_count: int = 0
    n_expected_gpus: int = 0
    gpu_percentages: Percentages = Field(default_factory=Percentages)


class ComputeTime(Model):
    unit: str = "seconds"
    time: float = 0.0


class CPUTime(Model):
    """Exact CPU-seconds of the whole tree (kernel counters, not samples)."""

    unit: str = "seconds"
    user: float = 0.0
    system: float = 0.0
    total: float = 0.0
    mean_percent: float = Field(0.0, description="total / wall time × 100 (100 = one core)")
    source: str = "sampled"


class GpuSummary(Model):
    index: int
    uuid: str
    name: str
    memory_total: int | None = None
    peak_memory_used: int | None = Field(None, description="whole device, every process")
    tree_peak_memory: int = Field(0, description="the tracked tree's peak on this GPU (bytes)")
    tree_used: bool | None = Field(
        None,
        description="a tracked process was on this GPU (NVML listed it), though with no memory figure; "
        "None: a session older than the field",
    )
    tree_memory_unknown: bool | None = Field(
        None,
        description="a tracked process on this GPU had no memory figure (NVML: not available, as under MIG or in "
        "some containers): tree_peak_memory is a lower bound",
    )
    mean_utilization: float | None = None
    max_utilization: float | None = None
    counted: bool = True
    simulated: bool = False
    lost: bool = False
    pci_bus_id: str | None = None
    mig_parent: int | None = Field(None, description="MIG device: index of its physical GPU")
    vendor: str | None = Field(
        None, description='"nvidia" or "amd"; None: simulated, or a session older than the field'
    )
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mean_power_w: float | None = None
    max_power_w: float | None = None
    max_temperature_c: float | None = None
    energy_j: float | None = Field(None, description="energy between the first and last reading (J)")
    tree_peak_sm_utilization: float | None = Field(
        None, description="largest per-process SM utilization of a tracked process (%)"
    )
    peak_unattributed_memory: int | None = Field(
        None, description="GPU memory of processes whose host PIDs could not be mapped (containers)"
    )
    accounting: bool | None = Field(None, description="NVML accounting mode on (True), off, or unknown (None)")
    # GPM (Hopper and newer); None where the GPU has no GPM — absent, not zero
    mean_sm_activity: float | None = None
    max_sm_activity: float | None = None
    mean_sm_occupancy: float | None = None
    max_sm_occupancy: float | None = None
    mean_tensor_activity: float | None = None
    max_tensor_activity: float | None = None
    mean_dram_bandwidth: float | None = None
    max_dram_bandwidth: float | None = None


class ProcessSummary(Model):
    pid: int
    ppid: int
    name: str
    cmdline: list[str] = Field(default_factory=list)
    role: Literal["main", "descendant"]
    first_seen: float
    last_seen: float
    peak_rss: int
    peak_rss_source: str = Field(description="how peak_rss was measured: exact (VmHWM, ru_maxrss) or a bound, and why")
    peak_rss_exact: bool = Field(False, description="peak_rss equals the kernel's own figure for this process")
    peak_rss_lower: int | None = Field(None, description="the peak is at least this (null: no reading bounds it)")
    peak_rss_upper: int | None = Field(None, description="the peak is at most this (null: nothing bounds it)")
    peak_rss_before_attach: int | None = Field(
        None, description="attach: VmHWM at the attach when above RSS then — a peak from before tracking began"
    )
    peak_private: int = 0
    peak_pss: int = 0
    peak_threads: int = 0
    cpu_seconds: float = Field(0.0, description="utime + stime while tracked (attach: from the attach)")
    max_cpu_percent: float = 0.0
    peak_gpu_memory: int = 0
    peak_gpu_memory_source: str | None = Field(
        None, description="what peak_gpu_memory is: exact (NVML accounting), a lower bound, or sampled"
    )
    exit_code: int | None = None
    rss_slope: float | None = Field(None, description="least-squares slope of RSS over the run (bytes/s)")
    rss_r2: float | None = Field(None, description="R² of that fit (1 = perfectly steady growth)")
    leak_suspected: bool = Field(False, description="RSS grew steadily (R² > 0.9) and materially over ≥ 10 samples")
    gpu_allocator: list[GpuAllocator] = Field(
        default_factory=list, description="its GPU allocators' peaks, read in-process at exit (bytes)"
    )


class Event(Model):
    """One entry of the session's event timeline (also streamed live as an `event` message)."""

    time: float
    elapsed: float = 0.0
    type: str = Field(description="one of events.EVENT_TYPES; unknown types from newer tools are kept")
    message: str = ""
    pid: int | None = None
    name: str | None = None
    ppid: int | None = None
    resource: str | None = Field(None, description="ram, gpu (tree/process peaks) or gpuN (one GPU's memory)")
    value: float | None = Field(None, description="bytes at the event")
    limit: float | None = Field(None, description="the limit a warning/critical level is a percentage of")
    percent: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    source: str | None = Field(None, description="oom: what detected it (kernel counter, output, API, probe)")
    dump: str | None = Field(None, description="oom: the dump bundle directory")


class OomSegment(Model):
    size: int
    free: int = Field(description="not allocated (reserved but unallocated)")
    largest_free: int = Field(description="its largest free block")
    pool: str = Field(description="small | large")


class OomProcess(Model):
    pid: int
    name: str = ""
    memory: int = Field(description="NVML's figure on that GPU at the OOM (bytes)")
    tracked: bool = Field(False, description="a process of this job")


class OomAtPeak(Model):
    nvml_peak: int = Field(description="the process's GPU memory peak as NVML read it")
    reserved_peak: int = Field(description="its allocator's reserved peak")
    beyond: int = Field(description="nvml_peak - reserved_peak: context, libraries, other allocators")


class GpuOom(Model):
    """The allocator's state at one CUDA out-of-memory error of a tracked Python process (bytes, whatever the
    report's units), reconciled with NVML: nvml_process = reserved + beyond_allocator."""

    time: float
    elapsed: float = 0.0
    pid: int
    name: str = ""
    framework: str = "torch"
    device: str = Field(description="the framework's device: cuda:0")
    n: int = Field(1, description="the process's n-th out-of-memory error")
    at_exit: bool = Field(False, description="JAX, CuPy: the allocator at exit after the uncaught error, not at it")
    request: int = Field(description="what the allocator asked the device for")
    allocated: int | None = None
    reserved: int | None = None
    active: int | None = None
    requested: int | None = Field(None, description="what the program asked for (allocated is rounded up)")
    reserved_unallocated: int | None = Field(None, description="reserved - allocated: the cache, in pieces")
    inactive_split: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    segments: int | None = None
    small_segments: int | None = None
    largest_free_block: int | None = None
    segment_list: list[OomSegment] = Field(default_factory=list, description="the segments with most free space")
    num_ooms: int | None = None
    num_alloc_retries: int | None = None
    device_free: int | None = Field(None, description="free on the device, as CUDA said at the OOM")
    device_total: int | None = None
    allocator_limit: int | None = Field(None, description="torch.cuda.set_per_process_memory_fraction's cap")
    gpu_index: int | None = Field(None, description="NVML's index of that GPU")
    gpu_uuid: str | None = None
    gpu_name: str | None = None
    gpu_used: int | None = Field(None, description="the GPU's memory used at the last sample")
    gpu_total: int | None = None
    nvml_process: int | None = Field(None, description="NVML's figure for the process at the OOM")
    nvml_age: float | None = Field(None, description="seconds between the OOM and that NVML read")
    beyond_allocator: int | None = Field(None, description="nvml_process - reserved")
    other_processes: list[OomProcess] = Field(default_factory=list)
    at_peak: OomAtPeak | None = None
    diagnosis: str = Field(
        "unknown", description="too_big | fragmentation | other_process | outside_allocator | limit | at_exit"
    )
    diagnosis_text: str = ""
    state_file: str | None = Field(None, description="every segment's state (JSON), in the OOM dump bundle")
    snapshot: str | None = Field(None, description="--gpu-history: the allocator history memory_viz opens")
    snapshot_note: str | None = None
    dump: str | None = None


class LeakSuspect(Model):
    pid: int
    name: str = ""
    slope_bytes_per_s: float
    r2: float
    n_samples: int
    growth_bytes: float = 0.0


class Alerts(Model):
    warn_at: float = 80.0
    critical_at: float = 95.0
    mem_limit: float | None = Field(None, description="RAM limit the levels are a percentage of (bytes)")
    mem_limit_source: str = "system RAM"
    ram_percent: float | None = Field(None, description="tree RAM as % of the limit at the last sample")
    events_dropped: int = 0


class SlurmRequest(Model):
    """What the job asked the scheduler for (or `--request`); None where unknown."""

    mem_bytes: int | None = None
    cpus: int | None = None
    gpus: int | None = None
    time_limit_s: int | None = None
    gpu_ids: list[str] | None = Field(
        None, description="the GPUs the job was given, as SLURM_STEP_GPUS / SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES say"
    )
    gpu_uuids: list[str] | None = Field(None, description="gpu_ids resolved to UUIDs through NVML")
    cgroup_mem_bytes: int | None = Field(
        None, description="the memory limit of the job's cgroup at start (the smallest up the hierarchy)"
    )


class SlurmJob(Model):
    """The cluster job the session ran in (SLURM's environment at start); job ids None under `--request` alone."""

    job_id: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    step_id: str | None = None
    node: str | None = None
    node_id: int | None = None
    local_id: int | None = None
    num_nodes: int | None = None
    requested: SlurmRequest = Field(default_factory=SlurmRequest)


class Efficiency(Model):
    """Each a fraction of the request (1.0 = all of it); None where the request or the figure is unknown."""

    memory: float | None = None
    cpu: float | None = None
    time: float | None = None
    gpu_memory: float | None = None
    gpu_utilization: float | None = None
    memory_basis: str | None = Field(
        None, description="what `memory` is a fraction of: 'request' (--mem) or 'cgroup' (its limit, when smaller)"
    )


class BlockDuration(Model):
    total: float = 0.0
    min: float = 0.0
    mean: float = 0.0
    max: float = 0.0
    std: float = 0.0


class BlockAllocator(GpuAllocator):
    """A block's allocator peak: exact when the process's peak rose during a run (the new peak), else a
    bracket: at least what the runs' boundaries saw (peak_allocated), at most the peak so far (*_max)."""

    peak_allocated_max: float | None = None
    peak_reserved_max: float | None = None
    exact: bool = False


class BlockSummary(Model):
    """One code block of the tracked program (`with block(name)`, `@tracked`): every run of that name.
    RAM figures are in max_ram's unit, GPU RAM in max_gpu_ram's, durations in compute_time's."""

    name: str
    calls: int = 0
    duration: BlockDuration = Field(default_factory=BlockDuration)
    peak_ram: float = Field(0, description="peak RSS of the process that ran the block (exact: VmHWM reset)")
    peak_private: float | None = Field(None, description="that process's peak private memory (sampled)")
    peak_gpu_ram: float | None = Field(None, description="that process's peak GPU memory (sampled)")
    cpu_seconds: float = Field(0.0, description="CPU time of that process across the block (exact)")
    mean_cpu_percent: float = 0.0
    mean_gpu_utilization: float | None = Field(None, description="sum over the GPUs, mean of the samples")
    pids: list[int] = Field(default_factory=list)
    tree_peak_ram: float | None = Field(
        None, description="the whole tree's peak while the block ran: the job cgroup's (exact) or sampled"
    )
    marks: int = Field(0, description="marks made while a run of it was open (anywhere in the tree)")
    gpu_allocator: list[BlockAllocator] = Field(
        default_factory=list, description="the GPU allocators' peaks during its runs (exact, or a bracket)"
    )
    tree_peak_gpu_ram: float | None = Field(
        None, description="the whole tree's peak GPU memory while the block ran (the GPU memory watcher's reads)"
    )
    sources: dict[str, str] = Field(default_factory=dict, description="figure -> exact or sampled")


class LiveBlock(Model):
    """One block name in the live view's blocks table (bytes, seconds). Ended runs give the figures of the
    report's `blocks`; runs still open add what the samples saw of them (peaks), and their count."""

    name: str
    calls: int = Field(0, description="runs ended so far")
    open: int = Field(0, description="runs open now (more than one: nested, or in several processes)")
    open_since: float | None = Field(None, description="start of its oldest open run (epoch seconds)")
    duration_total: float = 0.0
    duration_mean: float | None = None
    peak_ram: int | None = None
    peak_private: int | None = None
    peak_gpu_ram: int | None = None
    tree_peak_ram: int | None = None
    cpu_seconds: float = Field(0.0, description="of the ended runs")
    marks: int = 0


class LiveBlocks(Model):
    """The live view's blocks table: streamed (message `blocks`) only when blocks changed, at most every
    half second; bounded to the most recently active names."""

    blocks: list[LiveBlock] = Field(default_factory=list)
    names: int = Field(0, description="block names in all (the list may hold fewer)")
    marks: int = 0
    open_runs: int = 0


class ResourceUsage(Model):
    """The report. The first five fields are gpu-tracker's, with its names and meaning."""

    max_ram: MaxRAM = Field(default_factory=MaxRAM)
    max_gpu_ram: MaxGPURAM = Field(default_factory=MaxGPURAM)
    cpu_utilization: CPUUtilization = Field(default_factory=CPUUtilization)
    gpu_utilization: GPUUtilization = Field(default_factory=GPUUtilization)
    compute_time: ComputeTime = Field(default_factory=ComputeTime)
    cpu_time: CPUTime = Field(default_factory=CPUTime)
    peak_threads: int = 0
    gpus: list[GpuSummary] = Field(default_factory=list)
    gpu_note: str | None = None
    gpu_not_responding: bool = Field(
        False,
        description="the GPU library (NVML, amdsmi) stopped answering: a call past its deadline, or an open that never "
        "returned; GPU figures stop there (gpu_note says when) and the rest is measured as without a GPU",
    )
    gpu_energy_j: float | None = Field(None, description="energy of the counted GPUs during the session")
    gpu_energy_wh: float | None = None
    processes: list[ProcessSummary] = Field(default_factory=list)
    probe: ProbeInfo | None = Field(None, description="the in-process probe of launched Python processes")
    sources: dict[str, str] = Field(default_factory=dict, description="figure -> exact (counter) or sampled")
    notes: list[str] = Field(default_factory=list)
    session_id: str | None = None
    session_path: str | None = None
    command: list[str] = Field(default_factory=list)
    mode: Literal["launch", "attach"] = "launch"
    pid: int | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    status: str = "finished"
    start_time: float = 0.0
    end_time: float = 0.0
    host: str = ""
    interval: float = 0.0
    n_samples: int = 0
    n_processes: int = 0
    smaps_max_age: float | None = Field(None, description="oldest private/shared reading used, seconds")
    events: list[Event] = Field(default_factory=list, description="the event timeline, oldest first")
    leak_suspects: list[LeakSuspect] = Field(default_factory=list)
    blocks: list[BlockSummary] = Field(default_factory=list, description="code blocks, in order of first start")
    gpu_ooms: list[GpuOom] = Field(default_factory=list, description="CUDA out-of-memory errors, the allocator's state")
    alerts: Alerts = Field(default_factory=Alerts)
    slurm: SlurmJob | None = Field(None, description="the cluster job and its request")
    efficiency: Efficiency | None = Field(None, description="fractions of the request used")
    tool_version: str = __version__
    schema_version: int = SCHEMA_VERSION

    @property
    def peak_ram_read(self) -> float | None:
        """The tree's peak RAM, or None where no process was ever read (the command ended before the first
        sample): a 0 there is no figure and is shown as "-"."""
        peak = self.max_ram.combined.total_rss
        return peak if peak or self.n_processes else None

    def in_units(self, ram_unit: str, gpu_ram_unit: str, time_unit: str) -> ResourceUsage:
        """A copy whose gpu-tracker fields are in the given units (others stay bytes/seconds)."""
        out = self.model_copy(deep=True)
        r = RAM_UNITS[self.max_ram.unit] / RAM_UNITS[ram_unit]
        ram = out.max_ram
        ram.unit = ram_unit
        ram.system_capacity *= r
        ram.system *= r
        ram.combined_sampled *= r
        if ram.combined_upper_bound is not None:
            ram.combined_upper_bound *= r
        if ram.cgroup_peak is not None:
            ram.cgroup_peak *= r
        for v in (ram.main, ram.descendants, ram.combined):
            v.total_rss *= r
            v.private_rss *= r
            v.shared_rss *= r
            v.lower = v.lower * r if v.lower is not None else None
            v.upper = v.upper * r if v.upper is not None else None
        g = RAM_UNITS[self.max_gpu_ram.unit] / RAM_UNITS[gpu_ram_unit]
        gram = out.max_gpu_ram
        gram.unit = gpu_ram_unit
        gram.system_capacity *= g
        gram.system *= g
        gram.main *= g
        gram.descendants *= g
        gram.combined *= g
        _scale_allocators(out, g)
        t = TIME_UNITS[self.compute_time.unit] / TIME_UNITS[time_unit]
        out.compute_time.time *= t
        out.compute_time.unit = time_unit
        for b in out.blocks:
            b.peak_ram *= r
            if b.peak_private is not None:
                b.peak_private *= r
            if b.peak_gpu_ram is not None:
                b.peak_gpu_ram *= g
            if b.tree_peak_gpu_ram is not None:
                b.tree_peak_gpu_ram *= g
            if b.tree_peak_ram is not None:
                b.tree_peak_ram *= r
            d = b.duration
            d.total, d.min, d.mean, d.max, d.std = (x * t for x in (d.total, d.min, d.mean, d.max, d.std))
        return out


# --------------------------------------------------------------------------- sessions (the store)


def _scale_allocators(u: ResourceUsage, g: float) -> None:
    """The allocator figures of the report (not a process's own) times `g` (a GPU RAM unit change)."""
    for a in _allocators(u):
        a.peak_allocated = a.peak_allocated * g if a.peak_allocated is not None else None
        a.peak_reserved = a.peak_reserved * g if a.peak_reserved is not None else None
        if isinstance(a, BlockAllocator):
            a.peak_allocated_max = a.peak_allocated_max * g if a.peak_allocated_max is not None else None
            a.peak_reserved_max = a.peak_reserved_max * g if a.peak_reserved_max is not None else None


def _allocators(u: ResourceUsage) -> list[GpuAllocator]:
    """The allocator figures in max_gpu_ram's unit (a process's own stay in bytes, as its other figures)."""
    al = u.max_gpu_ram.allocator
    out: list[GpuAllocator] = [*al.main, *al.descendants] if al is not None else []
    for b in u.blocks:
        out += b.gpu_allocator
    return out


class Timeline(Model):
    """Columnar and bounded: when it grows past its cap, neighbouring rows merge (peaks kept, means averaged)."""

    columns: list[str] = Field(default_factory=list)
    rows: list[list[float | None]] = Field(default_factory=list)
    stride: int = Field(1, description="samples merged into one row")


class SessionMeta(Model):
    id: str
    # interrupted: the sampler died before the command; the figures are those of its last checkpoint
    status: Literal["running", "finished", "interrupted"] = "finished"
    command: list[str] = Field(default_factory=list)
    mode: Literal["launch", "attach"] = "launch"
    pid: int | None = None
    engine_pid: int | None = None
    host: str = ""
    start_time: float = 0.0
    end_time: float | None = None
    exit_code: int | None = None
    interval: float = 0.0


class Session(Model):
    schema_version: int = SCHEMA_VERSION
    meta: SessionMeta
    summary: ResourceUsage | None = None
    timeline: Timeline = Field(default_factory=Timeline)

    @property
    def events(self) -> list[Event]:
        """The event timeline (kept in the summary; empty for sessions saved before events existed)."""
        return self.summary.events if self.summary is not None else []
