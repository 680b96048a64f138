"""On a real GPU: what PyTorch's out-of-memory inspection API looks like (for the stand-in torch in tests/).

Prints, as JSON lines: the version, how torch.cuda's lazy init can be hooked, the OOM observer's arguments,
memory_stats keys, the snapshot's shape, mem_get_info, the error's text, and the history/snapshot functions.
"""

import inspect
import json
import os
import sys
import time
import traceback


def say(**kw):
    print("API:", json.dumps(kw, default=str), flush=True)


t0 = time.perf_counter()
import torch  # noqa: E402

say(step="import", version=torch.__version__, s=round(time.perf_counter() - t0, 3))
import torch.cuda as tc  # noqa: E402

say(step="lazy", has_lazy_call=hasattr(tc, "_lazy_call"), initialized=tc.is_initialized(),
    lazy_call_src=inspect.getsource(tc._lazy_call)[:900] if hasattr(tc, "_lazy_call") else None,
    queued=type(getattr(tc, "_queued_calls", None)).__name__,
    attach=hasattr(torch._C, "_cuda_attach_out_of_memory_observer"))
# attach before init?
events = []


def observer(*args):
    t = time.perf_counter()
    rec = {"args": list(args)}
    try:
        st = torch.cuda.memory_stats(args[0])
        rec["stats_keys_n"] = len(st)
        rec["stats"] = {k: st[k] for k in sorted(st) if k.endswith(".all.current") or k.endswith(".all.peak")
                        or k in ("num_ooms", "num_alloc_retries", "num_device_alloc", "num_device_free")}
        snap = torch.cuda.memory_snapshot()
        rec["n_segments"] = len(snap)
        rec["segment_keys"] = sorted(snap[0]) if snap else None
        rec["block_keys"] = sorted(snap[0]["blocks"][0]) if snap and snap[0].get("blocks") else None
        rec["segments"] = [{k: s.get(k) for k in ("device", "address", "total_size", "allocated_size", "active_size",
                            "requested_size", "segment_type", "stream")} | {"blocks": [(b["size"], b["state"]) for b in s["blocks"]][:6]}
                           for s in snap[:4]]
        rec["mem_get_info"] = torch.cuda.mem_get_info(args[0])
    except Exception as e:
        rec["error_in_observer"] = repr(e)
    rec["observer_ms"] = round((time.perf_counter() - t) * 1000, 2)
    events.append(rec)


try:
    torch._C._cuda_attach_out_of_memory_observer(observer)
    say(step="attach_before_init", ok=True, initialized=tc.is_initialized())
except Exception as e:
    say(step="attach_before_init", ok=False, error=repr(e))
    tc._lazy_call(lambda: torch._C._cuda_attach_out_of_memory_observer(observer))
x = torch.empty(1024**3, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
say(step="init", initialized=tc.is_initialized(), free=free, total=total)
hold = []
try:
    hold.append(torch.empty(free - 2 * 1024**3, dtype=torch.uint8, device="cuda"))
    hold.append(torch.empty(8 * 1024**3, dtype=torch.uint8, device="cuda"))
except Exception as e:
    say(step="oom_caught", type=type(e).__module__ + "." + type(e).__qualname__, mro=[c.__name__ for c in type(e).__mro__],
        text=str(e)[:1200], events=len(events))
for ev in events:
    say(step="observer_event", **ev)
st = torch.cuda.memory_stats()
say(step="after", num_ooms=st.get("num_ooms"), reserved=torch.cuda.memory_reserved(), allocated=torch.cuda.memory_allocated())
# fragmentation OOM: free every other 256 MiB block, ask for 1 GiB
del hold[:]
torch.cuda.empty_cache()
blocks = [torch.empty(256 * 1024**2, dtype=torch.uint8, device="cuda") for _ in range(int((free - 4 * 1024**3) // (256 * 1024**2)))]
for i in range(0, len(blocks), 2):
    blocks[i] = None
n0 = len(events)
try:
    big = torch.empty(6 * 1024**3, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError as e:
    say(step="frag_oom", text=str(e)[:900], new_events=len(events) - n0)
    for ev in events[n0:]:
        say(step="frag_event", **{k: ev.get(k) for k in ("args", "stats", "n_segments", "mem_get_info", "observer_ms")})
blocks = None
torch.cuda.empty_cache()
# history
from torch.cuda import memory as tm  # noqa: E402

say(step="history_api", record=str(inspect.signature(tm._record_memory_history)),
    dump=str(inspect.signature(tm._dump_snapshot)), snapshot=hasattr(tm, "_snapshot"))
t = time.perf_counter()
tm._record_memory_history(max_entries=1000)
ys = [torch.empty(1024 * 1024, device="cuda") for _ in range(200)]
ys = None
snap = tm._snapshot()
say(step="history", keys=sorted(snap), n_traces=[len(x) for x in snap.get("device_traces", [])],
    trace_keys=sorted(snap["device_traces"][0][0]) if snap.get("device_traces") and snap["device_traces"][0] else None,
    s=round(time.perf_counter() - t, 3))
path = os.path.join(os.environ.get("OUT", "/tmp"), "snap.pickle")
tm._dump_snapshot(path)
say(step="dump", bytes=os.path.getsize(path))
tm._record_memory_history(enabled=None)
# uncaught OOM in a child: does the observer run, what's the exit
code = ("import torch,sys\nev=[]\ntorch._C._cuda_attach_out_of_memory_observer(lambda *a: (ev.append(a), sys.stderr.write('OBS %r\\n' % (a,))))\n"
        "torch.empty(10**15, dtype=torch.uint8, device='cuda')")
import subprocess  # noqa: E402

p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
say(step="uncaught", rc=p.returncode, stderr=p.stderr[-900:])
