"""GPUs behind one small interface, one module per vendor as psutil has one per platform:

- `base`: the reading (`GpuReading`, whose sample fields are `model.gpufields.GpuFields`), the interface
  (`GpuBackend`), the record each backend keeps of a device;
- `nvidia` (NVML; its device record and multi-call queries in `nvml_device`, accounting and container pairing in
  `nvml_extras`, `accounting`, `containers`), `amd` (amdsmi), `simulated` (demos, and scripted GPUs for tests);
- `guard`: every library call of a run on a worker thread with a deadline (a hung driver holds nothing);
- `choose`: which backend a run uses (`open_backend`; `open_guarded` for a run); `selection`: which GPUs count
  (`--gpus`, `CUDA_VISIBLE_DEVICES`, a scheduler's list); `pidns`: host PIDs mapped into a container's PID namespace;
  `watch`: the thread that reads GPU memory between samples.

Other packages import what `__all__` names from here.
"""

from gputop_tracker.core.gpu.accounting import HOW_TO_ENABLE as ACCOUNTING_HOW_TO_ENABLE
from gputop_tracker.core.gpu.accounting import LABEL as ACCOUNTING_LABEL
from gputop_tracker.core.gpu.base import GpuBackend, GpuReading, NoGpuBackend, vendor_label
from gputop_tracker.core.gpu.choose import open_backend, open_guarded
from gputop_tracker.core.gpu.containers import LABEL as PAIRED_LABEL
from gputop_tracker.core.gpu.selection import GpuSelection, resolve_gpu_selection, resolve_job_gpus, variables_for
from gputop_tracker.core.gpu.simulated import FakeGpuBackend, SimulatedGpuBackend
from gputop_tracker.core.gpu.watch import GpuWatcher, Seen, TreePeaks, Window
from gputop_tracker.core.model.gpufields import SAMPLE_FIELDS

__all__ = [
    "ACCOUNTING_HOW_TO_ENABLE",
    "ACCOUNTING_LABEL",
    "PAIRED_LABEL",
    "SAMPLE_FIELDS",
    "FakeGpuBackend",
    "GpuBackend",
    "GpuReading",
    "GpuSelection",
    "GpuWatcher",
    "NoGpuBackend",
    "Seen",
    "SimulatedGpuBackend",
    "TreePeaks",
    "Window",
    "open_backend",
    "open_guarded",
    "resolve_gpu_selection",
    "resolve_job_gpus",
    "variables_for",
    "vendor_label",
]
