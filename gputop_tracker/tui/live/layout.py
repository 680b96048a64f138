"""The live view's layout rules: how many rows the charts, the output pane and the side panels get at a
terminal's size. Plain functions of the size (the App sets the heights they give)."""

from __future__ import annotations

NARROW = 100  # columns: below this the panels stack and the table drops a column
MIN_SIZE = (40, 10)  # columns, rows: below either the view says so instead of drawing pieces of itself


def fit_heights(height: int, narrow: bool, side_need: int = 0) -> tuple[int, int, int]:
    """Rows of the charts, the output pane and (narrow: stacked under the table) the side panels. They grow with
    the terminal (the side panels keep what they need at 120x40); on a short one the header, the footer and a
    table with three process rows come first, then the output, then the charts, then the side panels, so
    nothing is cut off and the screen never scrolls. Wide, the side panels (`side_need` rows) stand beside the
    table: the charts, then the output give them room (see `wide_fits`)."""
    if narrow:
        return _stacked(height, side_need)
    charts, output = min(14, max(7, (height - 19) // 3)), min(12, max(6, height // 6))
    room = height - 3 - 6  # the header (2), the footer (1), the table (its borders, labels and three rows)
    output = min(output, room) if room >= 3 else 0  # a border and one line at least
    room -= output
    charts = min(charts, room) if room >= 5 else 0  # a title, two plot rows, the axis and its labels
    return (*_beside_the_side(height, charts, output, side_need), 0)


def _stacked(height: int, side_need: int) -> tuple[int, int, int]:
    """Narrow: after the table's three rows, the output's least (a border and a line), then the side panels'
    figures (at most 8 rows), then the rest of the output, then the charts."""
    room = height - 3 - 6
    output = MIN_OUTPUT if room >= MIN_OUTPUT else 0
    room -= output
    side = max(0, min(side_need or 8, 8, room))
    room -= side
    more = min(4 - output, room) if output else 0
    room -= more
    charts = 5 if room >= 5 else 0
    return charts, output + more, side


MIN_CHARTS, MIN_OUTPUT = 5, 3  # the fewest rows the charts (title, two plot rows, the axis) and the output keep


def _beside_the_side(height: int, charts: int, output: int, side_need: int) -> tuple[int, int]:
    """Wide: the charts, then the output, shrink (to their least) until the main row holds the side panels."""
    short = side_need - (height - 3 - charts - output)
    if short > 0 and charts > MIN_CHARTS:
        give = min(short, charts - MIN_CHARTS)
        charts, short = charts - give, short - give
    if short > 0 and output > MIN_OUTPUT:
        output -= min(short, output - MIN_OUTPUT)
    return charts, output


def wide_fits(height: int, side_need: int) -> bool:
    """The side panels fit beside the table with the charts and the output at their least: otherwise (200x20,
    or 120x30 with two GPUs) the panels stack under the table in their compact form, as on a narrow terminal,
    rather than lose the run's figures below the screen's edge."""
    return height - 3 - MIN_CHARTS - MIN_OUTPUT >= side_need


ROW_STEP = 4  # the table's rows are counted in steps of this: a short-lived child does not move the output's edge


def with_spare_rows(height: int, heights: tuple[int, int, int], side_need: int, n_rows: int, narrow: bool) -> int:
    """The output pane's rows once the table keeps only the rows its processes need (a step more, for those to
    come): with 5 processes the table showed ~20 empty rows while the output had 6. `heights`: the charts',
    the output's and (narrow) the side panels' rows from `fit_heights`; `n_rows`: the table's rows now (none
    yet: nothing given)."""
    charts, output, side = heights
    if not n_rows or not output:
        return output
    table = -(-(n_rows + 1) // ROW_STEP) * ROW_STEP + 3  # its borders and labels, a free row at least
    main = height - 3 - charts - output  # the header (2), the footer (1)
    need = table + min(side, side_need) if narrow else max(table, side_need)
    return output + max(0, main - need)
