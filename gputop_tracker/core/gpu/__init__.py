"""GPUs behind one small interface (`backend.GpuBackend`): NVIDIA through NVML, AMD through amdsmi, a simulated
backend for demos; which backend a run uses (`choose`) and which GPUs count (`selection`)."""
