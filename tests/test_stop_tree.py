"""Stopping a launched job from the live view stops its whole tree: the sampler, which knows every pid,
signals the process group and each tracked process, and tracks until the tree is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PY = sys.executable

# 6 multiprocessing workers; with "stubborn" they ignore SIGTERM (and escape the process group)
WORKLOAD = textwrap.dedent(
    """
    import multiprocessing as mp, os, signal, sys, time
    stubborn = sys.argv[1] == "stubborn"
    def work(_):
        if stubborn:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.setpgid(0, 0)
        time.sleep(120)
    if __name__ == "__main__":
        ps = [mp.Process(target=work, args=(i,)) for i in range(6)]
        for p in ps:
            p.start()
        print("workers", " ".join(str(p.pid) for p in ps), flush=True)
        time.sleep(120)
    """
)

DRIVER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from gputop_tracker.core.sampling import channel
    from gputop_tracker.core.model.config import EngineConfig
    store, workload, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    devnull = os.open(os.devnull, os.O_RDWR)
    cfg = EngineConfig(mode="launch", argv=[sys.executable, workload, mode], interval=0.1, store=store,
                       stream_samples=True, new_session=True, stdin=devnull, stdout=devnull, stderr=devnull)
    h = channel.start_forked(cfg, requests=True)
    sent, pids, summary, after_term = [], set(), None, None
    for msg in h.messages():
        if isinstance(msg, channel.SampleMessage):
            pids |= {p.pid for p in msg.sample.processes}
            n = msg.sample.tree.n_processes
            if not sent and n >= 7:
                assert h.request({"cmd": "stop_tree", "signal": int(signal.SIGTERM)})
                sent.append(time.monotonic())
            elif mode == "stubborn" and len(sent) == 1 and time.monotonic() - sent[0] > 1.0:
                after_term = n  # still tracked a second after SIGTERM: the workers ignored it
                assert h.request({"cmd": "stop_tree", "signal": int(signal.SIGKILL)})
                sent.append(time.monotonic())
        elif isinstance(msg, channel.Summary):
            summary = msg.usage
    h.close()
    h.wait()
    def running(pid):  # a zombie waiting for init to reap it is gone, not a survivor
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return b") Z" not in f.read()
        except OSError:
            return False

    alive = [p for p in pids if running(p)]
    print(json.dumps({"notes": summary.notes, "status": summary.status, "signal": summary.exit_signal,
                      "pids": sorted(pids), "alive": alive, "after_term": after_term}))
    """
)


def run_driver(tmp_path: Path, mode: str) -> dict[str, object]:
    workload = tmp_path / "workload.py"
    workload.write_text(WORKLOAD)
    proc = subprocess.run(
        [PY, "-c", DRIVER, str(tmp_path / "store"), str(workload), mode], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_stop_tree_leaves_no_worker(tmp_path: Path) -> None:
    out = run_driver(tmp_path, "plain")
    pids = out["pids"]
    assert isinstance(pids, list) and len(pids) >= 7
    assert out["alive"] == [], out
    assert out["status"] == "killed" and out["signal"] == 15
    notes = out["notes"]
    assert isinstance(notes, list)
    assert any(n.startswith("stopped from the live view: SIGTERM to") and "none survived" in n for n in notes), notes
    # the terminal repeats each note after the view closes: the stop is told once, not twice
    assert sum(n.startswith("stopped from the live view") for n in notes) == 1, notes


@pytest.mark.slow
def test_stop_tree_tracks_until_the_tree_is_gone(tmp_path: Path) -> None:
    """Workers that ignore SIGTERM and left the process group: still tracked after the main process died,
    gone after SIGKILL (which only the user's second request sends)."""
    out = run_driver(tmp_path, "stubborn")
    assert isinstance(out["after_term"], int) and out["after_term"] >= 6, out
    assert out["alive"] == [], out
    notes = out["notes"]
    assert isinstance(notes, list)
    assert any("SIGTERM to" in n and "then SIGKILL to" in n and "none survived" in n for n in notes), notes


def test_request_pipe_closed_with_the_handle() -> None:
    from gputop_tracker.core.sampling.channel import SamplerHandle

    r, w = os.pipe()
    h = SamplerHandle(0, r, request_fd=w)
    assert h.request({"cmd": "noop"})
    assert os.read(r, 100) == b'{"cmd": "noop"}\n'
    h.close()
    assert h.request_fd == -1 and not h.request({"cmd": "noop"})
