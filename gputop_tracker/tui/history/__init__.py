"""Session history: browse, inspect, compare, export and delete the sessions saved in the store.

`screens/sessions.HistoryScreen(store_dir)` is a plain Screen so the live app can push it (`h`); `app.run_history`
shows it in its own small app (`gputop-track --history`). The list reads each file without its timeline
(`store.list_entries(timeline=False)`: 1,000 sessions in ~0.15 s; on the UI thread for a usual store, in a
worker past SYNC_LOAD_MAX files); the detail and compare screens read the one or two files they show in
full. Unreadable files are rows with the reason, never exceptions. The rows, their filter and sort and
the comparison of two sessions are worked out in `core.report.listing`; the charts are `tui.widgets.charts`.
One screen a file under `screens/`; the pieces they share in `parts.py`.
"""
