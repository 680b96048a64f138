"""Textual's compositor, drawing a partial update from the changed lines of each widget only.

For a partial update Textual renders every widget that overlaps the bounding box of all changed regions, each
over its whole height, then keeps the changed lines. The live view changes a few lines a second at the top
(the header's clock) and further down (a figure in a panel, a table row): the box is the whole screen, and
every widget (the screen's background, the containers, the table, each panel) was drawn again in full each
second, a third of the view's cost. Here each widget draws only the runs of its lines that changed (the same
lines, the same strips, in the same front-to-back order, so the screen is the same). A full update is
Textual's. Where Textual's internals are not as expected, its own compositor runs instead.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from textual import __version__ as textual_version
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip

try:
    from textual._compositor import ChopsUpdate, Compositor
except ImportError:  # another Textual: its own compositor
    Compositor = None  # type: ignore[assignment,misc]


def use_line_compositor(screen: Screen[object]) -> Screen[object]:
    """The screen, drawing its partial updates by changed lines (where Textual is laid out as expected)."""
    if Compositor is not None and _expected(screen):
        screen._compositor = LineCompositor()
    return screen


TESTED_MAJOR = "8"  # the Textual its output was compared with (tests/test_line_compositor.py); others: Textual's own


def _expected(screen: Screen[object]) -> bool:
    compositor = getattr(screen, "_compositor", None)
    return (
        textual_version.split(".")[0] == TESTED_MAJOR
        and type(compositor) is Compositor
        and isinstance(getattr(compositor, "_dirty_regions", None), set)
        and all(
            hasattr(Compositor, name)
            for name in ("render_partial_update", "_regions_to_spans", "visible_widgets", "cuts")
        )
    )


if Compositor is not None:

    class LineCompositor(Compositor):
        def render_partial_update(self) -> ChopsUpdate | None:
            update_regions = self._dirty_regions.copy()
            self._dirty_regions.clear()
            if not update_regions:
                return None
            screen = self.size.region
            spans = list(self._regions_to_spans(update_regions))
            extent: dict[int, tuple[int, int]] = {}  # changed line -> the columns changed on it (from, to)
            for y, x1, x2 in spans:
                if 0 <= y < screen.height:
                    old = extent.get(y)
                    extent[y] = (x1, x2) if old is None else (min(old[0], x1), max(old[1], x2))
            chops = self._render_lines(extent)
            return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in self.cuts])

        def _render_lines(self, extent: dict[int, tuple[int, int]]) -> list[dict[int, Strip | None]]:
            """Textual's `_render_chops` over the changed lines, front to back: each widget draws the lines where it
            shows through to a changed column (a cut no widget in front of it has drawn); the first strip for a cut
            of a line wins, as in Textual's."""
            cuts = self.cuts
            chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
            rows = sorted(extent)
            for widget, (region, clip) in self.visible_widgets.items():
                x, top, width, height = region.intersection(clip)
                if not width or not height:
                    continue
                end = x + width
                first = bisect_left(rows, top)
                mine = [
                    y
                    for y in rows[first : bisect_left(rows, top + height, first)]
                    if _shows(chops[y], cuts[y], max(x, extent[y][0]), min(end, extent[y][1]))
                ]
                if not mine:
                    continue
                # one call for all its lines: a call costs as much as several lines already drawn (kept by Textual)
                strips = widget.render_lines(Region(x - region.x, mine[0] - region.y, width, mine[-1] - mine[0] + 1))
                for y in mine:
                    _fill(chops[y], cuts[y], x, end, strips[y - mine[0]])
            return chops

    def _shows(chops_line: dict[int, Strip | None], line_cuts: list[int], start: int, end: int) -> bool:
        """A cut of the line between `start` and `end` (a widget's columns that changed) not drawn yet."""
        if start >= end:
            return False
        i = max(bisect_right(line_cuts, start) - 1, 0)
        while i < len(line_cuts) - 1 and line_cuts[i] < end:
            if chops_line.get(line_cuts[i]) is None:
                return True
            i += 1
        return False

    def _fill(chops_line: dict[int, Strip | None], line_cuts: list[int], x: int, end: int, strip: Strip) -> None:
        """A widget's strip on a line, divided at the line's cuts; a cut already drawn (by a widget in front) stays."""
        final_cuts = [cut for cut in line_cuts if end >= cut >= x]
        for cut, part in zip(final_cuts, strip.divide([cut - x for cut in final_cuts[1:]]), strict=False):
            if chops_line.get(cut) is None:
                chops_line[cut] = part
