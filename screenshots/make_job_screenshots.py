"""SVG screenshots of the views of a cluster job (README images): the live view's job panel, fed by the fake
source given a SLURM job, and the history list with an array job's sessions grouped and opened.

python screenshots/make_job_screenshots.py        # writes screenshots/live-job.svg, history-jobs.svg
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fakesource import FakeSource, fake_job  # noqa: E402
from job_sessions import fill_job_store  # noqa: E402

from gputop_tracker.tui.history.app import HistoryApp  # noqa: E402
from gputop_tracker.tui.live.app import LiveApp  # noqa: E402


async def live_job(size: tuple[int, int] = (160, 50)) -> Path:
    src = FakeSource(n_samples=30, job=fake_job())
    app = LiveApp(src, interval=1.0, command=["python3", "train.py", "--epochs", "3"], store_dir=Path(src.store))
    async with app.run_test(size=size) as pilot:
        for _ in range(500):
            if app.n_messages >= src.n_scripted:
                break
            await asyncio.sleep(0.01)
        await pilot.pause(0.3)
        app.save_screenshot("live-job.svg", str(HERE))
    return HERE / "live-job.svg"


async def history_jobs(store_dir: Path, size: tuple[int, int] = (140, 24)) -> Path:
    app = HistoryApp(store_dir)
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        for key in ("down", "enter"):  # the array job's row (the second), opened
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause(0.2)
        app.save_screenshot("history-jobs.svg", str(HERE))
    return HERE / "history-jobs.svg"


def main() -> None:
    os.environ["TZ"] = "UTC"
    time.tzset()
    print(asyncio.run(live_job()))
    with tempfile.TemporaryDirectory(prefix="gputop-jobs-demo-") as tmp:
        os.chdir(tmp)  # the status line shows the store path: keep it short and the same everywhere
        fill_job_store(Path("sessions"))
        print(asyncio.run(history_jobs(Path("sessions"))))


if __name__ == "__main__":
    main()
