"""How long the history list takes to open on a store of many sessions (target: 1,000 sessions in <= 0.5 s).

    python bench/bench_history.py [--sessions 1000] [--rows 240] [--repeat 3] [--store DIR]

Generates a store of deterministic sessions (tests/test_history_sessions.py; `--rows` timeline rows each,
240 is a 4-minute run at 1 s or a long one after the timeline merged rows) plus three unreadable files,
then prints, best of `--repeat`:
  - store.list_entries in full (what `sessions list` does) and without timelines (what the list reads);
  - the history screen, headless: from app start until the table holds every row, and the table fill alone.
The page cache is warm (the files were just written), as it is when a user opens the list twice.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_history_sessions import make_session, write_corrupt

from gputop_tracker.core.store import sessions as store

TARGET_S = 0.5


def generate(store_dir: Path, n: int, rows: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        store.save_session(store_dir, make_session(i, rows=rows, running=(i == n - 1)))
    write_corrupt(store_dir)
    return time.perf_counter() - t0


def best(f, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


async def open_list(store_dir: Path) -> tuple[float, float, int]:
    """Seconds from app start until the table is filled; seconds of the fill; rows shown."""
    from gputop_tracker.tui.history.app import HistoryApp
    from gputop_tracker.tui.history.screens.sessions import HistoryScreen

    t0 = time.perf_counter()
    app = HistoryApp(store_dir)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        while not screen.loaded:
            await asyncio.sleep(0.002)
        opened = time.perf_counter() - t0
        t1 = time.perf_counter()
        screen._rebuild()
        fill = time.perf_counter() - t1
        n = screen.query_one("#history-table").row_count  # type: ignore[attr-defined]
        await pilot.pause()
    return opened, fill, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=240, help="timeline rows per session")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--store", type=Path, help="generate here (kept) instead of a temporary dir")
    args = ap.parse_args()

    tmp = None
    if args.store:
        store_dir = args.store
    else:
        tmp = Path(tempfile.mkdtemp(prefix="gputop-history-bench-"))
        store_dir = tmp / "store"
    try:
        gen = generate(store_dir, args.sessions, args.rows)
        size = sum(p.stat().st_size for p in store_dir.iterdir())
        print(
            f"store: {args.sessions} sessions + 3 unreadable, {args.rows} timeline rows each, "
            f"{size / 1e6:.1f} MB, generated in {gen:.1f} s"
        )
        import gputop_tracker.core.model.models  # noqa: F401  (imported once by the app too; not part of a listing)

        full = best(lambda: store.list_entries(store_dir), args.repeat)
        fast = best(lambda: store.list_entries(store_dir, timeline=False), args.repeat)
        print(f"store.list_entries, full sessions       {full * 1000:8.1f} ms")
        print(f"store.list_entries, without timelines   {fast * 1000:8.1f} ms   ({full / fast:.1f}x faster)")
        runs = [asyncio.run(open_list(store_dir)) for _ in range(args.repeat)]
        opened = min(r[0] for r in runs)
        fill = min(r[1] for r in runs)
        print(f"history list open (app start -> filled) {opened * 1000:8.1f} ms   ({runs[0][2]} rows)")
        print(f"  of which the table fill               {fill * 1000:8.1f} ms")
        verdict = "OK" if opened <= TARGET_S else "SLOWER THAN TARGET"
        print(f"target <= {TARGET_S:.1f} s for 1,000 sessions: {verdict}")
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
