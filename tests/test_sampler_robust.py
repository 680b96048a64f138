"""The sampler never loses a run: a failing sample is noted and tracking goes on to a full session."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from gputop_tracker.core.sampling import sampler
    from gputop_tracker.core.gpu import GpuBackend

    class Broken(GpuBackend):
        calls = 0
        def read(self, pids):
            Broken.calls += 1
            if Broken.calls in (2, 3):
                raise RuntimeError("boom")
            return []

    sampler.open_guarded = lambda simulate=0, backend="auto", watch_hz=0: Broken()
    r, w = os.pipe()
    cfg = sampler.EngineConfig(mode="launch", argv=["sh", "-c", "sleep 0.6; exit 5"], interval=0.1, store=sys.argv[1])
    code = sampler.Engine(cfg, w).run()
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 20):
        data += chunk
    summary = [json.loads(line) for line in data.splitlines() if b'"summary"' in line[:20]][-1]["summary"]
    print(json.dumps({"code": code, "summary": summary}))
    """
)


def test_a_failing_sample_is_noted_and_the_run_completes(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == 5
    s = out["summary"]
    assert s["exit_code"] == 5 and s["n_samples"] >= 3
    assert any("a sample failed (RuntimeError: boom" in n for n in s["notes"])
    assert list(tmp_path.glob("*.json")), "the session was saved"
