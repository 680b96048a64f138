"""The code-block channel's name, shared by both ends: the tracked program (`api/blocks.py`) and the sampler
(`inbox.py`). No imports: it loads inside the user's processes, where it must cost nothing."""

ENV = "GPUTOP_TRACKER_BLOCKS"  # the environment variable naming the session's FIFO
