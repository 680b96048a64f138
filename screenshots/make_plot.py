"""The README's picture made by `gputop-track sessions plot` (needs the plot extra: pip install -e ".[plot]").

python screenshots/make_plot.py            # writes screenshots/session-plot.png
python screenshots/make_plot.py --keep     # also prints the temporary store, left in place

A real job is tracked through the CLI into a temporary store: a small "training" script that loads data in
a code block, runs three epochs (each a block that burns CPU while a worker process holds memory), marks
each checkpoint and crosses the warning level of `--mem-limit`; one simulated GPU (labelled so).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

JOB = r"""
import subprocess, sys, time
from gputop_tracker import block, mark

def touch(n):
    b = bytearray(n * 2**20)
    b[::4096] = b"1" * len(b[::4096])
    return b

def burn(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass

with block("load data"):
    data = [touch(40) for _ in range(5)]
    time.sleep(0.3)
for epoch in range(3):
    with block("epoch"):
        worker = subprocess.Popen([sys.executable, "-c",
            "b = bytearray(120 * 2**20); b[::4096] = b'1' * len(b[::4096]); import time; time.sleep(1.2)"])
        burn(1.0)
        worker.wait()
    mark(f"checkpoint {epoch + 1}")
    data.append(touch(15))
    time.sleep(0.3)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="keep the temporary store and say where it is")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gputop-plot-demo-"))
    # `python3 train.py` as the command, this environment's python (which has gputop_tracker.api.blocks)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "GPUTOP_TRACKER_STORE": str(tmp / "sessions"), "PATH": path}
    gputop = [sys.executable, "-m", "gputop_tracker"]
    (tmp / "train.py").write_text(JOB)
    try:
        run = subprocess.run(
            [*gputop, "--headless", "-f", "json", "--interval", "0.1", "--simulate-gpus", "1", "--mem-limit", "450M",
             "--request", "cpus=2", "--", "python3", "train.py"],
            env=env, cwd=tmp, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        sid = json.loads(run.stdout)["session_id"]
        out = HERE / "session-plot.png"
        subprocess.run([*gputop, "sessions", "plot", sid, "-o", str(out), "--size", "1200x1000"], env=env, check=True)
        print(f"wrote {out}")
    finally:
        if args.keep:
            print(f"store kept: {tmp / 'sessions'}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
