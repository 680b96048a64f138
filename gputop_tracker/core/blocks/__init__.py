"""Code blocks on the sampler's side: the FIFO the tracked program writes to, and per-block figures."""
