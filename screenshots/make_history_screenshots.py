"""SVG screenshots of the history screen on a generated store (README images).

python screenshots/make_history_screenshots.py          # writes screenshots/history-*.svg
python screenshots/make_history_screenshots.py --run    # opens the demo history in this terminal

The store is the tests' (tests/test_history_sessions.py): fixed timestamps and figures, three unreadable
files. Times are shown in UTC so the images do not depend on where they are made.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from test_history_sessions import fill_store  # noqa: E402

from gputop_tracker.tui.history.app import HistoryApp  # noqa: E402

SHOTS = [
    # name, size, keys pressed once the list is open
    ("history-list", (140, 30), ("down", "down", "down", "down", "space")),
    ("history-detail", (140, 44), ("down", "down", "down", "down", "enter")),
    # the same training script at batch 64 and batch 128 (the two oldest sessions)
    ("history-compare", (140, 36), ("ctrl+end", "up", "up", "up", "up", "space", "space", "c")),
]


async def shoot(store_dir: Path, name: str, size: tuple[int, int], keys: tuple[str, ...]) -> Path:
    app = HistoryApp(store_dir)
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause(0.2)
        path = HERE / f"{name}.svg"
        app.save_screenshot(path.name, str(HERE))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="open the demo history interactively instead")
    args = ap.parse_args()
    os.environ["TZ"] = "UTC"
    time.tzset()
    with tempfile.TemporaryDirectory(prefix="gputop-history-demo-") as tmp:
        os.chdir(tmp)  # the status line shows the store path: keep it short and the same everywhere
        store_dir = Path("sessions")
        fill_store(store_dir, 8)
        if args.run:
            raise SystemExit(HistoryApp(store_dir).run())
        for name, size, keys in SHOTS:
            print(asyncio.run(shoot(store_dir, name, size, keys)))


if __name__ == "__main__":
    main()
