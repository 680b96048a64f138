"""Code blocks with the stand-in allocator: one run raises the peak (exact), one stays under it (a bracket)."""

import sys

import torch

from gputop_tracker import block

torch.cuda.init()
torch.cuda.allocate(0, 100_000_000)
with block("grow"):  # up to 300 MB: above the earlier peak (123.46 MB)
    torch.cuda.allocate(0, 200_000_000)
    torch.cuda.free(0, 150_000_000)
with block("within"):  # 150 MB at its start, 250 MB inside, 170 MB at its end: under the peak (300 MB)
    torch.cuda.allocate(0, 100_000_000)
    torch.cuda.free(0, 80_000_000)
print(torch.cuda.max_memory_allocated(0), file=sys.stderr)  # never reset by the blocks
