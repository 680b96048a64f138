"""The tracked job: a 0.2 s spawned child touching 600 MiB, a fork-pool worker touching 300 MiB, main 100 MiB.
Each process writes its own VmHWM (read by itself, last) and whether the user's sitecustomize ran in it."""

import json
import multiprocessing as mp
import os
import sys
import time


def own() -> dict:
    import sitecustomize

    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    return {"pid": os.getpid(), "hwm": hwm, "user_site": getattr(sitecustomize, "RAN", False)}


def touch(mib: int, secs: float = 0.0) -> dict:
    b = bytearray(mib << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    time.sleep(secs)
    return own()


def child(q) -> None:
    q.put(touch(600, 0.2))


def main(out: str, how: str) -> None:
    import torch

    torch.cuda.init()
    spawn = mp.get_context("spawn")
    q = spawn.Queue()
    p = spawn.Process(target=child, args=(q,))
    p.start()
    figures = [q.get()]
    p.join()
    pool = mp.get_context("fork").Pool(1)
    figures.append(pool.apply(touch, (300,)))
    pool.close()
    pool.join()
    figures.append(touch(100))
    with open(out, "w") as f:
        json.dump(figures, f)
    if how == "raise":
        raise SystemExit(3)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
