"""tui.widgets.Panel: each line drawn once, straight from its segments, as Textual's own path draws it."""

from __future__ import annotations

import asyncio

from rich.color import Color
from rich.text import Text
from textual.app import App, ComposeResult
from textual.strip import Strip
from textual.visual import RenderOptions, visualize

from gputop_tracker.tui.widgets.panels import Panel, bar

LINES = [
    Text.assemble(("util ", "bold"), bar(0.42, 30), " 42% (mean 40%)"),
    Text.assemble(("PID ", "dim"), "4242", ("  ● running", "bold green"), ("  PAUSED", "bold reverse yellow")),
    "peak RAM    1.23 GB (tree)",
    "  private   955 MB · ünïcödé 中文",
    Text.assemble("中文 wide ", ("then styled", "bold cyan"), " and after"),
]


class One(App[None]):
    def compose(self) -> ComposeResult:
        yield Panel(id="p")


def _textual_strips(panel: Panel, line: Text | str, width: int) -> list[Strip]:
    visual = visualize(panel, line, markup=True)
    options = RenderOptions(panel._get_style, panel.styles)  # type: ignore[arg-type]
    return visual.render_strips(width, None, panel.visual_style, options)


def _textual_path(panel: Panel, line: Text | str, width: int) -> Strip:
    return _textual_strips(panel, line, width)[0]


def _offsets(strip: Strip) -> list[tuple[int, int]]:
    """The (character, line) offset of each character, from its segment's metadata."""
    out = []
    for seg in strip:
        assert seg.style is not None
        x, y = seg.style.meta["offset"]
        out += [(x + k, y) for k in range(len(seg.text))]
    return out


def _look(strip: Strip) -> list[tuple[str, object, object, int]]:
    """Each cell as a terminal shows it: the character, its colours (by number or RGB: 'green' and 'color(2)'
    are one colour) and its attributes; no metadata."""

    def colour(c: Color | None) -> object:
        return None if c is None else (c.number, c.triplet)

    return [
        (ch, colour(seg.style.color), colour(seg.style.bgcolor), seg.style._attributes & seg.style._set_attributes)
        for seg in strip
        if seg.style is not None
        for ch in seg.text
    ]


def test_fast_lines_look_as_textuals_own_and_carry_their_offsets() -> None:
    async def run() -> None:
        app = One()
        async with app.run_test(size=(80, 10)):
            panel = app.query_one(Panel)
            for y, line in enumerate(LINES):
                fast = panel._fast_strip(line, 70, y)
                assert fast is not None
                slow = _textual_path(panel, line, 70)
                assert fast.text == slow.text
                assert fast.cell_length == slow.cell_length
                assert _look(fast) == _look(slow)
                # text selection maps a click to (character, line) through these: as Textual's, on line y
                assert _offsets(fast) == [(x, y) for x, _ in _offsets(slow)]
                assert [x for x, _ in _offsets(fast)] == list(range(len(fast.text)))
            # a line too wide, one that may hold markup or has a style of its own takes Textual's path (it
            # wraps, it parses, it styles the whole line), its offsets moved to its line
            for line in ("x" * 71, "[b]bold[/b]", Text("could not track", style="bold red")):
                assert panel._fast_strip(line, 70, 0) is None
                strips = panel._render_text(line, 70, 3)
                assert [strip.text for strip in strips] == [s.text for s in _textual_strips(panel, line, 70)]
                assert _look(strips[0]) == _look(_textual_strips(panel, line, 70)[0])
                assert {y for strip in strips for _, y in _offsets(strip)} == {3}

    asyncio.run(run())


def test_a_panel_shows_every_line_and_repaints_only_what_changed() -> None:
    async def run() -> None:
        app = One()
        async with app.run_test(size=(80, 10)) as pilot:
            panel = app.query_one(Panel)
            panel.update(Text("\n").join(Text(x) if isinstance(x, str) else x for x in LINES))
            await pilot.pause()
            shown = [panel.render_line(y).text for y in range(len(LINES))]
            assert [s.rstrip() for s in shown] == [(x.plain if isinstance(x, Text) else x) for x in LINES]
            before = list(panel._strips)
            changed = list(LINES)
            changed[2] = "peak RAM    1.50 GB (tree)"
            panel.update(Text("\n").join(Text(x) if isinstance(x, str) else x for x in changed))
            after = panel._strips
            assert [a is b for a, b in zip(before, after, strict=True)] == [True, True, False, True, True]
            assert after[2].text.startswith("peak RAM    1.50 GB")

    asyncio.run(run())
