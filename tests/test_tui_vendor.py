"""The live view names each GPU's vendor (AMD GPUs through amdsmi, NVIDIA through NVML)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fakesource import FakeSource, make_sample

from gputop_tracker.core.sampling.channel import SampleMessage
from gputop_tracker.tui.live.app import LiveApp
from gputop_tracker.tui.widgets.panels import Panel


def amd_sample(i: int) -> SampleMessage:
    s = make_sample(i)
    names = ("AMD Instinct MI300X", "Instinct MI250X")  # a market name without the vendor gets it in front
    s.gpus = [
        g.model_copy(update={"vendor": "amd", "simulated": False, "name": n})
        for g, n in zip(s.gpus, names, strict=True)
    ]
    return SampleMessage(s)


async def _shown(size: tuple[int, int]) -> tuple[list[str], list[str]]:
    src = FakeSource(0)
    app = LiveApp(src, interval=1.0, command=["python3", "train.py"], store_dir=Path(src.store))
    async with app.run_test(size=size) as pilot:
        src.push(amd_sample(3))
        for _ in range(400):
            if len(app.query(".gpu")) == 2 and app.n_messages >= src.n_scripted:
                break
            await asyncio.sleep(0.01)
        await pilot.pause()
        titles = [str(app.query_one(f"#gpu-{g}").border_title or "") for g in (0, 1)]
        texts = [str(app.query_one(f"#gpu-{g}", Panel).content) for g in (0, 1)]
    return titles, texts


async def test_gpu_panels_name_the_vendor() -> None:
    titles, _ = await _shown((160, 50))
    assert titles == ["GPU 0 · AMD Instinct MI300X", "GPU 1 · AMD Instinct MI250X"]


async def test_narrow_gpu_lines_name_the_vendor() -> None:
    _, texts = await _shown((80, 24))
    assert all(t.startswith("GPU") and " AMD " in t for t in texts), texts
