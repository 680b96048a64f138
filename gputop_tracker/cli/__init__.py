"""The `gputop-track` command line: the entry (`entry.py`: track a command, the live view or a headless report)
and its subcommands (`sessions`, `advise`, `sessions plot`). Nothing imports this package but `_entry`."""
