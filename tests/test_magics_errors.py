"""`%%gputop` when the cell fails: the error must reach the notebook (Run All stops, nbclient sees it) after
tracking ended and the session was saved; a second `%%gputop` works; quoted options. In-process IPython (no
kernel) in a child interpreter, so this test's own process keeps its displayhook and builtins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("IPython")

SCRIPT = r"""
import glob, json, os, threading
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "gputop_tracker")
store = os.environ["GPUTOP_TRACKER_STORE"]
out = {}
def n():
    return len(glob.glob(os.path.join(store, "*.json")))
r = ip.run_cell("%%gputop --no-plot --interval 0.1\nx = bytearray(20 << 20)\nraise ValueError('boom')\n")
out["raised"] = [r.success, type(r.error_in_exec).__name__, n()]
r = ip.run_cell("%%gputop --no-plot --interval 0.1\ny = 1 +\n")
out["syntax"] = [r.success, n()]
r = ip.run_cell("%%gputop --no-plot --interval 0.1\nz = 1\n")
out["ok"] = [r.success, n()]
r = ip.run_cell("%%gputop --no-plot --interval 0.1 --store '" + store + "/my runs'\nz = 2\n")
out["quoted"] = [r.success, len(glob.glob(os.path.join(store, "my runs", "*.json")))]
bad = {}
for i, (name, line) in enumerate([("option", "--intervall 1"), ("value", "--interval nope"), ("quote", "--store 'x"),
                                  ("action", "stop")]):
    r = ip.run_cell("%%gputop " + line + "\nran_" + str(i) + " = 1\n")
    bad[name] = [r.success, type(r.error_in_exec).__name__, ("ran_" + str(i)) in ip.user_ns, n()]
r = ip.run_cell("%gputop stop")
bad["stop_untracked"] = [r.success, type(r.error_in_exec).__name__]
out["bad"] = bad
out["threads"] = sorted(t.name for t in threading.enumerate() if t.name.startswith("gputop"))
ip.run_cell("%gputop start --no-plot --interval 0.1")
import time
time.sleep(2.6)  # a terminal has no display to update in place: no line a second over the prompt
ip.run_cell("%gputop stop")
print("RESULT " + json.dumps(out))
"""


def test_a_failing_cell_fails_the_magic_after_saving_its_session(tmp_path: Path) -> None:
    (tmp_path / "my runs").mkdir()
    env = {**os.environ, "GPUTOP_TRACKER_STORE": str(tmp_path), "IPYTHONDIR": str(tmp_path / "ipython")}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240, env=env, stdin=subprocess.DEVNULL
    )
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, proc.stdout + proc.stderr
    out = json.loads(line[0][len("RESULT ") :])
    # the cell's error is the magic's: the cell fails; the session was saved first
    assert out["raised"] == [False, "CellFailed", 1], proc.stdout
    assert proc.stdout.count("ValueError: boom") == 1  # one traceback, not two
    assert out["syntax"] == [False, 2]
    assert out["ok"] == [True, 3]
    assert out["quoted"] == [True, 1]  # --store '…/my runs' was split on its space
    # a bad option fails the cell before it runs (Run All stops), in one line: no traceback, nothing saved
    for name in ("option", "value", "quote", "action"):
        assert out["bad"][name] == [False, "UsageError", False, 3], (name, out["bad"])
    assert out["bad"]["stop_untracked"] == [False, "UsageError"]
    assert (proc.stdout + proc.stderr).count("Traceback") == 1  # the failing cell's own, none for a usage error
    assert (proc.stdout + proc.stderr).count("UsageError: gputop:") == 5
    assert out["threads"] == []
    assert proc.stdout.count("gputop: tracking") == 5  # one line per tracked span, none per refresh


def test_the_live_line_counts_the_cells_time_not_the_samplers_start_up() -> None:
    """The live line said `tracking 0.38 s` for a cell the summary then timed at 0.04 s: it counted from before
    the sampler was started (its start-up, a few tenths of a second, included)."""
    import re
    import time
    from types import SimpleNamespace

    from gputop_tracker.api.magics import Tracking

    opts = SimpleNamespace(interval=0.1, gpus=None, mem_limit=None, store=None, no_plot=True)
    tracking = Tracking(opts, live=False)  # type: ignore[arg-type]
    before = time.monotonic()
    tracking.start()
    started = time.monotonic()
    try:
        deadline = started + 60
        while not tracking.figures.n and time.monotonic() < deadline:
            time.sleep(0.01)
        line = tracking.figures.line()
        now = time.monotonic()
    finally:
        tracking.tracker.stop()
    shown_s = float(re.search(r"tracking ([\d.]+) s ", line).group(1))  # type: ignore[union-attr]
    assert started - before > 0.05, "the sampler started too fast to tell the two apart"
    assert shown_s <= now - started + 0.02, (line, now - started, now - before)
