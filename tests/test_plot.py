"""`sessions plot`, `--plot FILE`, `Tracker.timeline()` / `Tracker.plot()` on real sessions.

One real job is tracked through the CLI (a child process, a code block, a mark, a warning crossed, an OOM
message on its output, two simulated GPUs, a request of 2 CPUs) and drawn as PNG, SVG and HTML; the SVG
must hold the series with the saved data, found by the artists' gids.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import python_c

from gputop_tracker import Tracker
from gputop_tracker.api.tracker import TrackerError
from gputop_tracker.core.store import sessions as store

pytest.importorskip("matplotlib")

SVG_NS = "{http://www.w3.org/2000/svg}"
JOB = r"""
import subprocess, sys, time
from gputop_tracker import block, mark
x = bytearray(120 * 2**20)
x[::4096] = b"1" * len(x[::4096])
with block("load"):
    child = subprocess.Popen([sys.executable, "-c",
        "y = bytearray(60 * 2**20); y[::4096] = b'1' * len(y[::4096]); import time; time.sleep(1.2)"])
    time.sleep(0.8)
mark("epoch 1")
print("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr, flush=True)
child.wait()
time.sleep(0.5)
"""


def gputop(*args: str, store_dir: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputop_tracker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "GPUTOP_TRACKER_STORE": str(store_dir)},
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def real_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real job tracked through the CLI into its own store: (store, session id)."""
    store_dir = tmp_path_factory.mktemp("plotstore")
    proc = gputop(
        "--headless",
        "--interval",
        "0.1",
        "--simulate-gpus",
        "2",
        "--mem-limit",
        "240M",
        "--request",
        "cpus=2",
        "--watch-output",
        "-f",
        "json",
        "--",
        sys.executable,
        "-c",
        JOB,
        store_dir=store_dir,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    return store_dir, report["session_id"]


def _session(store_dir: Path, sid: str):  # type: ignore[no-untyped-def]
    entry = store.load(store.find(store_dir, sid))
    assert entry.session is not None
    return entry.session


def test_png_is_written_with_the_size_asked(real_session: tuple[Path, str], tmp_path: Path) -> None:
    store_dir, sid = real_session
    out = tmp_path / "run.png"
    proc = gputop("sessions", "plot", sid, "-o", str(out), "--size", "900x700", store_dir=store_dir)
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (900, 700)


def _ids(root: ET.Element) -> dict[str, ET.Element]:
    return {el.attrib["id"]: el for el in root.iter() if "id" in el.attrib}


def test_svg_holds_every_series_of_the_session(real_session: tuple[Path, str], tmp_path: Path) -> None:
    store_dir, sid = real_session
    out = tmp_path / "run.svg"
    proc = gputop("sessions", "plot", sid[:20], "--store", str(store_dir), "-o", str(out), store_dir=tmp_path / "x")
    assert proc.returncode == 0, proc.stderr
    root = ET.parse(out).getroot()
    assert root.tag == f"{SVG_NS}svg"
    ids = _ids(root)
    expected = {
        "series-tree_ram",
        "series-private",
        "series-main_rss",
        "series-cpu_percent",
        "series-gpu0_memory",
        "series-gpu0_util",
        "series-gpu1_memory",
        "series-gpu1_util",
        "peak-ram",
        "requested-cpus",
        "level-warning",
        "block-0",
        "mark-0",
        "event-oom-0",
    }
    assert expected <= set(ids), sorted(expected - set(ids))
    assert {"event-warning-0", "event-critical-0"} & set(ids)  # the alert crossed (which level: the samples')
    session = _session(store_dir, sid)
    children = [p for p in session.summary.processes if p.role == "descendant"]  # type: ignore[union-attr]
    assert any(f"process-{p.pid}" in ids for p in children)
    # the tree RAM line has one vertex per saved sample: it is the session's data, not a placeholder
    # (matplotlib simplifies only paths of 128 vertices or more; this session has far fewer)
    path = ids["series-tree_ram"].find(f"{SVG_NS}path")
    assert path is not None
    vertices = len(re.findall(r"[ML]\s*-?[\d.]+", path.attrib["d"]))
    assert vertices == len(session.timeline.rows) >= 5


def test_html_is_one_self_contained_page(real_session: tuple[Path, str], tmp_path: Path) -> None:
    store_dir, sid = real_session
    out = tmp_path / "run.html"
    proc = gputop("sessions", "plot", sid, "-o", str(out), store_dir=store_dir)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<svg" in page and 'id="series-tree_ram"' in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "<script" not in page and "<link" not in page
    assert sid in page  # the report below the figure


def test_default_name_is_the_session_id(real_session: tuple[Path, str], tmp_path: Path) -> None:
    store_dir, sid = real_session
    proc = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "sessions", "plot", sid, "--store", str(store_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / f"{sid}.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "run.jpg"], "end the name in .png, .svg or .html"),
        (["-o", "run"], "end the name in .png, .svg or .html"),
        (["-o", "run.png", "--size", "big"], "--size must be WIDTHxHEIGHT"),
        (["-o", "run.png", "--size", "100x100000"], "each side must be"),
        (["-o", "missing-dir/run.png"], "does not exist"),
    ],
)
def test_bad_output_or_size_is_one_line(
    real_session: tuple[Path, str], tmp_path: Path, args: list[str], message: str
) -> None:
    store_dir, sid = real_session
    proc = subprocess.run(
        [sys.executable, "-m", "gputop_tracker", "sessions", "plot", sid, "--store", str(store_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


BLOCK_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None\nfrom gputop_tracker.cli.entry import main\nsys.exit(main({argv!r}))\n"


def test_missing_matplotlib_names_the_extra(real_session: tuple[Path, str], tmp_path: Path) -> None:
    store_dir, sid = real_session
    out = tmp_path / "run.png"
    for argv in (
        ["sessions", "plot", sid, "--store", str(store_dir), "-o", str(out)],
        ["--plot", str(out), "--store", str(store_dir), "--", "true"],  # refused before the command runs
    ):
        code = BLOCK_MATPLOTLIB.format(argv=argv)
        proc = python_c(code)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert "pip install 'matplotlib>=3.7'" in proc.stderr and "'.[plot]' in a checkout" in proc.stderr
    assert not out.exists()
    assert len(list(store_dir.glob("*.json"))) == 1  # the --plot run never started


def test_headless_run_with_plot_writes_report_then_picture(tmp_path: Path) -> None:
    out = tmp_path / "run.svg"
    report = tmp_path / "report.json"
    proc = gputop(
        "--plot", str(out), "-f", "json", "-o", str(report), "--", sys.executable, "-c", "import time; time.sleep(0.6)",
        store_dir=tmp_path / "store",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(report.read_text())["session_id"]
    assert "plot written to" in proc.stderr
    assert "series-tree_ram" in out.read_text()


def test_a_failed_plot_after_a_run_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from gputop_tracker.cli import plot as plot_cli

    assert not plot_cli.plot_after_run(str(tmp_path / "gone.json"), str(tmp_path / "x.png"))
    assert not plot_cli.plot_after_run(None, str(tmp_path / "x.png"))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("gputop-track: no plot written to") for line in err)


def test_tracker_timeline_and_plot(store: Path) -> None:
    with Tracker(sleep_time=0.1) as tracker:
        x = bytearray(64 * 2**20)
        x[::4096] = b"1" * len(x[::4096])
        time.sleep(0.8)
    usage = tracker.raw_usage
    tl = tracker.timeline()
    assert tl.stride == 1
    assert len(tl) == usage.n_samples >= 2
    columns = tl.as_dict()
    assert {"t", "tree_ram", "private", "cpu_percent", "main_rss"} <= set(columns)
    assert all(len(v) == len(tl) for v in columns.values())
    assert tl.t == sorted(tl.t)
    assert max(v or 0 for v in tl.tree_ram) >= 64 * 2**20  # the touched buffer is in the samples
    fig = tracker.plot()
    assert len(fig.axes) == 2  # RAM and CPU; no GPU panels without a GPU
    assert "series-tree_ram" in [ln.get_gid() for ln in fig.axes[0].get_lines()]


def test_timeline_to_pandas(store: Path) -> None:
    pd = pytest.importorskip("pandas")
    with Tracker(sleep_time=0.1) as tracker:
        time.sleep(0.5)
    frame = tracker.timeline().to_pandas()
    assert isinstance(frame, pd.DataFrame)
    assert len(frame) == tracker.raw_usage.n_samples and frame.index.name == "t"


def test_timeline_needs_a_saved_session() -> None:
    with Tracker(sleep_time=0.1, save=False) as tracker:
        pass
    with pytest.raises(TrackerError, match="save=False"):
        tracker.timeline()


def test_core_imports_without_matplotlib_or_pandas() -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None; sys.modules['pandas'] = None\n"
        "import gputop_tracker.api.tracker, gputop_tracker.core.report.plot, gputop_tracker.core.report.columns\n"
        "from gputop_tracker.core.report import plot\n"
        "try:\n    plot.require_matplotlib()\nexcept plot.PlotUnavailable as e:\n    print('OK', e)\n"
    )
    proc = python_c(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OK") and "pip install 'matplotlib>=3.7'" in proc.stdout


def test_on_sample_streams_samples_to_the_tracked_process(store: Path) -> None:
    from gputop_tracker.core.model.models import Sample

    got: list[Sample] = []
    tracker = Tracker(sleep_time=0.1)
    tracker.on_sample(got.append)
    with tracker:
        deadline = time.monotonic() + 60
        while len(got) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(TrackerError, match="before start"):
            tracker.on_sample(got.append)
    assert len(got) >= 3
    assert all(s.tree.combined_total > 0 for s in got)
    assert [s.elapsed for s in got] == sorted(s.elapsed for s in got)


def test_a_session_without_samples_or_summary_still_draws() -> None:
    from gputop_tracker.core.model.models import Session, SessionMeta
    from gputop_tracker.core.report import plot

    session = Session(meta=SessionMeta(id="x", status="running", start_time=1000.0))
    assert plot.picture(session, "png")[:4] == b"\x89PNG"
    assert "no samples saved" in str([t.get_text() for t in plot.figure(session).axes[0].texts])


def test_block_spans_pair_each_run_by_process_and_name() -> None:
    from gputop_tracker.core.model.models import Event
    from gputop_tracker.core.report.blockspans import BlockRun, block_runs, outermost

    def ev(t: float, kind: str, pid: int, name: str) -> Event:
        return Event(time=100 + t, elapsed=t, type=kind, pid=pid, name=name)

    events = [
        ev(1, "block_start", 1, "load"),
        ev(2, "block_start", 2, "load"),  # the same name in another process: its own run
        ev(3, "block_end", 1, "load"),
        ev(4, "block_start", 1, "step"),
        ev(5, "block_end", 2, "load"),
        ev(6, "block_end", 1, "step"),
        ev(7, "block_start", 1, "step"),  # still open at the end
    ]
    runs = block_runs(events, 100.0, 10.0)
    assert runs == [("load", 1, 3), ("load", 2, 5), ("step", 4, 6), ("step", 7, 10.0)]
    assert outermost(runs) == runs  # none lies inside another
    nested = [BlockRun("epoch", 0, 10), BlockRun("step", 1, 2), BlockRun("step", 3, 4), BlockRun("epoch", 10, 12)]
    assert outermost(nested) == [("epoch", 0, 10), ("epoch", 10, 12)]  # the steps are left in their epoch
    assert block_runs(events, 100.0, None)[-1] == ("step", 7, 7)  # open, the end unknown: no length invented


def test_dollar_signs_in_outside_text_are_drawn_literally() -> None:
    """`bash -c 'kill $$'` in the title (or `$` in a block or mark name) started matplotlib's mathtext, whose
    parser failed the whole figure: no picture after a measured run."""
    from gputop_tracker.core.model.models import Event, Session, SessionMeta
    from gputop_tracker.core.report import plot

    meta = SessionMeta(id="x", status="finished", start_time=1000.0, command=["bash", "-c", "kill -9 $$"])
    events = [
        Event(time=1001, elapsed=1, type="block_start", pid=1, name="cost $x$ and $"),
        Event(time=1002, elapsed=2, type="block_end", pid=1, name="cost $x$ and $"),
        Event(time=1002, elapsed=2, type="mark", pid=1, name="$HOME $$"),
    ]
    session = Session(meta=meta, events=events)
    assert plot.picture(session, "png")[:4] == b"\x89PNG"
    assert plot.picture(session, "svg").lstrip().startswith(b"<?xml")


def test_plot_with_history_is_a_usage_error(tmp_path: Path) -> None:
    """--plot with --history was ignored: the history TUI opened (even with no terminal, until killed)."""
    proc = gputop("--history", "--plot", str(tmp_path / "x.png"), store_dir=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("gputop-track: error: --plot") and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize("size", [(0, 0), (-5, 5), (100_000, 100_000), (800.5, 600), [800, 600], (True, 600)])
def test_api_size_is_checked_like_the_size_flag(size: object) -> None:
    """Tracker.plot(size=...) went straight to matplotlib: (0, 0) failed at saving, (100000, 100000) tried
    to allocate tens of GB."""
    from gputop_tracker.core.model.models import Session, SessionMeta
    from gputop_tracker.core.report import plot

    session = Session(meta=SessionMeta(id="x", status="running", start_time=1000.0))
    with pytest.raises(plot.PlotError, match="each 300 to 20000"):
        plot.figure(session, size)  # type: ignore[arg-type]
    assert plot.figure(session, (400, 300)).get_size_inches().tolist() == [4.0, 3.0]


def test_byte_axes_of_an_idle_run_have_distinct_ticks() -> None:
    """A run that held (next to) nothing drew its RAM axis from 0 to 1.12 bytes: ticks `1 B, 1 B, 1 B, 0 B`."""
    from gputop_tracker.core.model.models import Session, SessionMeta
    from gputop_tracker.core.report import plot

    fig = plot.figure(Session(meta=SessionMeta(id="x", status="finished", start_time=1000.0)))
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels


def test_the_smallest_size_draws_without_warnings(real_session: tuple[Path, str]) -> None:
    """--size 200x200 drew with `UserWarning: constrained_layout not applied …` (two lines on stderr) and
    collapsed panels; the least size is now one that lays out (four panels: the session has GPUs)."""
    import warnings

    from gputop_tracker.core.report import plot

    session = _session(*real_session)
    with pytest.raises(plot.PlotError):
        plot.parse_pixel_size("299x300")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot.picture(session, "png", plot.parse_pixel_size("300x300"))[:4] == b"\x89PNG"


def test_non_finite_figures_in_a_saved_timeline_are_gaps(tmp_path: Path) -> None:
    """A NaN or an infinity in a saved timeline made matplotlib refuse the axis limits: a traceback from
    `sessions plot`. They read as not read (None); drawing errors are one line."""
    from gputop_tracker.core.model.models import Session, SessionMeta, Timeline
    from gputop_tracker.core.report import plot
    from gputop_tracker.core.report.columns import TimelineColumns

    cols = ["elapsed", "combined_total", "cpu_percent"]
    rows = [[0.0, float("nan"), 1.0], [float("nan"), 5.0, 1.0], [1.0, float("inf"), 2.0], [2.0, 3e6, float("-inf")]]
    session = Session(
        meta=SessionMeta(id="20261123-000001-x", status="finished", start_time=1000.0),
        timeline=Timeline(columns=cols, rows=rows),
    )
    tl = TimelineColumns.of_session(session)
    assert tl.t == [0.0, 1.0, 2.0]
    assert tl.tree_ram == [None, None, 3e6] and tl.cpu_percent == [1.0, 2.0, None]
    assert plot.picture(session, "png")[:4] == b"\x89PNG"


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_plot_with_a_store_that_cannot_save_is_refused_before_the_command(tmp_path: Path, where: str) -> None:
    """--plot draws the saved session: a store that cannot take it was found only after the whole run
    ("no plot written: the session was not saved"). Now one line, exit 2, and the command never runs."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    store = blocker if where == "a file" else blocker / "sessions"
    ran = tmp_path / "ran"
    proc = gputop(
        "--plot", str(tmp_path / "x.png"), "--store", str(store), "--", "touch", str(ran),
        store_dir=tmp_path / "unused",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("gputop-track: error: --plot: the session cannot be saved in"), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not ran.exists() and not (tmp_path / "x.png").exists()


def test_labels_of_short_blocks_and_close_marks_never_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty short blocks and marks a few ms apart: their names were drawn over one another. Now each label is
    placed where it overlaps none (block names on up to three rows), the rest hidden, and a block name with no
    label left is in the legend."""
    from gputop_tracker.core.model.models import Event, Session, SessionMeta
    from gputop_tracker.core.report import plot

    start = 1000.0
    events = []
    for i in range(40):
        t = 1 + i * 0.05
        events += [
            Event(time=start + t, elapsed=t, type="block_start", pid=1, name=f"stage {i}"),
            Event(time=start + t + 0.04, elapsed=t + 0.04, type="block_end", pid=1, name=f"stage {i}"),
        ]
    events += [
        Event(time=start + 2 + i * 0.01, elapsed=2 + i * 0.01, type="mark", pid=1, name=f"m{i}") for i in range(5)
    ]
    session = Session(meta=SessionMeta(id="x", status="finished", start_time=start, end_time=start + 4))
    monkeypatch.setattr(Session, "events", property(lambda _self: events))  # a summary holds them: none needed here
    fig = plot.figure(session)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    shown = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
    boxes = [t.get_window_extent(renderer) for t in shown]
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            assert not a.overlaps(boxes[j]), (shown[i].get_text(), shown[j].get_text())
    legend = ax.get_legend()
    listed = {t.get_text() for t in legend.get_texts()} if legend is not None else set()
    names = {t.get_text().strip() for t in shown}
    for i in range(40):
        assert f"stage {i}" in names or f"block stage {i}" in listed, i
    assert sum(n.startswith("stage") for n in names) >= 3  # staggered: more than one row used
    assert "m0" in names  # the first of the close marks keeps its label


def test_a_figure_titled_by_what_was_tracked() -> None:
    """A notebook cell's figure was titled with the kernel's command line (`python -m ipykernel_launcher -f …`):
    the magic now gives the cell's first line of code as the title."""
    from gputop_tracker.api.magics import cell_title
    from gputop_tracker.core.model.models import Session, SessionMeta
    from gputop_tracker.core.report import plot

    meta = SessionMeta(id="x", status="finished", start_time=1000.0, command=["python", "-m", "ipykernel_launcher"])
    session = Session(meta=meta)
    assert plot.figure(session)._suptitle.get_text().startswith("python -m ipykernel_launcher")
    title = cell_title("\n# load the data\ndf = load('big.parquet')\ntrain(df)\n")
    assert title == "%%gputop cell: df = load('big.parquet')"
    fig = plot.figure(session, title=title)
    assert fig._suptitle.get_text().splitlines()[0] == title
    assert cell_title("x = 1  # " + "y" * 200).endswith("…") and len(cell_title("z" * 500)) < 100
