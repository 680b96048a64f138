"""The measuring core: reads /proc and GPUs, summarises, stores and reports. Never imports textual."""
