"""Stand-in `torch.cuda.memory`: the allocator's history (PyTorch's private functions, as memory_viz uses them)."""

import pickle
import sys

from torch import _alloc

_history = _alloc.History()


def _record_memory_history(
    enabled="all",
    context="all",
    stacks="all",
    max_entries=sys.maxsize,
    device=None,
    clear_history=False,
    compile_context=False,
    global_record_annotations=False,
    skip_actions=None,
):
    """As PyTorch's: `enabled=None` stops recording."""
    _history.enabled = enabled
    _history.stacks = stacks
    _history.max_entries = max_entries
    if clear_history:
        _history.traces.clear()


def _snapshot(device=None):
    from torch import cuda

    traces = [list(_history.traces.get(i, [])) for i in range(cuda.device_count())]
    return {
        "segments": cuda.memory_snapshot(),
        "device_traces": traces,
        "allocator_settings": {},
        "external_annotations": [],
    }


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
