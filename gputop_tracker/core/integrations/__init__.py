"""The outside worlds a run lives in or reports to: SLURM, and exporters for monitoring systems (Prometheus)."""
