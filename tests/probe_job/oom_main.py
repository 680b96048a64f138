"""CUDA out-of-memory errors with the stand-in torch (a 16 GiB GPU by default): each mode writes, as JSON, what the
workload itself read of its allocator (`torch.cuda.memory_stats`, `mem_get_info`) at each error, and how the
error reached it.

    python oom_main.py MODE FACTS.json

caught_uncaught: 10 GiB held, 8 GiB asked (caught), 3 GiB taken instead, then 2 GiB more: uncaught (exit 1).
retry: a batch-size finder: 9 GiB held, 12 GiB asked, halved on each error until it fits (every error kept).
frag: 20 segments of 512 MiB, freed, refilled with 300 MiB each: 4 GiB cached in 20 pieces; 7 GiB asked.
many: four spawned workers (RANK 0-3), each asks for more than it can have once (caught).
quiet: torch imported and used, never out of memory: what the hook left behind.
broken: the allocator's snapshot fails inside the observer: the error must still reach the program unchanged.
"""

import json
import multiprocessing as mp
import os
import sys
import time

import torch

GiB = 1 << 30
MiB = 1 << 20
KEYS = ("allocated_bytes.all.current", "reserved_bytes.all.current", "active_bytes.all.current", "num_ooms")


def held_a_while() -> None:
    """As a real program holds its memory between two allocations: the GPU watcher reads it meanwhile (at 50 Hz,
    15 reads; the tests compare NVML's figure for the process with what the allocator held)."""
    time.sleep(0.3)


def state() -> dict:
    s = torch.cuda.memory_stats(0)
    free, total = torch.cuda.mem_get_info(0)
    return {"stats": {k: s[k] for k in KEYS}, "free": free, "total": total, "pid": os.getpid()}


def empty(n: int) -> object:
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def caught_uncaught(facts: dict) -> None:
    held = [empty(10 * GiB)]
    held_a_while()
    try:
        held.append(empty(8 * GiB))
    except torch.OutOfMemoryError as e:
        facts["caught"] = {**state(), "type": type(e).__name__, "text": str(e)}
    held.append(empty(3 * GiB))
    held_a_while()
    before = state()
    facts["uncaught_before"] = before
    write(facts)
    held.append(empty(2 * GiB))  # not caught: the traceback and exit status are the program's own


def retry(facts: dict) -> None:
    held = [empty(9 * GiB)]
    held_a_while()
    size, errors = 12 * GiB, []
    while True:
        try:
            held.append(empty(size))
            break
        except torch.cuda.OutOfMemoryError:
            errors.append({**state(), "size": size})
            size //= 2
    facts["errors"], facts["fitted"] = errors, size


def frag(facts: dict) -> None:
    big = [empty(512 * MiB) for _ in range(20)]
    del big[:]
    held = [empty(300 * MiB) for _ in range(20)]
    held_a_while()
    try:
        held.append(empty(7 * GiB))
    except torch.OutOfMemoryError as e:
        facts["caught"] = {**state(), "text": str(e)}
        facts["segments"] = len(torch.cuda.memory_snapshot())


def worker(rank: int, q) -> None:
    held = [empty((rank + 1) * GiB)]
    held_a_while()
    try:
        held.append(empty(15 * GiB))
    except torch.OutOfMemoryError:
        q.put({**state(), "rank": rank})


def many(facts: dict) -> None:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = []
    for rank in range(4):
        os.environ["RANK"] = str(rank)  # a spawned child takes the environment as it is at its start
        p = ctx.Process(target=worker, args=(rank, q))
        p.start()
        procs.append(p)
    facts["workers"] = sorted((q.get(timeout=60) for _ in procs), key=lambda w: w["rank"])
    for p in procs:
        p.join()


def quiet(facts: dict) -> None:
    x = empty(GiB)
    spec = torch.cuda.__spec__
    facts.update(
        observers=len(torch._C._oom_observers),
        loader=type(torch.cuda.__loader__).__name__,
        spec_loader=type(spec.loader).__name__,
        finders=[getattr(f, "__name__", type(f).__name__) for f in sys.meta_path],
        history=torch.cuda.memory._history.enabled,
        allocated=torch.cuda.memory_allocated(0),
    )
    del x


def broken(facts: dict) -> None:
    def fails() -> list:
        raise ZeroDivisionError("the snapshot failed")

    torch.cuda.memory_snapshot = fails  # the probe's observer calls it at the error
    held = [empty(10 * GiB)]
    try:
        held.append(empty(8 * GiB))
    except Exception as e:
        facts["caught"] = {"type": type(e).__name__, "text": str(e), "context": repr(e.__context__)}


def write(facts: dict) -> None:
    with open(sys.argv[2], "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    facts: dict = {"pid": os.getpid()}
    {"caught_uncaught": caught_uncaught, "retry": retry, "frag": frag, "many": many, "quiet": quiet,
     "broken": broken}[sys.argv[1]](facts)  # fmt: skip
    write(facts)
