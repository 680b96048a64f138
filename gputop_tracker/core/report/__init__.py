"""The summary shown: text and JSON reports, plots, comparisons, cluster-job views and scheduler advice.
Its face: `__all__` (`core/face.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop_tracker.core.face import lazy

_FACE = {
    "BlockRun": "blockspans",
    "COLUMNS": "listing",
    "COLUMN_BY_KEY": "listing",
    "Column": "listing",
    "Row": "listing",
    "SORTABLE": "listing",
    "TimelineColumns": "columns",
    "block_spans": "listing",
    "compare_rows": "listing",
    "count_session_files": "listing",
    "filter_rows": "listing",
    "group_label": "job_listing",
    "grouped": "job_listing",
    "is_group": "job_listing",
    "load_full": "listing",
    "local_time": "listing",
    "percent_or_dash": "listing",
    "plot": "",
    "render": "",
    "timeline_series": "listing",
}
__all__ = [
    "COLUMNS",
    "COLUMN_BY_KEY",
    "SORTABLE",
    "BlockRun",
    "Column",
    "Row",
    "TimelineColumns",
    "block_spans",
    "compare_rows",
    "count_session_files",
    "filter_rows",
    "group_label",
    "grouped",
    "is_group",
    "load_full",
    "local_time",
    "percent_or_dash",
    "plot",
    "render",
    "timeline_series",
]
__getattr__ = lazy(__name__, _FACE, globals())

if TYPE_CHECKING:
    from gputop_tracker.core.report import plot, render
    from gputop_tracker.core.report.blockspans import BlockRun
    from gputop_tracker.core.report.columns import TimelineColumns
    from gputop_tracker.core.report.job_listing import group_label, grouped, is_group
    from gputop_tracker.core.report.listing import (
        COLUMN_BY_KEY,
        COLUMNS,
        SORTABLE,
        Column,
        Row,
        block_spans,
        compare_rows,
        count_session_files,
        filter_rows,
        load_full,
        local_time,
        percent_or_dash,
        timeline_series,
    )
