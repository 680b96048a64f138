"""What the front end asks the sampler process to do. Light on purpose: the CLI imports it before it
forks the sampler, and the sampler's own modules load in the child while the front end loads pydantic."""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, field
from typing import Any

# "Stop tracking now" (attach, detach, the API's stop), from the front end to the sampler: a real-time signal no
# one else sends. Not SIGUSR1: that one belongs to the job (SLURM's --signal=USR1@T, checkpoint hooks), and
# `scancel --signal=USR1` reaches every process of the step, the sampler included.
STOP_SIGNAL = signal.SIGRTMIN + 4
# passed on to the command, and never an interruption (they do not stop --wait-descendants or an attach)
JOB_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)

MIN_INTERVAL = 0.05
# EngineConfig.mode: start the command and track its tree, or track a process that already runs
LAUNCH = "launch"
ATTACH = "attach"


@dataclass
class EngineConfig:
    mode: str  # LAUNCH | ATTACH
    argv: list[str] = field(default_factory=list)
    pid: int = 0
    interval: float = 0.5
    n_expected_cores: int | None = None
    gpus: str | None = None  # --gpus list; None = CUDA_VISIBLE_DEVICES of the command, else all
    simulate_gpus: int = 0
    gpu_backend: str = "auto"  # auto (NVIDIA, then AMD) | nvidia | amd | none
    gpu_poll: float = 50.0  # Hz of the GPU memory watcher (process lists, device memory); 0 = off
    store: str | None = None
    save: bool = True
    stream_samples: bool = False
    stdin: int | None = None  # fds for the command; None = inherit
    stdout: int | None = None
    stderr: int | None = None
    process_group: int | None = None  # join this process group (the terminal's job) ...
    new_session: bool = False  # ... or start a new session (live TUI: keys must not signal it)
    exclude: list[int] = field(default_factory=list)
    use_cgroup: bool = True
    session_id: str | None = None
    # alerts and the OOM flight recorder
    mem_limit: int | None = None  # bytes; the RAM limit alerts are a percentage of
    enforce_mem_limit: bool = False  # also set it as the limit of the cgroup we create for the command
    warn_at: float = 80.0
    critical_at: float = 95.0
    flight_seconds: float = 60.0  # the flight recorder keeps this many seconds of samples
    oom_dumps: int = 5  # dump bundles kept in the store (0 = never write one)
    oom_dump_mb: float = 200.0  # and at most this many MB of them
    watch_output: bool = False  # tee the command's stdout/stderr through a pipe, looking for CUDA/PyTorch OOMs
    output_path: str | None = None  # the command's output file (live TUI): scanned for OOM messages
    wait_descendants: bool = False  # track on after the command exits, until its descendants are gone too
    mirror_stops_to: int = 0  # the front end's pid when it left the terminal's job: stopped with the command
    control_stdin: bool = False  # read requests (capture_oom) from stdin: the spawned sampler of the API
    # the cluster job: read by the front end before the sampler starts (slurm.context_for)
    slurm: dict[str, Any] | None = None
    blocks_fifo: str | None = None  # the API's code-block FIFO (made by the Tracker); launch mode makes its own
    probe: bool = True  # the in-process probe on the launched command's PYTHONPATH (exact peaks at exit)
    gpu_history: int = 0  # --gpu-history: entries of PyTorch's allocator history recorded by the probe (0: none)
    front_end: int = 0  # the pid of the process that starts the sampler (set by channel.start_*): its death is noted


def config_json(cfg: EngineConfig) -> str:
    return json.dumps(asdict(cfg))
