"""The terminal UI (textual): the live view and the history view. Core never imports this."""
