"""SVG screenshots of the real live view fed by the deterministic fake source (README images).

python screenshots/make_screenshots.py            # writes screenshots/*.svg
python screenshots/make_screenshots.py --run      # opens the demo live view in this terminal
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the deterministic fake data source lives with the tests

from fakesource import FakeSource  # noqa: E402

from gputop_tracker.tui.live.app import LiveApp  # noqa: E402

SHOTS: list[tuple[str, tuple[int, int], bool, tuple[str, ...]]] = [
    # name, size, finished, keys pressed first
    ("live-gpus", (160, 50), False, ()),
    ("live-narrow", (80, 24), False, ()),
    ("final-summary", (120, 40), True, ()),
    ("live-process", (120, 40), False, ("down", "enter")),
    ("live-stop", (120, 40), False, ("q",)),
]


def demo_app(finished: bool = False) -> LiveApp:
    src = FakeSource(n_samples=30, finished=finished)
    return LiveApp(src, interval=1.0, command=["python3", "train.py", "--epochs", "3"], store_dir=Path(src.store))


async def settle(app: LiveApp, n: int) -> None:
    """Wait until the app has taken every scripted message (the reader is a thread)."""
    for _ in range(500):
        if app.n_messages >= n:
            break
        await asyncio.sleep(0.01)


async def shoot(name: str, size: tuple[int, int], finished: bool, keys: tuple[str, ...] = ()) -> Path:
    app = demo_app(finished)
    assert isinstance(app.source, FakeSource)
    async with app.run_test(size=size) as pilot:
        await settle(app, app.source.n_scripted)
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
        await pilot.pause(0.3)  # notifications and mounted panels draw
        path = HERE / f"{name}.svg"
        app.save_screenshot(path.name, str(HERE))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="run the demo interactively instead")
    ap.add_argument("--finished", action="store_true", help="with --run: the command has already exited")
    args = ap.parse_args()
    if args.run:
        raise SystemExit(demo_app(args.finished).run())
    for name, size, finished, keys in SHOTS:
        print(asyncio.run(shoot(name, size, finished, keys)))


if __name__ == "__main__":
    main()
