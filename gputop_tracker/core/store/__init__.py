"""Saved sessions: the store (one JSON file per session), the history list's rows, and sessions as files."""
