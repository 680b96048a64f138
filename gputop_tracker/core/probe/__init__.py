"""The in-process probe, sampler side: its exit reports (stats) and what they change in the report (summary)."""
