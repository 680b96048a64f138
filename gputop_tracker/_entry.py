"""The `gputop-track` console script: a Ctrl-C while the tool is still loading ends it quietly (exit 130).

Standard library only, so the handler is in place before anything heavy is imported: a KeyboardInterrupt
raised inside an import would otherwise print a long traceback. Python wraps one that lands in some parts of
class creation (a dataclass field's __set_name__) in a RuntimeError: that one is an interrupt too."""

from __future__ import annotations

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as console.EXIT_INTERRUPTED


def _interrupted(e: BaseException | None) -> bool:
    """A KeyboardInterrupt, or an exception raised because of one."""
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, KeyboardInterrupt):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def main() -> int:
    try:
        from gputop_tracker.cli.entry import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:
        if _interrupted(e):
            return EXIT_INTERRUPTED
        raise
