"""The `gputop-track` console script: a Ctrl-C while the tool is still loading ends it quietly (exit 130).

Standard library only, so the handler is in place before anything heavy is imported: a KeyboardInterrupt
raised inside an import would otherwise print a long traceback."""

from __future__ import annotations

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as console.EXIT_INTERRUPTED


def main() -> int:
    try:
        from gputop_tracker.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
