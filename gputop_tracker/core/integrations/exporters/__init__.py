"""Live figures for outside monitoring systems (Prometheus: an HTTP endpoint, a node_exporter textfile).

An exporter is fed the messages the front end already receives from the sampler (`Exporter.observe`) and
serves the latest of them; nothing here imports textual. The library behind one (prometheus-client) is an
optional extra, imported only when the feature is asked for (`open_exporter`).
"""

from __future__ import annotations

from gputop_tracker.core.integrations.exporters.base import EXTRA, Exporter, ExportError, ExportOptions, SessionInfo


def open_exporter(options: ExportOptions, info: SessionInfo) -> Exporter | None:
    """The exporter `options` ask for, its endpoint bound (serving starts with `Exporter.start`), or None when
    none is asked for. ExportError (one line) when the library is missing, the address is bad or in use."""
    if not options.enabled:
        return None
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        flag = options.flag if options.prometheus else options.textfile_flag
        raise ExportError(
            f"{flag} needs prometheus-client: pip install 'prometheus-client>=0.17' "
            f"(the {EXTRA} extra: 'gputop-tracker[{EXTRA}]', or '.[{EXTRA}]' in a checkout)"
        ) from None
    from gputop_tracker.core.integrations.exporters.prometheus import open_prometheus

    return open_prometheus(options, info)


__all__ = ["ExportError", "ExportOptions", "Exporter", "SessionInfo", "open_exporter"]
