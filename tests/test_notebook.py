"""A real notebook run by a real kernel (nbclient + ipykernel of this environment): `%load_ext gputop_tracker`,
a `%%gputop` cell that touches 200 MB, `%gputop start` / `stop` across cells, bad arguments.

The tracked tree is the kernel process itself, which holds memory before the cell starts: the summary's peak
is the tree's peak during the cell. The cell makes the kernel's new high-water mark, so the kernel's own
VmHWM read at the end of the cell is that peak exactly; the test allows 5 %.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

TOUCH_200MB = """%%gputop --interval 0.2
import time
buf = bytearray(200 * 2**20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
time.sleep(3)
hwm = [int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print("VMHWM", hwm)
"""


class CountingClient(nbclient.NotebookClient):  # type: ignore[misc,name-defined]
    """Counts the live display's in-place updates (update_display_data), which the saved notebook folds away."""

    updates = 0

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        if msg.get("msg_type") == "update_display_data":
            CountingClient.updates += 1
        return super().process_message(msg, cell, cell_index)


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel is this environment's python, whatever kernel specs the machine's user has: a `python3`
    spec of our own comes first on JUPYTER_PATH. IPython's and Jupyter's files go to the test's directory."""
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))


def _run(cells: list[str], store: Path) -> Any:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    client = CountingClient(nb, timeout=300, kernel_name="python3", allow_errors=True)
    client.execute()  # the kernel inherits this process's environment: the test's store
    return nb


def _texts(cell: Any, mime: str = "text/plain") -> list[str]:
    out = []
    for o in cell.outputs:
        if o.output_type == "stream":
            out.append(o.text)
        elif mime in o.get("data", {}):
            out.append(o.data[mime])
    return out


@pytest.mark.slow
def test_gputop_cell_in_a_real_notebook(store: Path, kernel_env: None) -> None:
    CountingClient.updates = 0
    nb = _run(
        [
            "import sys\nprint(sys.executable)\n%load_ext gputop_tracker",
            TOUCH_200MB,
            "%gputop --bogus 3",
            "%%gputop --interval -1\nprint('ran anyway')",
            "%gputop start --interval 0.3",
            "more = bytearray(30 * 2**20)\nmore[::4096] = b'1' * len(more[::4096])",
            "%gputop stop",
        ],
        store,
    )
    setup, cell, bogus, bad_interval, start, _, stop = nb.cells
    # the kernel is this environment's python (ipykernel of the test extra), so it imports this checkout
    assert _texts(setup)[0].strip() == sys.executable

    # one live display, updated in place (not a stream of outputs), then the table and the figure
    kinds = [(o.output_type, sorted(o.get("data", {}))) for o in cell.outputs]
    live = [o for o in cell.outputs if o.output_type == "display_data" and "gputop: " in o.data.get("text/plain", "")]
    assert len(live) == 1, kinds
    assert "done after" in live[0].data["text/plain"] and "peak" in live[0].data["text/plain"]
    assert CountingClient.updates >= 2  # a refresh during the 3 s sleep, and the final line
    assert any("image/png" in o.get("data", {}) for o in cell.outputs), kinds

    text = "".join(_texts(cell))
    # one duration for the cell: the live line's last word is the summary's wall time (was 3.28 s and 3.17 s)
    done = re.search(r"done after (\S+ \S+) ·", live[0].data["text/plain"]).group(1)  # type: ignore[union-attr]
    wall = re.search(r"wall time\s+(\S+ \S+)\s+exact", text).group(1)  # type: ignore[union-attr]
    assert done == wall, (done, wall)
    hwm = int(re.search(r"VMHWM (\d+)", text).group(1))  # type: ignore[union-attr]
    html = "".join(_texts(cell, "text/html"))
    assert "<table class='gputop-summary'>" in html
    peak = int(re.search(r"data-bytes='(\d+)' id='peak-ram'", html).group(1))  # type: ignore[union-attr]
    assert abs(peak - hwm) <= 0.05 * hwm, (peak, hwm)
    assert peak >= 200 * 2**20

    # the cell was saved as a session like any run
    sid = re.search(r"gputop summary \(session (\S+)\)", text).group(1)  # type: ignore[union-attr]
    saved = json.loads((store / f"{sid}.json").read_text())
    assert saved["summary"]["max_ram"]["combined"]["total_rss"] == peak

    # bad arguments: one line in the cell's output, no traceback, the cell itself not run (and failed)
    for bad in (bogus, bad_interval):
        assert [o.output_type for o in bad.outputs] == ["stream"], bad.outputs
        assert bad.outputs[0].name == "stderr" and bad.outputs[0].text.count("\n") == 1
        assert bad.outputs[0].text.startswith("UsageError: gputop:")  # IPython marks the cell failed: Run All stops
    assert "ran anyway" not in "".join(_texts(bad_interval))

    # %gputop start … stop spans cells: the live line in the first, the summary in the last
    assert any("gputop: " in t for t in _texts(start))
    assert "gputop summary" in "".join(_texts(stop))
    assert len(list(store.glob("*.json"))) == 2
